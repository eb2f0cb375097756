"""``%%nsys`` (``%load_ext labkit``): one cell of a real notebook, recorded by real nsys in the kernel
"Python (labkit nsys)", installed into a temporary Jupyter data folder and run by nbclient; the same
magic in a plain kernel says in one line that it cannot record and runs the cell; the kernelspec
keeps a kernel of the same name that labkit did not write."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SETUP = """%load_ext labkit
from labkit import annotate
N = 12
def work(i):
    with annotate.range("step", batch=i):
        return sum(k * k for k in range(20_000))
for i in range(3):  # earlier work: never in the cell's report
    with annotate.range("before"):
        work(i)"""
RECORDED = """%%nsys --name loop --var rep
inside = [work(i) for i in range(N)]"""
AFTER = """print("inside", len(inside), "report", rep.path.name)"""


def _notebook(tmp_path: Path, kernel: str, cells: list[str], env: dict, **options) -> "nbformat.NotebookNode":
    """Execute ``cells`` in a new notebook on ``kernel`` (Unix sockets, as run_lab does), with ``env``
    set for this process and so for the kernel, and nbclient's ``options``; returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient
    from traitlets.config import Config

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    ipc = Config({"KernelManager": {"transport": "ipc", "ip": str(tmp_path / "kernel")}})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=240, kernel_name=kernel, config=ipc,
                       resources={"metadata": {"path": str(tmp_path)}}, **options).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def _install(tmp_path: Path) -> dict:
    data = tmp_path / "jupyter"
    env = {"JUPYTER_DATA_DIR": str(data), "LABKIT_REPORTS": str(tmp_path / "reports"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "labkit", "kernel", "install"], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    spec = json.loads((data / "kernels" / "labkit-nsys" / "kernel.json").read_text())
    assert spec["display_name"] == "Python (labkit nsys)" and spec["interrupt_mode"] == "message"
    return env


@pytest.mark.nsys
@pytest.mark.slow
def test_nsys_cell_records_that_cell_only_in_the_learners_kernel(tmp_path):
    """The kernel under ``nsys launch``: the %%nsys cell uses cell 1's variable and function, its report
    holds its own 12 ``step`` ranges and none of the 3 ``before`` ranges run earlier, the cell shows a
    timeline and the findings line, and what it defined is there after it (twice: the second report is
    ``loop-2``, the first kept)."""
    import labkit

    env = _install(tmp_path)
    nb = _notebook(tmp_path, "labkit-nsys", [SETUP, RECORDED, AFTER, RECORDED.replace("N)", "4)"), AFTER], env)
    shown = _text(nb.cells[1])
    assert "%%nsys: " in shown and "loop.nsys-rep" in shown, shown
    assert "\nfindings" in shown, shown  # the findings line, whatever the rules find
    assert any("image/png" in o.get("data", {}) for o in nb.cells[1].outputs), "no timeline"
    assert _text(nb.cells[2]) == "inside 12 report loop.nsys-rep\n"
    assert _text(nb.cells[4]) == "inside 4 report loop-2.nsys-rep\n"
    folder = tmp_path / "reports" / "magic"
    first = labkit.load_report(folder / "loop.nsys-rep")
    names = first.nvtx.loc[first.nvtx["kind"] != "mark", "name"].value_counts(dropna=False).to_dict()
    assert names == {"step": 12}, names
    assert sorted(first.nvtx.loc[first.nvtx["name"] == "step", "payload"].dropna().astype(int)) == list(range(12))
    second = labkit.load_report(folder / "loop-2.nsys-rep")
    assert (second.nvtx["name"] == "step").sum() == 4
    assert oct((folder / "loop.nsys-rep").stat().st_mode & 0o777) != "0o666"  # not nsys's umask 0000


@pytest.mark.nsys
@pytest.mark.slow
def test_an_interrupted_nsys_cell_keeps_its_report_and_the_next_cell_records_again(tmp_path):
    """Jupyter's interrupt (here nbclient's, on a cell that would sleep 10 minutes) stops the cell,
    not nsys: the interrupted cell's report is written and says it raised, and the kernel's next
    %%nsys cell records too (a signal to the kernel's process group would end nsys's session)."""
    env = _install(tmp_path)
    stuck = "%%nsys --name stuck\nimport time\nwith annotate.range('waiting'):\n    time.sleep(600)"
    nb = _notebook(tmp_path, "labkit-nsys", [SETUP, stuck, RECORDED], env, allow_errors=True,
                   interrupt_on_timeout=True, timeout_func=lambda cell: 20 if "sleep(600)" in cell.source else 240)
    shown = _text(nb.cells[1])
    assert "stuck.nsys-rep" in shown and "the cell raised KeyboardInterrupt" in shown, shown
    assert "loop.nsys-rep" in _text(nb.cells[2]), _text(nb.cells[2])
    import labkit

    nv = labkit.load_report(tmp_path / "reports" / "magic" / "loop.nsys-rep").nvtx
    assert (nv["name"] == "step").sum() == 12, nv["name"].value_counts(dropna=False)  # every name, unnamed too


def test_nsys_cell_in_a_plain_kernel_says_so_in_one_line_and_runs_the_cell(tmp_path):
    """Jupyter's own python3 kernel is not under nsys: one line naming the kernel to switch to and how
    to install it, the cell still runs (its variable is there after), and no report is written."""
    env = {"LABKIT_REPORTS": str(tmp_path / "reports"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    nb = _notebook(tmp_path, "python3", [SETUP, RECORDED, AFTER.replace('rep.path.name', '"none"')], env)
    lines = _text(nb.cells[1]).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("%%nsys: not recorded: this kernel does not run under Nsight Systems")
    assert '"Python (labkit nsys)"' in lines[0] and "python -m labkit kernel install" in lines[0]
    assert lines[0].endswith("the cell ran without a profile.")
    assert _text(nb.cells[2]) == "inside 12 report none\n"
    assert not (tmp_path / "reports" / "magic").exists()


def test_kernel_install_keeps_a_kernel_of_that_name_labkit_did_not_write(tmp_path):
    """A kernelspec named labkit-nsys that is someone else's stays as it was: one line, status 1."""
    folder = tmp_path / "kernels" / "labkit-nsys"
    folder.mkdir(parents=True)
    theirs = json.dumps({"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                         "display_name": "theirs", "language": "python"})
    (folder / "kernel.json").write_text(theirs)
    out = subprocess.run([sys.executable, "-m", "labkit", "kernel", "install"], capture_output=True, text=True,
                         env={**os.environ, "JUPYTER_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "labkit did not write" in out.stderr and "jupyter kernelspec remove labkit-nsys" in out.stderr
    assert (folder / "kernel.json").read_text() == theirs


def _exercise() -> tuple[list[str], str]:
    """Notebook 03's exercise in code: its code cells as stored (from its heading to its expected
    result), and the loop cell of its solution."""
    import nbformat

    cells = nbformat.read(ROOT / "notebooks" / "03_Batching_and_Streams.ipynb", as_version=4).cells
    start = next(i for i, c in enumerate(cells) if c.source.startswith("### Hands-on in code"))
    end = next(i for i, c in enumerate(cells) if i > start and c.source.startswith("**Expected**"))
    solution = cells[end].source.split("```python\n", 1)[1].split("```", 1)[0].strip()
    return [c.source for c in cells[start:end] if c.cell_type == "code"], solution


@pytest.mark.nsys
@pytest.mark.slow
def test_notebook_03s_batching_loop_exercise_checks_the_learners_loop_against_its_trace(tmp_path):
    """The exercise's cells in the kernel "Python (labkit nsys)" (small mode): as stored (one frame a
    call) the check says "Not yet"; with the solution's loop it says "Yes", with calls and frames from
    the trace; the loop's outputs (one heatmap a frame) are there after the %%nsys cell."""
    code, solution = _exercise()
    assert len(code) == 4 and code[2].startswith("%%nsys --name my_batches") and "lab.check.loop(" in code[3]
    env = {**_install(tmp_path), "LABKIT_MODE": "small"}
    after = "print('outputs', len(out_mine), len(out_one))"
    nb = _notebook(tmp_path, "labkit-nsys", [*code, solution, code[3], after], env)
    checks = [o["data"]["text/markdown"] for i in (3, 5) for o in nb.cells[i].outputs if "text/markdown" in o.get("data", {})]
    assert checks[0].startswith("**Not yet.**") and "called `infer` 16 times for 16 frames (B = 4)" in checks[0]
    assert checks[1].startswith("**Yes.**") and "called `infer` 4 times for 16 frames (B = 4), against 16" in checks[1]
    assert _text(nb.cells[6]) == "outputs 16 16\n"
    print(checks[1])


def test_notebook_03s_batching_loop_exercise_in_a_plain_kernel_runs_and_waits(tmp_path):
    """As the headless lab runs it (Jupyter's python3 kernel): each %%nsys cell says in one line that it
    did not record and runs its loop, and the check says there is nothing to check yet, naming the kernel."""
    code, _ = _exercise()
    env = {"LABKIT_REPORTS": str(tmp_path / "reports"), "LABKIT_MODE": "small",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    nb = _notebook(tmp_path, "python3", [*code, "print('outputs', len(out_mine), len(out_one))"], env)
    for i in (1, 2):
        lines = _text(nb.cells[i]).splitlines()
        assert len(lines) == 1 and lines[0].startswith("%%nsys: not recorded: this kernel does not run under"), lines
    check = next(o["data"]["text/markdown"] for o in nb.cells[3].outputs if "text/markdown" in o.get("data", {}))
    assert check.startswith("Nothing to check yet") and '"Python (labkit nsys)"' in check, check
    assert _text(nb.cells[4]) == "outputs 16 16\n"


def test_the_launcher_starts_nsys_again_only_where_it_ended_before_starting_the_kernel(tmp_path):
    """run_kernel's retry, on real processes in nsys's place: a command that fails before the point where
    the kernel would start runs 3 times (START_TRIES); one that got past it (the kernel ran, then ended
    with an error) runs once, and its status comes back."""
    from labkit.record.kernel import run_kernel

    count = tmp_path / "count"
    early = ["/bin/sh", "-c", f'echo x >> "{count}"; exit 3']
    assert run_kernel(early, dict(os.environ)) == 3 and count.read_text() == "x\nx\nx\n"
    count.unlink()
    late = ["/bin/sh", "-c", f': > "$LABKIT_KERNEL_STARTED"; echo x >> "{count}"; exit 5']
    assert run_kernel(late, dict(os.environ)) == 5 and count.read_text() == "x\n"
