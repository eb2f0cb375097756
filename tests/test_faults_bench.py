"""Issue 25's faults around benchmarks, ledgers and the doctor, tried for real: two processes
running one step in the same second, an application killed by SIGKILL, results that carry the
application's own warnings, a ledger path that is a folder or unreadable (a real non-root user),
LABKIT_REPORTS pointing at a file or a full disk (a real tmpfs), results files' permissions."""
from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from faultkit import fill, mount, open_tmp, run_as, user  # noqa: F401 (fixtures)

from labkit import bench, doctor
from labkit.annotate import write_results
from labkit.errors import OutputError
from labkit.bench.ledger import Ledger

pytestmark = pytest.mark.alone  # it kills, interrupts or waits out nsys and the programs it records: how fast they end decides what it sees

APP = textwrap.dedent('''
    import argparse, os, signal, sys, time
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--fps", type=float, default=10)
    p.add_argument("--sleep", type=float, default=0)
    p.add_argument("--warn", default="")
    p.add_argument("--die", action="store_true")
    p.add_argument("--counter", default="")
    p.add_argument("--warmup", type=int, default=0)
    a = p.parse_args()
    if a.counter:
        open(a.counter, "a").write("x")
    print("model loaded without error", file=sys.stderr, flush=True)
    if a.die:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(a.sleep)
    from labkit.annotate import write_results
    write_results(a.results, {"status": "ok", "fps": a.fps, "frames": 20, "warmup": 0, "timed_frames": 20,
                              "warmup_frames": 0, "seconds": 20 / a.fps, "latency_ms": {"p50": 1.0, "p99": 2.0},
                              "stages": {}, "stage_detail": {}, "accuracy": {}, "config": {}, "model": None,
                              "output_frames": 0, "warnings": [a.warn] if a.warn else []})
''')


@pytest.fixture
def app(tmp_path):
    path = tmp_path / "app.py"
    path.write_text(APP)
    return [sys.executable, str(path)]


def test_two_processes_running_one_step_in_the_same_second_get_their_own_runs(tmp_path, app):
    ledger, results = tmp_path / "ledger.jsonl", tmp_path / "results"
    code = ("import sys, time; from labkit import bench\n"
            "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
            f"bench.run({app!r} + ['--fps', sys.argv[2], '--sleep', sys.argv[3]], step='baseline', repeats=1, "
            f"progress=False, ledger={str(ledger)!r}, results_dir={str(results)!r})\n")
    start = str(int(time.time()) + 3 + 0.05)  # both start early in the same second
    procs = [subprocess.Popen([sys.executable, "-c", code, start, fps, sl], env={**os.environ, "PYTHONPATH":
                                                                                 os.pathsep.join(sys.path)})
             for fps, sl in (("10", "0.6"), ("40", "0.1"))]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    rows = [r for r in Ledger(ledger).rows() if r["status"] == "ok"]
    assert len({r["name"] for r in rows}) == 2, [r["name"] for r in rows]
    for r in rows:  # each row's figure is its own run's
        assert json.loads(Path(r["paths"]["results"][0]).read_text())["fps"] == r["metrics"]["fps"]
    assert sorted(r["metrics"]["fps"] for r in rows) == [10.0, 40.0]


def test_an_application_killed_by_sigkill_is_the_reason(tmp_path, app):
    with pytest.raises(bench.BenchError) as err:
        bench.run(app + ["--die"], step="oom", repeats=1, progress=False, results_dir=tmp_path)
    reason = bench.error_line(err.value)
    assert "killed by SIGKILL" in reason and "\n" not in reason


def test_the_application_s_own_warnings_flag_the_ledger_row(tmp_path, app):
    ledger = tmp_path / "ledger.jsonl"
    with pytest.warns(bench.BenchWarning, match="warm-up"):
        bench.run(app + ["--warn", "clip shorter than --warmup: timing includes warm-up"], step="short",
                  repeats=1, progress=False, results_dir=tmp_path, ledger=ledger)
    row = Ledger(ledger).rows()[-1]
    assert row["status"] == "flagged"
    assert any("timing includes warm-up" in f for f in row["flags"])


def test_a_ledger_path_that_is_a_folder_is_refused_before_any_run(tmp_path, app):
    folder = tmp_path / "ledger.jsonl"
    folder.mkdir()
    counter = tmp_path / "ran"
    with pytest.raises(OutputError, match="is a folder") as err:
        bench.run(app + ["--counter", str(counter)], step="s", repeats=1, progress=False, results_dir=tmp_path,
                  ledger=folder)
    assert not counter.exists() and "\n" not in str(err.value)
    with pytest.raises(OutputError, match="is a folder"):
        Ledger(folder).read()


def test_an_unreadable_ledger_is_one_line_as_another_user(open_tmp, user):
    ledger = open_tmp / "ledger.jsonl"
    Ledger(ledger).append({"step": "baseline", "metrics": {"fps": 1.0}})
    ledger.chmod(0o600)  # root's, not the user's
    code = ("import labkit.bench.ledger as L, labkit.errors as E\n"
            f"try:\n L.Ledger({str(ledger)!r}).read()\nexcept E.OutputError as e:\n print('ERR', e)")
    res = run_as(user, code, preload="labkit.bench.ledger, labkit.errors, pandas")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ERR") and "permission" in res.stdout and len(res.stdout.splitlines()) == 1


def test_doctor_checks_the_reports_folder_labkit_will_use(tmp_path, monkeypatch, mount):
    afile = tmp_path / "reports"
    afile.write_text("not a folder")
    monkeypatch.setenv("LABKIT_REPORTS", str(afile))
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    checks = {c.name: c for c in doctor.run_checks()}
    assert checks["disk"].status == "FAIL" and "LABKIT_REPORTS" in checks["disk"].detail + checks["disk"].fix
    full = mount("2m")
    fill(full)
    monkeypatch.setenv("LABKIT_REPORTS", str(full / "reports"))
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(full / "cache"))
    checks = {c.name: c for c in doctor.run_checks()}
    assert checks["disk"].status == "FAIL" and checks["cache"].status == "FAIL"
    assert "LABKIT_CACHE_DIR" in checks["cache"].fix


def test_results_files_are_readable_like_logs_and_the_ledger(tmp_path):
    old = os.umask(0o022)
    try:
        write_results(tmp_path / "r.json", {"status": "ok"})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644


def test_labkit_reports_pointing_at_a_file_names_the_variable(tmp_path, app, monkeypatch):
    afile = tmp_path / "reports"
    afile.write_text("a file, not a folder")
    monkeypatch.setenv("LABKIT_REPORTS", str(afile))
    with pytest.raises(OutputError) as err:
        bench.run(app, step="s", repeats=1, progress=False)
    msg = str(err.value)
    assert "set LABKIT_REPORTS" in msg and "\n" not in msg


def test_a_killed_python_process_takes_its_benchmark_run_with_it(tmp_path, app):
    import psutil

    started = tmp_path / "started"
    code = (f"from labkit import bench; bench.run({app!r} + ['--sleep', '120', '--counter', {str(started)!r}], "
            f"step='orphan', repeats=1, progress=False, results_dir={str(tmp_path)!r})")
    parent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    t0 = time.monotonic()
    while not started.exists():
        assert time.monotonic() - t0 < 120 and parent.poll() is None, "the application never started"
        time.sleep(0.1)
    child = psutil.Process(parent.pid).children(recursive=True)
    parent.kill()  # as a dying Jupyter kernel
    parent.wait()
    try:
        gone, alive = psutil.wait_procs(child, timeout=30)
        assert not alive, "the application outlived the Python process that ran it"
    finally:
        for p in child:
            with contextlib.suppress(psutil.Error):
                p.kill()


def test_table_output_that_cannot_be_written_is_one_line_before_anything_is_printed(tmp_path, mount):
    """``labkit table --output`` into a folder a file stands in, or onto a read-only disk: one line
    naming the path and the fix, exit 1, no table printed first and no traceback."""
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(json.dumps({"step": "baseline", "status": "ok", "env": {"host": "a", "cpu": "x"},
                                  "metrics": {"fps": 10.0}, "config": {}}) + "\n")
    (tmp_path / "afile").write_text("mine\n")
    for out in (tmp_path / "afile" / "t.md", mount("64k", ro=True) / "t.md"):
        r = subprocess.run([sys.executable, "-m", "labkit", "table", str(ledger), "--output", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
        line, = r.stderr.strip().splitlines()
        assert line.startswith("labkit table: cannot ") and str(out.parent) in line and "choose another folder" in line
    assert (tmp_path / "afile").read_text() == "mine\n"
