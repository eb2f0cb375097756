"""The lab's notebooks: stored without outputs, and all run top to bottom headless (small mode)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from run_lab import lab_notebooks  # noqa: E402

BOOKS = lab_notebooks(ROOT / "notebooks")


def test_the_lab_has_its_notebooks_in_order():
    names = [b.name for b in BOOKS]
    assert len(names) >= 8, names
    assert names[0].startswith("00_") and names[-1].startswith("07_")
    assert [n[:2] for n in names] == sorted(n[:2] for n in names)


@pytest.mark.parametrize("book", BOOKS, ids=lambda p: p.name)
def test_stored_notebook_has_no_outputs(book):
    nb = json.loads(book.read_text())
    dirty = [i for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{book.name}: cells {dirty} carry outputs; clear them before committing"


@pytest.mark.parametrize("book", BOOKS, ids=lambda p: p.name)
def test_code_cells_stay_short(book):
    nb = json.loads(book.read_text())
    lengths = [len("".join(c["source"]).strip().splitlines()) for c in nb["cells"] if c["cell_type"] == "code"]
    assert lengths and max(lengths) <= 15, f"{book.name}: a code cell has {max(lengths)} lines; move logic to labkit"


@pytest.mark.nsys
@pytest.mark.slow
def test_whole_lab_runs_headless_in_small_mode(tmp_path):
    """`make lab MODE=small` in one go: every notebook, in order, with no error."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_lab.py"), "--mode", "small",
                          "--out", str(tmp_path / "executed")], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "LABKIT_MODE": "small", "LABKIT_REPORTS": str(tmp_path / "reports")}, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    executed = sorted(p.name for p in (tmp_path / "executed").glob("*.ipynb"))
    assert executed == [b.name for b in BOOKS]
