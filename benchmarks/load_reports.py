"""Benchmark: how ``labkit.load_reports`` time and memory grow with the number of per-rank reports.

Copies one real export (default: ``tests/fixtures/pipeline.nsys2022.4.sqlite``, the lab's queued
pipeline on the CPU) to ``NAME_<rank>.sqlite`` in a temporary folder, then for each count loads
that many in a fresh Python process (so each peak memory figure is its own) with the process pool
and, for comparison, in one process. Each run also checks the result: ranks 0..N-1 and merged
NVTX instances equal to N times one report's.

    python benchmarks/load_reports.py [--counts 1,8,64] [--source EXPORT] [--processes N] [--frames nvtx]

Prints one line per (count, processes): wall seconds, ms per report, the parent's peak RSS and
the largest worker's peak RSS.

Seen on the 2-core CPU box (Intel Xeon VM, 2026-11-23; six other engineers' jobs made the load
average 3.7 to 10.5, so the pool of 2 rarely had both cores), default source (110 NVTX rows):
1 report 0.05 s; 8 reports 0.3-1.4 s (pool) and 0.25-1.2 s (one process); 64 reports 1.3-6.4 s
(pool) and 1.8-5.3 s (one process); parent peak RSS 80 MiB for 1 and 84-91 MiB for 64, each worker
66 MiB. A larger source (``parse_large.build(..., 100)``: 35,200 kernels and 5,000 NVTX ranges,
5.4 MiB, load average 5.2): 1 report 0.85 s; 8: 7.2 s (pool) / 4.8 s; 64: 53 s (pool) / 71 s,
peak RSS 870 MiB (all frames kept; 12 MiB per report) and 245 MiB with ``--frames nvtx``.
Time grows linearly with the number of reports; memory by the kept frames.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "fixtures" / "pipeline.nsys2022.4.sqlite"


def measure(folder: Path, count: int, processes: int | None, frames: tuple[str, ...]) -> dict:
    """Load ``count`` copies from ``folder`` in this process; wall time, peak RSS and a check."""
    import labkit.stats.stages  # noqa: F401  imported before timing: the figures are loading, not imports
    from labkit.ranks.reports import load_reports

    paths = [folder / f"rep_{r}.sqlite" for r in range(count)]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reps = load_reports(paths, processes=processes, frames=frames)
    wall = time.perf_counter() - t0
    merged = int(reps.nvtx_summary(merged=True)["instances"].sum())
    one = int(reps.nvtx_summary().query("rank == 0")["instances"].sum())
    return {"count": count, "processes": processes, "wall_s": wall,
            "ok": reps.ranks == list(range(count)) and merged == count * one,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
            "nvtx_rows": len(reps.nvtx())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1,8,64", help="numbers of reports, comma-separated")
    ap.add_argument("--source", type=Path, default=SOURCE, help="the export to copy")
    ap.add_argument("--processes", type=int, default=None, help="pool size (default: one per core)")
    ap.add_argument("--frames", default="nvtx,kernels,memcpy,memset", help="event frames to keep (load_reports frames=)")
    ap.add_argument("--one", nargs=3, metavar=("FOLDER", "COUNT", "PROCESSES"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:  # a child: one measurement, as JSON
        folder, count, procs = args.one
        frames = tuple(f for f in args.frames.split(",") if f)
        print(json.dumps(measure(Path(folder), int(count), int(procs) or None, frames)))
        return 0
    counts = [int(c) for c in args.counts.split(",")]
    print(f"source: {args.source} ({args.source.stat().st_size / 2**10:.0f} KiB); machine: {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}; frames kept: {args.frames or 'none'}")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryDirectory() as td:
        for r in range(max(counts)):
            shutil.copyfile(args.source, Path(td) / f"rep_{r}.sqlite")
        for count in counts:
            for procs in ([args.processes or 0, 1] if count > 1 else [1]):
                out = subprocess.run([sys.executable, __file__, "--frames", args.frames, "--one", td, str(count),
                                      str(procs)],
                                     capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    print(f"{count} reports: FAILED\n{out.stderr[-2000:]}")
                    return 1
                print(_line(json.loads(out.stdout.strip().splitlines()[-1])))
    return 0


def _line(m: dict) -> str:
    """One measurement as a line of the printed table."""
    pool = f"pool of {m['processes'] or os.cpu_count()}" if m["processes"] != 1 else "one process"
    return (f"{m['count']:3d} reports, {pool:>13}: {m['wall_s']:6.2f} s ({1000 * m['wall_s'] / m['count']:5.0f} ms "
            f"per report), peak RSS {m['rss_mib']:.0f} MiB (largest worker {m['worker_rss_mib']:.0f} MiB), "
            f"{m['nvtx_rows']:,} nvtx rows, check {'ok' if m['ok'] else 'FAILED'}")


if __name__ == "__main__":
    sys.exit(main())
