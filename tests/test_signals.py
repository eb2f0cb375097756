"""Issue 33, signals: SIGTERM and SIGHUP to labkit while it runs a child are handled as Ctrl-C:
nsys stops the program and writes what it recorded, labkit says so in one line, and nothing is
left behind (no 0-byte report that blocks a retry, no child still running). A profile's time limit
stops it the same way. Real nsys."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.alone  # it kills, interrupts or waits out nsys and the programs it records: how fast they end decides what it sees

ROOT = Path(__file__).resolve().parents[1]
NSYS = shutil.which("nsys") or os.environ.get("LABKIT_NSYS")


def _wait_for(pred, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.nsys
@pytest.mark.skipif(not NSYS, reason="nsys not installed (scripts/install-nsys)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_profile_keeps_the_report_on_sigterm_and_sighup(tmp_path, sig):
    flag = tmp_path / "started"
    prog = f"import pathlib, time; pathlib.Path({str(flag)!r}).touch(); time.sleep(60)"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    p = subprocess.Popen([sys.executable, "-m", "labkit", "profile", "--name", "run", "--outdir", str(tmp_path / "out"),
                          "--trace", "osrt", "--summary", "none", "--", sys.executable, "-c", prog],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(flag.exists, 60), "the profiled program never started"
        time.sleep(1.0)
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert p.returncode == 130 and len(lines) == 1, (p.returncode, err)
    assert f"stopped by {sig.name}" in lines[0] and "kept" in lines[0]
    rep = tmp_path / "out" / "run.nsys-rep"
    assert rep.exists() and rep.stat().st_size > 0  # the report nsys could finish
    assert not list(tmp_path.glob("nsys-report-*.qdstrm"))


@pytest.mark.nsys
@pytest.mark.skipif(not NSYS, reason="nsys not installed (scripts/install-nsys)")
def test_a_profile_past_its_time_limit_is_stopped_its_report_kept(tmp_path):
    # done, then waits at exit for a thread nobody ends: as a program nsys 2022.4 hangs at its exit
    script = tmp_path / "never_exits.py"
    script.write_text("import threading\nprint('work done', flush=True)\n"
                      "threading.Thread(target=threading.Event().wait).start()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "labkit", "profile", "--name", "run", "--outdir", str(tmp_path / "out"),
                        "--trace", "osrt", "--timeout", "3", "--summary", "none", "--", sys.executable, str(script)],
                       env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 1 and len(lines) == 1, (p.returncode, p.stderr)
    assert "ran past its 3 s limit" in lines[0] and "the report of the run so far is kept" in lines[0], lines[0]
    assert took < 3 + 90, took  # stopped, not waited on
    import psutil

    left = [q for q in psutil.process_iter(["cmdline"]) if str(script) in " ".join(q.info["cmdline"] or ())]
    assert not left, left
    import labkit

    rep = labkit.load_report(tmp_path / "out" / "run.nsys-rep")
    assert "work done" in (tmp_path / "out" / "run.log").read_text()
    assert len(rep.osrt)  # the run so far, as recorded
    assert not list(tmp_path.glob("nsys-report-*.qdstrm"))


def test_a_benchmark_run_stops_on_sigterm_with_its_child(tmp_path):
    pidfile = tmp_path / "child.pid"
    child = f"import os, pathlib, time; pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid())); time.sleep(60)"
    driver = ("import sys\nfrom labkit.bench.runner import _run_once\n"
              "try:\n"
              f"    _run_once([sys.executable, '-c', {child!r}], log=__import__('pathlib').Path({str(tmp_path / 'r.log')!r}),"
              " env=None, timeout=120, step='s', what='run 1')\n"
              "except KeyboardInterrupt as exc:\n"
              "    print(exc.args[0], file=sys.stderr); sys.exit(130)\n")
    p = subprocess.Popen([sys.executable, "-c", driver], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(pidfile.exists, 60)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and err.strip() == "stopped by SIGTERM"
    pid = int(pidfile.read_text())
    assert _wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
                     10)


def test_run_lab_names_an_interrupt_in_one_line():
    sys.path.insert(0, str(ROOT / "scripts"))
    import run_lab

    try:
        try:
            raise KeyboardInterrupt("stopped by SIGTERM")
        except KeyboardInterrupt:
            raise RuntimeError("Kernel died while shutting down")  # nbclient's chained error
    except RuntimeError as exc:
        line = run_lab.stopped(exc)
    assert line.startswith("run_lab: stopped by SIGTERM:") and "\n" not in line
    assert run_lab.stopped(ValueError("x")) is None
