"""Invariants of the judgement on every real report we hold (tests/fixtures, other people's included):
no prediction above its own Amdahl limit, no two findings that contradict each other or the
accounting, blocked time apart from work, and the steady window inside the trace."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import labkit
from labkit.judge.accounting import account, steady_window_of
from labkit.judge.evidence import MIN_GAIN
from labkit.stats.stages import trace_span

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = Path(__file__).resolve().parents[1] / "reports" / "reference"
REPORTS = sorted(p for p in FIXTURES.rglob("*.sqlite")) + sorted(REFERENCE.rglob("*.sqlite"))
"""Other people's reports and ours, the lab's reference runs on CPUs, an H100 and an H200 among them."""
PER_ITEM = re.compile(r"plus (-?[\d.]+) ms an item")


def _load(path):
    try:
        return labkit.load_report(path)
    except labkit.LabkitError as exc:  # an export this nsys cannot read is tested elsewhere
        pytest.skip(f"{path.name}: {exc}")


@pytest.mark.parametrize("path", REPORTS, ids=[f"{p.parent.name}/{p.stem}" for p in REPORTS])
def test_judgement_invariants_hold_on_every_report(path):
    rep = _load(path)
    t0, t1 = trace_span(rep)
    (w0, w1), why = steady_window_of(rep)
    assert t0 <= w0 < w1 <= t1 or (t0, t1) == (w0, w1), why
    for steady in (True, False):
        a = labkit.advise(rep, steady=steady)
        for _, r in a.iterrows():
            p, w, s = r["predicted_speedup"], r["window_ms"], r["saves_ms"]
            assert p >= 1.0 - 1e-9 and 0 <= s <= w + 1e-6, r["rule"]
            if math.isfinite(p) and w > s:
                assert p <= w / (w - s) * (1 + 1e-6), (r["rule"], p, w, s)  # never above its own Amdahl limit
            assert not (r["basis"] == "bound" and s <= 0), r["rule"]  # a finding that removes nothing bounds nothing
            for cost in PER_ITEM.findall(r["evidence"]):  # a fitted call: no item costs less than nothing
                assert float(cost) >= 0, (r["rule"], r["evidence"])
        rules = set(a["rule"])
        assert not {"gpu_bound", "gpu_low_utilization"} <= rules  # the GPU is never both the limit and idle
        if len(a):
            acc = account(rep, window=a.attrs["window"])
            assert ("gpu_bound" in rules) <= (acc.limiter == "gpu")
            assert 0 <= acc.oversubscribed_ms <= acc.window_ms + 1e-6
            for _, r in a[a["basis"] == "bound"].iterrows():  # no bound from times that waited for a core
                assert acc.oversubscribed_ms <= (1 - 1 / MIN_GAIN) * r["window_ms"] / r["predicted_speedup"], r["rule"]
            for _, r in a[a["rule"] == "gpu_bound"].iterrows():  # faster kernels leave the copy engines their time
                left = acc.copy_ms / (4 if r["lever"] == "reduce_precision" else 1)
                if left > 0:
                    assert r["predicted_speedup"] <= r["window_ms"] / left * (1 + 1e-6), (r["lever"], acc.copy_ms)
            for _, t in acc.threads.iterrows():  # blocked time is apart from work: the parts add up
                parts = t["work_ms"] + t["blocked_ms"] + t["cuda_ms"] + t["untraced_ms"]
                assert parts == pytest.approx(t["extent_ms"], abs=1e-3)
                assert t["busy_ms"] <= t["extent_ms"] - t["blocked_ms"] + 1e-6
    b = labkit.bottleneck(rep)
    if b.gpu_bound:  # the GPU is named only when its SMs were busier than every thread and the copies
        assert b.gpu_busy_frac > b.thread_busy_frac and b.gpu_busy_frac >= b.copy_busy_frac


def test_blocked_time_is_computed_once_per_report_and_anew_for_a_window():
    """stage_table, the accounting, bottleneck and the what-if model read one blocked-time answer per
    report (Report.memo); a windowed report is a new report and gets its own, and both are what
    the computation gives from scratch."""
    from labkit.report.window import restrict
    from labkit.stats.blocked import _blocked_intervals, blocked_intervals

    rep = _load(FIXTURES / "real" / "hpcgroup_2024.5_pipit_cloverleaf.sqlite")  # 1,831 OS runtime calls
    first = blocked_intervals(rep)
    assert first and blocked_intervals(rep) is first
    assert blocked_intervals(rep, kind="latency") is not first
    t0, t1 = trace_span(rep)
    part = restrict(rep, window=(t0, t0 + (t1 - t0) // 2))
    mine = blocked_intervals(part)
    assert mine is not first
    for r, got in ((rep, first), (part, mine)):
        want = _blocked_intervals(r, waits=True, kind="all")
        assert set(got) == set(want)
        assert all((got[g][0] == want[g][0]).all() and (got[g][1] == want[g][1]).all() for g in want)
    # a half window holds less blocked time than the whole trace on some thread
    total = lambda iv: sum(int((e - s).sum()) for s, e in iv.values())  # noqa: E731
    assert total(mine) < total(first)
