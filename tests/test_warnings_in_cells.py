"""labkit's own warnings show in a notebook as a markdown line of their cell, not on stderr: a
flagged benchmark in 08 reached stderr as a box quoting the wrong source line (a CI run, ranks2
carried 69 frames into one rank's window). Run in a real kernel, as the lab runs."""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def _run(cells: list[str], tmp_path: Path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


@pytest.mark.slow
def test_labkit_warnings_are_lines_in_their_cell_and_others_stay_python_warnings(tmp_path):
    nb = _run([
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\nimport warnings\nimport labbook as lab\n"
        "from labkit.bench import BenchWarning\nfrom labkit.bench.tables import SpeedupWarning",
        "warnings.warn(\"benchmark 'ranks2' is flagged: too short\", BenchWarning)",
        "warnings.warn('1 flagged ledger row(s) left out', SpeedupWarning)",
        "warnings.warn('not labkit', UserWarning)",
    ], tmp_path)
    outs = [c["outputs"] for c in nb.cells]
    assert not outs[0], outs[0]
    for cell, kind in ((outs[1], "BenchWarning"), (outs[2], "SpeedupWarning")):
        assert not [o for o in cell if o.get("name") == "stderr"], cell
        shown = [o["data"]["text/markdown"] for o in cell if o["output_type"] == "display_data"]
        assert len(shown) == 1 and shown[0].startswith(f"**{kind}:**"), cell
    assert "ranks2" in outs[1][0]["data"]["text/markdown"]
    other = [o for o in outs[3] if o.get("name") == "stderr"]
    assert other and "UserWarning: not labkit" in "".join(other[0]["text"]), outs[3]


def test_outside_a_kernel_python_shows_labkit_warnings_as_ever():
    import warnings

    import labbook  # noqa: F401  (imported: the hook is installed only in a kernel)

    assert not hasattr(warnings.showwarning, "labbook"), sys.modules.get("IPython")
