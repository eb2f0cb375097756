"""Every wait on a Dask cluster is bounded and every failure is one line (labkit.ranks.cluster):
an address that speaks HTTP or never answers, a real scheduler with no workers, a worker that dies
on a report, scheduler='local' from a script without a __main__ guard; paths sent to workers are
absolute. Real processes: http.server, a silent listening socket, dask scheduler and worker."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="Dask's distributed is a labkit dependency: pip install -e .")

from labkit.ranks.cluster import ClusterError, run_tasks  # noqa: E402
from labkit.ranks.reports import load_reports  # noqa: E402
from test_ranks_dask import _stop  # noqa: E402 (one way to stop the processes a test started)

pytestmark = pytest.mark.alone  # a Dask cluster's workers against deadlines: alone

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
RANKS = [FIX / f"ranks.nsys2022.4_{r}.sqlite" for r in (0, 1)]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _summary(folder: Path, scheduler: str, env=None, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labkit", "summary", str(folder), "--scheduler", scheduler],
                          capture_output=True, text=True, timeout=timeout, env=env or ENV, cwd=folder)


@pytest.fixture
def folder(tmp_path):
    for p in RANKS:
        shutil.copy(p, tmp_path / p.name)
    return tmp_path


def _one_line(res, *words) -> None:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 1 and len(lines) == 1, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and all(w in lines[0] for w in words), lines[0]


def test_an_address_that_speaks_http_is_one_line_within_the_connect_timeout(folder):
    port = _free_port()
    http = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        t0 = time.monotonic()
        res = _summary(folder, f"tcp://127.0.0.1:{port}")
        _one_line(res, "cannot reach the Dask scheduler", f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 60
    finally:
        _stop([http])


def test_an_address_that_never_answers_is_one_line_within_the_connect_timeout(folder):
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        res = _summary(folder, f"tcp://127.0.0.1:{silent.getsockname()[1]}")
    _one_line(res, "cannot reach the Dask scheduler", "no answer")


def _scheduler(tmp_path, procs, **env) -> Path:
    sfile = tmp_path / "scheduler.json"
    procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                   "--port", "0", "--no-dashboard", "--scheduler-file", str(sfile),
                                   "--idle-timeout", "300"], env={**ENV, **env}, cwd=tmp_path, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=open(tmp_path / "dask.log", "ab")))
    deadline = time.monotonic() + 60
    while not sfile.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sfile.exists(), (tmp_path / "dask.log").read_text()[-2000:]
    time.sleep(0.5)  # written, then read whole
    return sfile


def test_a_scheduler_with_no_workers_is_a_bounded_wait_then_one_line(folder, tmp_path_factory):
    procs: list = []
    try:
        sfile = _scheduler(tmp_path_factory.mktemp("sched"), procs)
        t0 = time.monotonic()
        res = _summary(folder, str(sfile), env={**ENV, "LABKIT_DASK_WORKERS_S": "5"})
        _one_line(res, "no workers joined", "within 5 s")
        assert time.monotonic() - t0 < 60
    finally:
        _stop(procs)


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    """A scheduler that gives a task no second try (allowed-failures 0) and one worker whose working
    folder is not the tests'."""
    here = tmp_path_factory.mktemp("cluster")
    procs: list = []
    try:
        sfile = _scheduler(here, procs, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0")
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                       str(sfile), "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                                       "--death-timeout", "60", "--memory-limit", "2GiB"], env=ENV, cwd=here,
                                      start_new_session=True, stdout=subprocess.DEVNULL,
                                      stderr=open(here / "dask.log", "ab")))
        from distributed import Client

        with Client(scheduler_file=str(sfile), timeout="60s") as c:
            c.wait_for_workers(1, timeout=90)
        yield str(sfile)
    finally:
        _stop(procs)


def test_relative_paths_are_made_absolute_before_they_reach_a_worker(one_worker, monkeypatch):
    monkeypatch.chdir(ROOT)
    rel = [str(p.relative_to(ROOT)) for p in RANKS]
    on_cluster = load_reports(rel, scheduler=one_worker)
    here = load_reports(rel, scheduler="serial")
    assert on_cluster.ranks == here.ranks == [0, 1]
    assert on_cluster.nvtx_summary().equals(here.nvtx_summary())


def test_a_report_that_kills_its_worker_is_one_line_naming_the_report(one_worker):
    """The worker process really dies (os._exit) on rank 1's report: a ClusterError naming that
    report, not distributed's KilledWorker with a task key."""
    bad = str(RANKS[1])
    with pytest.raises(ClusterError) as got:
        run_tasks(lambda p, bad=bad: os._exit(7) if p == bad else Path(p).stat().st_size,
                  [str(p) for p in RANKS], scheduler=one_worker)
    text = str(got.value)
    assert "\n" not in text and RANKS[1].name in text and "worker died" in text, text


def test_local_from_a_script_without_a_main_guard_is_one_line(tmp_path):
    script = tmp_path / "ranks_script.py"
    script.write_text("from labkit.ranks.reports import load_reports\n"
                      f"reports = load_reports({[str(p) for p in RANKS]!r}, scheduler='local')\n"
                      "print(reports.ranks)\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=ENV,
                         cwd=tmp_path)
    assert res.returncode != 0
    tail = res.stderr.strip().splitlines()[-1]
    assert 'if __name__ == "__main__":' in tail and "ranks_script.py:2" in tail, res.stderr
    assert res.stderr.count("Traceback") <= 1, res.stderr
