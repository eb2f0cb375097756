"""The lab as a participant meets it: `make jupyter`'s JupyterLab, Run All in headless Chromium.

Skipped with the reason where chromium, chromium-driver, selenium or JupyterLab are absent;
CI sets LABKIT_REQUIRE_BROWSER=1 so that absence fails instead. CI runs the notebooks in
LABKIT_BROWSER_NOTEBOOKS (default ``00 01 07``); `make browser` runs them all.

07 summarizes the ledger that 00..06 fill. Running 02..06 in a browser takes most of the full
lab's time, so when they are not all in the run, the ledger starts as the committed CPU reference
ledger (reports/reference/cpu-2core/): 07 then draws the whole lab's table, with 01's fresh
baseline row appended to it.

test_solutions_in_the_browser runs a notebook again with its exercise solutions appended as cells
(01's profile under nsys and run the app): it exists only where LABKIT_BROWSER_SOLUTIONS names notebooks
(``01``; it costs 01's Run All once more, 2-3.5 min on 2 cores), so CI counts no skip for it. `make browser` runs every
notebook with its solutions in one pass (browser_lab.py all --solutions).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the launcher and the driver are scripts, not a package
import browser_lab  # noqa: E402
import jupyter_lab  # noqa: E402

pytestmark = pytest.mark.browser
WHICH = os.environ.get("LABKIT_BROWSER_NOTEBOOKS", "00 01 07").split()
SOLUTIONS = os.environ.get("LABKIT_BROWSER_SOLUTIONS", "").split()
REFERENCE_LEDGER = ROOT / "reports" / "reference" / "cpu-2core" / "ledger.reference.jsonl"


def _why_not() -> str | None:
    why = browser_lab.missing()
    if why and os.environ.get("LABKIT_REQUIRE_BROWSER"):  # set by .ci/run: CI must run this test
        pytest.fail(f"LABKIT_REQUIRE_BROWSER is set but {why}", pytrace=False)
    return why


def _assert_clean(out: browser_lab.Outcome) -> None:
    print(json.dumps(out.__dict__))
    name = out.notebook
    assert not out.timed_out, f"{name}: still running after {out.seconds} s"
    assert out.code_cells and not out.not_run, f"{name}: code cells {out.not_run} did not run"
    assert out.errors == [], f"{name}: error output: {out.errors}"
    assert out.stderr == [], f"{name}: stderr output: {out.stderr}"
    assert out.broken_images == [], f"{name}: images that did not load: {out.broken_images}"
    assert out.written == [], f"{name}: files written outside reports/ and data/: {out.written}"
    assert out.home_written == [], f"{name}: files written under $HOME outside {list(browser_lab.HOME_CACHES)}: " \
                                   f"{out.home_written}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    why = _why_not()
    if why:
        pytest.skip(why)
    reports = tmp_path_factory.mktemp("reports")
    names = browser_lab.notebooks(WHICH)
    if any(n.startswith("07") for n in names) and len(names) < len(browser_lab.notebooks(["all"])):
        shutil.copy(REFERENCE_LEDGER, reports / "ledger.jsonl")
    with browser_lab.serve(mode="small", reports=reports) as lab:
        yield lab


def test_launcher_command_as_make_jupyter_runs_it():
    argv = jupyter_lab.command(port=8899, ip="0.0.0.0")
    assert argv[1:3] == ["-m", "jupyterlab"] and "--port=8899" in argv and "--ip=0.0.0.0" in argv
    assert ("--allow-root" in argv) == (os.geteuid() == 0)
    # the token travels in the environment only: a command line is visible to every user (ps)
    assert not any("token" in a.lower() for a in argv)
    assert jupyter_lab.lab_env(mode=None, base={}, token="t0k") == {"JUPYTER_TOKEN": "t0k"}
    assert jupyter_lab.lab_env(mode="small", base={})["LABKIT_MODE"] == "small"
    # a container's URL names the address it is published on (make container-run: --url-host)
    assert jupyter_lab.url(port=8890, ip="0.0.0.0", token="t", host="gpu-box") == "http://gpu-box:8890/lab?token=t"
    assert jupyter_lab.url(port=8890, ip="127.0.0.1", token="t") == "http://127.0.0.1:8890/lab?token=t"
    assert "LABKIT_MODE" not in jupyter_lab.lab_env(mode=None, base={})
    # checkpoints in the reports folder, never notebooks/.ipynb_checkpoints/
    assert f"--FileCheckpoints.checkpoint_dir={jupyter_lab.checkpoints_dir()}" in argv
    assert jupyter_lab.checkpoints_dir({}) == ROOT / "reports" / "checkpoints"
    assert jupyter_lab.checkpoints_dir({"LABKIT_REPORTS": "/x/r"}) == Path("/x/r/checkpoints")
    with pytest.raises(SystemExit, match="MODE=small"):
        jupyter_lab.lab_env(mode="tiny", base={})


def test_make_jupyter_prints_one_url_with_the_token(tmp_path):
    """`make jupyter`'s script, as root where the test runs as root: serves, honours JUPYTER_TOKEN."""
    if browser_lab.missing() and "jupyterlab" in browser_lab.missing():
        pytest.skip(browser_lab.missing())
    port = browser_lab.free_port()
    env = dict(os.environ, JUPYTER_TOKEN="secret-token-123", JUPYTER_RUNTIME_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "scripts/jupyter_lab.py", "--port", str(port), "--mode", "small"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"JupyterLab (small mode) at: http://127.0.0.1:{port}/lab?token=secret-token-123"
        api = f"http://127.0.0.1:{port}/api/status?token=secret-token-123"
        for _ in range(120):
            try:
                with urllib.request.urlopen(api, timeout=5) as r:
                    assert "started" in json.load(r)
                break
            except OSError:
                assert proc.poll() is None, "JupyterLab exited"
                __import__("time").sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer within 60 s")
        with pytest.raises(urllib.error.HTTPError, match="403"):  # the token is required
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/sessions", timeout=5)
        # ... and it came from the environment: no process shows it on its command line (ps)
        procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        assert len(procs) > 1 and not any("secret-token-123" in " ".join(p.cmdline()) for p in procs)
    finally:
        proc.terminate()
        proc.wait(30)
    with pytest.raises(urllib.error.URLError):  # stopping the launcher stopped the server (no orphan)
        urllib.request.urlopen(api, timeout=5)


@pytest.mark.parametrize("name", browser_lab.notebooks(WHICH), ids=lambda n: n[:2])
def test_run_all_in_the_browser(lab, name, tmp_path):
    # screenshots go to the test's own folder: the committed ones (reports/browser/) are refreshed by
    # scripts/browser_lab.py --shots reports/browser, never by a test
    with browser_lab.chromium() as driver:
        out = browser_lab.run_notebook(driver, lab, name, shot=tmp_path / f"{name[:-6]}.png")
    _assert_clean(out)
    if name.startswith("01"):  # the interactive timeline rendered, and its hover names a range with its duration
        lines = out.hover.splitlines()
        assert lines and lines[0].strip(), f"{name}: hovering the interactive timeline showed nothing: {out.hover!r}"
        assert "NVTX range" in out.hover and "duration:" in out.hover and " ms" in out.hover, out.hover


def test_solutions_are_the_fenced_blocks_of_the_solution_cells():
    code = browser_lab.solutions(ROOT / "notebooks" / "01_Baseline_and_Nsight.ipynb")
    # the hands-on exercise's answer, then the two "Your turn" solutions
    assert len(code) == 3 and code[0] == 'MY_TRACE = "cuda,nvtx,osrt"'
    assert "--capture-range=nvtx" in code[1] and "baseline_omp_active" in code[2]
    assert all(not c.startswith("```") and not c.endswith("```") for c in code)


if SOLUTIONS:  # only where asked: a case that is never run where CI runs would be counted as a skip
    @pytest.mark.slow
    @pytest.mark.parametrize("name", browser_lab.notebooks(SOLUTIONS), ids=lambda n: n[:2])
    def test_solutions_in_the_browser(lab, name, tmp_path):
        """Run All, then the notebook's exercise solutions appended as cells and run: the same checks."""
        path = ROOT / "notebooks" / name
        with browser_lab.chromium() as driver:
            out = browser_lab.run_notebook(driver, lab, name, solutions_of=path,
                                           shot=tmp_path / f"{name[:-6]}_solutions.png")
        assert out.solution_cells == len(browser_lab.solutions(path)) > 0
        _assert_clean(out)  # out.written would list the notebook had the appended cells been saved


def test_the_page_reading_sees_stderr_errors_stray_files_and_cells_not_run(tmp_path):
    """The checks can fail: a notebook that writes to stderr, draws an image, writes files where
    the lab must not (its own reports/, checkpoints, $HOME), then raises; its solutions run after."""
    why = _why_not()
    if why:
        pytest.skip(why)
    import nbformat

    writes = ("from pathlib import Path\n"
              "for f in ('reports/stray.txt', '.ipynb_checkpoints/x', '../reports/ok.txt', Path.home() / 'stray.txt'):\n"
              "    Path(f).parent.mkdir(exist_ok=True); Path(f).write_text('x')")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import sys; print('a warning line', file=sys.stderr)"),
        nbformat.v4.new_code_cell("from matplotlib.figure import Figure\nfig = Figure(figsize=(2, 1))\n"
                                  "fig.subplots().plot([0, 1])\nfig"),
        nbformat.v4.new_code_cell(writes),
        nbformat.v4.new_code_cell("raise ValueError('the cell failed')"),
        nbformat.v4.new_code_cell("print('never runs')"),
        nbformat.v4.new_markdown_cell("<details><summary>Solution</summary>\n\n```python\nprint('solution ran')\n```\n\n"
                                      "```python\nimport sys; print('solution stderr', file=sys.stderr)\n```\n</details>"),
    ])
    # without a kernelspec JupyterLab asks which kernel to start
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "nbs").mkdir()
    nbformat.write(nb, tmp_path / "nbs" / "probe.ipynb")
    saved = (tmp_path / "nbs" / "probe.ipynb").read_bytes()
    with browser_lab.serve(mode="small", reports=tmp_path / "reports", notebook_dir=tmp_path / "nbs") as lab, \
            browser_lab.chromium() as driver:
        out = browser_lab.run_notebook(driver, lab, "probe.ipynb", timeout=120, watch=tmp_path,
                                       solutions_of=tmp_path / "nbs" / "probe.ipynb")
    print(json.dumps(out.__dict__))
    assert out.code_cells == 7 and out.not_run == [5] and out.solution_cells == 2
    assert out.stderr == ["a warning line", "solution stderr"]
    assert len(out.errors) == 1 and "ValueError: the cell failed" in out.errors[0]
    assert out.written == ["nbs/.ipynb_checkpoints/", "nbs/.ipynb_checkpoints/x", "nbs/reports/",
                           "nbs/reports/stray.txt"]
    assert out.home_written == ["stray.txt"]
    assert out.broken_images == [] and not out.timed_out and not out.clean
    assert (tmp_path / "nbs" / "probe.ipynb").read_bytes() == saved  # the appended cells were never saved
