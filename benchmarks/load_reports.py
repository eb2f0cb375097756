"""Benchmark: ``labkit.load_reports`` over many per-rank reports on a Dask cluster: time and client memory.

Copies one small real export (default: ``tests/fixtures/pipeline.nsys2025.3.sqlite``, the lab's
pipeline on an H100: 110 NVTX ranges, 914 kernels, 224 copies, 4,348 CUDA API calls; 612 KiB) to
``run_<rank>.sqlite`` in a temporary folder, starts a Dask ``LocalCluster`` of 2 worker processes
(one thread each; or connects to ``--scheduler``), and for each count loads that many reports in a
fresh Python process, so each memory figure is its own: wall seconds (the cluster already up), the
client's resident memory before and after (psutil RSS) and its peak (``ru_maxrss``), and how many
bytes the results hold. Only summaries travel back, so the client's memory grows with the ranks,
not with the events. Each run checks itself: ranks 0..N-1, merged NVTX and kernel instances N times
one report's. ``--serial`` adds the same load in the client process, one report after another.

    python benchmarks/load_reports.py [--counts 8,64,500] [--source EXPORT] [--workers 2]
        [--scheduler ADDRESS|FILE] [--serial]

On a cluster (untested here: no cluster on this machine): start a scheduler and workers that can
import labkit and read the reports, and pass ``--scheduler`` (an address or a scheduler file; the
temporary folder must then be on a file system the workers share, see ``--folder``). Under Slurm,
e.g. in an sbatch script: ``srun -n1 dask scheduler --scheduler-file $HOME/sched.json &`` then
``srun dask worker --scheduler-file $HOME/sched.json --nthreads 1 &`` on the allocation's nodes, and
``python benchmarks/load_reports.py --scheduler $HOME/sched.json --folder $SCRATCH/bench``;
or dask-jobqueue's ``SLURMCluster`` (pass its ``Client`` to ``load_reports(scheduler=client)``).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "fixtures" / "pipeline.nsys2025.3.sqlite"


def measure(folder: Path, count: int, scheduler: str | None, workers: int) -> dict:
    """Load ``count`` reports of ``folder`` in this process (a child); wall time, client memory, a check."""
    import psutil

    import labkit.ranks.reports  # noqa: F401  imported before timing: the figures are loading, not imports
    from labkit.ranks.reports import load_reports

    proc = psutil.Process()
    paths = [folder / f"run_{r}.sqlite" for r in range(count)]
    cluster = client = None
    if scheduler != "serial":
        import logging

        from distributed import Client, LocalCluster

        if scheduler:
            client = Client(scheduler if "://" in scheduler else None,
                            scheduler_file=None if "://" in scheduler else scheduler)
        else:
            import dask

            with dask.config.set({"distributed.worker.profile.enabled": False}):  # as labkit's "local"
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=logging.ERROR)
            client = Client(cluster)
        client.wait_for_workers(1 if scheduler else workers)
    rss0 = proc.memory_info().rss
    t0 = time.perf_counter()
    reps = load_reports(paths, scheduler=client if client is not None else "serial")
    wall = time.perf_counter() - t0
    rss1 = proc.memory_info().rss
    nworkers = len(client.scheduler_info()["workers"]) if client is not None else 0
    if client is not None:
        client.close()
    if cluster is not None:
        cluster.close()
    one_nv = int(reps.nvtx_summary().query("rank == 0")["instances"].sum())
    one_k = int(reps.kernel_summary().query("rank == 0")["instances"].sum())
    ok = (reps.ranks == list(range(count)) and int(reps.nvtx_summary(merged=True)["instances"].sum()) == count * one_nv
          and int(reps.kernel_summary(merged=True)["instances"].sum()) == count * one_k)
    held = len(pickle.dumps((reps._summaries, reps._order_stats, reps.meta)))
    return {"count": count, "where": f"{nworkers} workers" if client is not None else "client, serial",
            "wall_s": wall, "rss_before_mib": rss0 / 2**20, "rss_after_mib": rss1 / 2**20,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "results_mib": held / 2**20,
            "ok": ok}


def _line(m: dict) -> str:
    return (f"| {m['count']:4d} | {m['where']:>14} | {m['wall_s']:7.2f} | {1000 * m['wall_s'] / m['count']:5.0f} | "
            f"{m['rss_before_mib']:5.0f} -> {m['rss_after_mib']:5.0f} | {m['peak_mib']:5.0f} | "
            f"{m['results_mib']:6.2f} | {'ok' if m['ok'] else 'FAILED'} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="8,64,500", help="numbers of reports, comma-separated")
    ap.add_argument("--source", type=Path, default=SOURCE, help="the export to copy")
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes (one thread each)")
    ap.add_argument("--scheduler", default=None, help="a running scheduler's address or scheduler file instead")
    ap.add_argument("--serial", action="store_true", help="also load in the client process alone")
    ap.add_argument("--folder", type=Path, default=None, help="where the copies go (default: a temporary folder)")
    ap.add_argument("--one", nargs=3, metavar=("FOLDER", "COUNT", "SCHEDULER"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:  # a child: one measurement, as JSON
        folder, count, sched = args.one
        print(json.dumps(measure(Path(folder), int(count), sched or None, args.workers)))
        return 0
    counts = [int(c) for c in args.counts.split(",")]
    print(f"source: {args.source} ({args.source.stat().st_size / 2**10:.0f} KiB); machine: {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}; cluster: "
          f"{args.scheduler or f'LocalCluster of {args.workers} worker processes, 1 thread each'}")
    print("| reports | where | wall s | ms/report | client RSS MiB before -> after | client peak MiB | "
          "results MiB | check |\n|---|---|---|---|---|---|---|---|")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryDirectory(dir=args.folder) as td:
        for r in range(max(counts)):  # real copies: each its own file, identity and cache entry
            shutil.copyfile(args.source, Path(td) / f"run_{r}.sqlite")
        for count in counts:
            for sched in [args.scheduler or ""] + (["serial"] if args.serial else []):
                out = subprocess.run([sys.executable, __file__, "--workers", str(args.workers), "--one", td,
                                      str(count), sched], capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    print(f"{count} reports: FAILED\n{out.stderr[-2000:]}")
                    return 1
                print(_line(json.loads(out.stdout.strip().splitlines()[-1])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
