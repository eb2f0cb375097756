"""No markdown cell of the lab types a measured absolute figure (a throughput, a time) of some
machine as if it were the reader's: expected results are relative to the reader's own baseline,
or computed in a code cell, or labelled as the reference machine's (issue 21)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# a measured absolute figure: a number with a throughput or time unit
FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(\.\d+)?\s*(frames/s|frames per second|fps|ms|s)(?![\w/])")
# ... unless its paragraph says whose figure it is
LABELLED = re.compile(r"H100 reference|reference machine|committed (CPU )?reference|reference ledger|"
                      r"reports/reference/", re.I)


def paragraphs(nb: Path):
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # code in markdown is code, not a claim
        text = re.sub(r"`[^`]*`", "", text)  # inline code: names, flags, expressions
        for para in re.split(r"\n\s*\n", text):
            yield i, para


def typed_figures(nb: Path) -> list[str]:
    return [f"{nb.name} cell {i}: {m.group(0)!r} in: {para.strip()[:160]!r}"
            for i, para in paragraphs(nb) if not LABELLED.search(para) for m in FIGURE.finditer(para)]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_no_markdown_types_a_measured_figure_as_the_readers(nb):
    assert typed_figures(nb) == []


def test_the_check_finds_a_typed_figure(tmp_path):
    nb = tmp_path / "99_x.ipynb"
    cell = {"cell_type": "markdown", "metadata": {}, "source": ["Expected: about 15.2 frames/s, `infer` 83 ms.\n\n",
                                                                "On the H100 reference: 1225.6 fps.\n\n",
                                                                "Relative: 2.1x your baseline; `--queue-size 4`."]}
    nb.write_text(json.dumps({"cells": [cell]}))
    found = typed_figures(nb)
    assert len(found) == 2 and "15.2 frames/s" in found[0] and "83 ms" in found[1]


def test_every_h100_reference_label_names_the_commit_behind_it():
    from labbook.evidence import H100_COMMIT, LABEL

    assert H100_COMMIT in LABEL
    assert f"**`{H100_COMMIT}`**" in (ROOT / "reports" / "reference" / "h100" / "EVIDENCE.md").read_text()
    for nb in NOTEBOOKS:
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            text = "".join(cell["source"])
            for m in re.finditer(r"H100 reference", text):
                near = text[m.start():m.start() + 120]
                assert H100_COMMIT in near or "H100_COMMIT" in near or "the commit" in near, f"{nb.name} cell {i}: {near!r}"
