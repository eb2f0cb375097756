"""Benchmark: labkit.stats.kernels on about a million kernels, in memory.

Replicates the H100 fixture ``tests/fixtures/gputest.nsys2025.3.sqlite`` COPIES times (each copy
shifted in time by the fixture's span and in correlation id by its largest id: kernels, copies,
memsets and the CUDA API calls that launched them) into a Report built from frames, then times
each statistic (best of 3) and prints the figures.

    python benchmarks/kernel_stats.py [--copies 3000]

Seen on the 2-core CPU box (2026-11-25 21:50 UTC, load average about 10 from other jobs), 3000
copies (1,056,000 kernels, 267,000 copies and memsets, 1,323,000 CUDA calls), best of 3:
kernel_percentiles 0.32 s, launch_latency 2.38 s, queue_depth 1.57 s, stream_summary 0.99 s,
copy_bandwidth 0.40 s.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import labkit  # noqa: E402
from labkit.report.load import Report  # noqa: E402
from labkit.stats import kernels  # noqa: E402


def _tile(df: pd.DataFrame, copies: int, span: int, corr: int) -> pd.DataFrame:
    n = len(df)
    out = pd.concat([df] * copies, ignore_index=True)
    k = np.repeat(np.arange(copies, dtype=np.int64), n)
    for c in ("start_ns", "end_ns"):
        out[c] = out[c].to_numpy(np.int64) + k * span
    out["correlation_id"] = out["correlation_id"].to_numpy(np.int64) + k * corr
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--copies", type=int, default=3000)
    args = p.parse_args()
    rep = labkit.load_report(ROOT / "tests/fixtures/gputest.nsys2025.3.sqlite")
    api = rep.cuda_api
    ops = rep.gpu_ops()
    api = api[api["correlation_id"].isin(ops["correlation_id"])].reset_index(drop=True)
    api["name"] = api["name"].astype(object)
    span = int(max(ops["end_ns"].max(), api["end_ns"].max()) - min(ops["start_ns"].min(), api["start_ns"].min())) + 1
    corr = int(max(ops["correlation_id"].max(), api["correlation_id"].max())) + 1
    big = Report.from_frames(kernels=_tile(rep.kernels, args.copies, span, corr),
                             memcpy=_tile(rep.memcpy, args.copies, span, corr),
                             memset=_tile(rep.memset, args.copies, span, corr),
                             cuda_api=_tile(api, args.copies, span, corr), path="(tiled gputest)")
    print(f"{len(big.kernels):,} kernels, {len(big.memcpy) + len(big.memset):,} copies and memsets, "
          f"{len(big.cuda_api):,} CUDA calls ({args.copies} copies of gputest.nsys2025.3)")
    big.gpu_ops()  # built once and shared, as in any session
    for name in kernels.__all__:
        fn = getattr(kernels, name)
        if not callable(fn):
            continue
        best = min(_timed(fn, big) for _ in range(3))
        print(f"{name:<20} {best:6.2f} s")


def _timed(fn, rep) -> float:
    t = time.perf_counter()
    fn(rep)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
