"""Kernel-busy time (issue 63): the GPU projection's ``proj_busy_ns`` is the union of the intervals of
a range's GPU operations, not nsys's first-to-last span, which on a launch-bound run is mostly the
gaps between kernels. Checked on the H200 reference's real exports (reports/reference/h200)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from labkit.report import load_report
from labkit.stats.summaries import gpu_projection

H200 = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200"


def _union(intervals) -> int:
    """Length of the union of (start, end) intervals, the plain way."""
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


@pytest.mark.parametrize("name", ["baseline", "interval3"])
def test_kernel_busy_is_at_most_the_span_and_is_the_union_of_the_ranges_gpu_ops(name):
    rep = load_report(H200 / f"{name}.sqlite")
    p = gpu_projection(rep)
    assert len(p) and (p["proj_busy_ns"] <= p["proj_duration_ns"]).all() and (p["proj_busy_ns"] > 0).all()
    frames = [f for f in (rep.kernels, rep.memcpy, rep.memset) if len(f)]
    ops = pd.concat([f[["pid", "correlation_id", "start_ns", "end_ns"]] for f in frames], ignore_index=True)
    api = rep.cuda_api
    nv = rep.nvtx
    for _, r in p.iterrows():
        rng = nv.iloc[int(r["nvtx_index"])]
        calls = api[(api["global_tid"] == rng["global_tid"]) & (api["start_ns"] >= rng["start_ns"])
                    & (api["end_ns"] <= rng["end_ns"])]
        mine = ops.merge(calls[["pid", "correlation_id"]], on=["pid", "correlation_id"])
        assert r["proj_busy_ns"] == _union(zip(mine["start_ns"], mine["end_ns"])), (r["name"], r["nvtx_index"])
    if name == "interval3":  # launch-bound: the detector's kernels fill a small part of its span
        infer = p[p["name"] == "infer"]
        assert infer["proj_busy_ns"].sum() < 0.2 * infer["proj_duration_ns"].sum()
