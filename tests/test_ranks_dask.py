"""Per-rank reports on a real Dask cluster: a scheduler and two workers started here as separate
processes on localhost (``python -m distributed.cli.dask_scheduler`` / ``dask_worker``, as on a
cluster node), and a LocalCluster. load_reports and ``python -m labkit summary`` through them must
equal the in-process result, row for row. The processes are always stopped (their own process groups).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("distributed", reason="Dask's distributed is a labkit dependency: pip install -e .")

from labkit.ranks.cluster import ClusterError  # noqa: E402
from labkit.ranks.reports import load_reports  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
RANKS = [FIX / f"ranks.nsys2022.4_{r}.sqlite" for r in (0, 1)]
REAL = FIX / "real" / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite"  # kernels and nested ranges
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _stop(procs: list[subprocess.Popen]) -> None:
    """Stop each process group we started: SIGTERM, then SIGKILL after 15 s; reap them all."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=15)


@pytest.fixture(scope="module")
def scheduler_file(tmp_path_factory, request):
    """A scheduler and two one-thread workers as separate processes; the scheduler file's path."""
    folder = tmp_path_factory.mktemp("dask")
    sfile = folder / "scheduler.json"
    procs: list[subprocess.Popen] = []
    request.addfinalizer(lambda: _stop(procs))
    common = dict(env=ENV, cwd=folder, start_new_session=True, stdout=subprocess.DEVNULL,
                  stderr=open(folder / "dask.log", "ab"))
    # --idle-timeout / --death-timeout: even if this test process were killed, nothing outlives it long
    procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                   "--port", "0", "--no-dashboard", "--scheduler-file", str(sfile),
                                   "--idle-timeout", "300"], **common))
    deadline = time.monotonic() + 60
    while not sfile.exists() and time.monotonic() < deadline and procs[0].poll() is None:
        time.sleep(0.2)
    assert sfile.exists(), f"the scheduler did not start: {(folder / 'dask.log').read_text()[-2000:]}"
    for _ in range(2):
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                       str(sfile), "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                                       "--death-timeout", "60", "--memory-limit", "2GiB"], **common))
    from distributed import Client

    with Client(scheduler_file=str(sfile), timeout="60s") as c:
        c.wait_for_workers(2, timeout=90)
        assert len(c.scheduler_info()["workers"]) == 2
    return sfile


def _same(a, b) -> None:
    assert a.ranks == b.ranks and a.paths == b.paths and a.notes == b.notes
    pd.testing.assert_frame_equal(a.meta, b.meta)
    for merged in (False, True):
        pd.testing.assert_frame_equal(a.nvtx_summary(merged=merged), b.nvtx_summary(merged=merged))
        pd.testing.assert_frame_equal(a.kernel_summary(merged=merged), b.kernel_summary(merged=merged))
        pd.testing.assert_frame_equal(a.stage_table(merged=merged), b.stage_table(merged=merged))
    pd.testing.assert_frame_equal(a.imbalance(), b.imbalance())
    pd.testing.assert_frame_equal(a.stragglers(), b.stragglers())


def test_reports_on_real_scheduler_and_workers_equal_in_process(scheduler_file, tmp_path):
    from distributed import Client

    ours = load_reports(RANKS, scheduler=str(scheduler_file), frames=("nvtx",))
    _same(ours, load_reports(RANKS, scheduler="serial", frames=("nvtx",)))
    assert ours.imbalance().set_index("stage").loc["compute", "slowest_rank"] == 1
    pd.testing.assert_frame_equal(ours.frame("nvtx", 1), load_reports(RANKS, frames=("nvtx",)).frame("nvtx", 1))
    with Client(scheduler_file=str(scheduler_file)) as c:
        # kernels too, by address; both workers took tasks
        before = sum(c.run(lambda dask_worker: dask_worker.state.executed_count).values())
        paths = [tmp_path / f"run_{r}.sqlite" for r in range(4)]
        for p in paths:
            p.symlink_to(REAL)
        addr = c.scheduler.address
        got = load_reports(paths, scheduler=addr)
        _same(got, load_reports(paths, scheduler="serial"))
        assert got.kernel_summary(merged=True)["instances"].sum() == 4 * 1536
        done = c.run(lambda dask_worker: dask_worker.state.executed_count)
        assert len(done) == 2 and sum(done.values()) - before == 4 and all(done.values())
        # an environment naming the scheduler is used when scheduler is not given, as nsys's recipes do
        os.environ["DASK_SCHEDULER_ADDRESS"] = addr
        try:
            _same(load_reports(paths), got)
        finally:
            del os.environ["DASK_SCHEDULER_ADDRESS"]


def test_summary_command_through_the_scheduler(scheduler_file):
    argv = [sys.executable, "-m", "labkit", "summary", str(FIX / "ranks.nsys2022.4_*.sqlite"), "--what",
            "nvtx,stages,imbalance,stragglers", "--csv"]
    there = subprocess.run(argv + ["--scheduler", str(scheduler_file)], capture_output=True, text=True, env=ENV,
                           timeout=120)
    here = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=120)
    assert there.returncode == 0 and here.returncode == 0, there.stderr + here.stderr
    assert there.stdout == here.stdout
    assert "# imbalance\nstage,ranks,fastest_rank" in there.stdout and "compute,2,0," in there.stdout


def test_local_cluster_equals_in_process():
    _same(load_reports(RANKS, scheduler="local"), load_reports(RANKS, scheduler="serial"))


def test_report_error_on_a_worker_names_the_file(scheduler_file, tmp_path):
    bad = tmp_path / "run_1.sqlite"
    bad.write_text("not a report")
    from labkit.errors import LabkitError

    with pytest.raises(LabkitError, match=r"run_1.sqlite is neither an Nsight Systems report"):
        load_reports([RANKS[0], bad], scheduler=str(scheduler_file))


def test_unusable_scheduler_is_one_line(tmp_path):
    with pytest.raises(ClusterError, match=r"neither 'serial', 'local', an address"):
        load_reports(RANKS, scheduler=str(tmp_path / "no-such-file.json"))
