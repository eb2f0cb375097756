"""compare's headline: wall and GPU time of each side's window first, on real exports; with an
interval on repeats. ``repeats_{20,10}ms_{1,2,3}`` are three recordings each of one program whose
steps sleep 20 ms (A) or 10 ms (B): B is about 2x faster by construction (tests/fixtures/README.md)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.stats.compare import COMPARE_COLUMNS, Headline
from labkit.stats.idle import busy_intervals

FIX = Path(__file__).parent / "fixtures"
CPU, GPU = FIX / "pipeline.nsys2022.4.sqlite", FIX / "pipeline.nsys2025.3.sqlite"
SLOW = [FIX / f"repeats_20ms_{i}.nsys2022.4.sqlite" for i in (1, 2, 3)]
FAST = [FIX / f"repeats_10ms_{i}.nsys2022.4.sqlite" for i in (1, 2, 3)]


def _wall_ms(rep) -> float:
    frames = [rep.nvtx, rep.cuda_api, rep.kernels, rep.memcpy, rep.memset]
    lo = min(int(f["start_ns"].min()) for f in frames if len(f))
    hi = max(int(f["end_ns"].max()) for f in frames if len(f))
    return (hi - lo) / 1e6


def _sm_ms(rep) -> float:
    s, e = busy_intervals(rep.kernels["start_ns"].to_numpy(), rep.kernels["end_ns"].to_numpy())
    return float((e - s).sum()) / 1e6


def test_headline_of_two_real_reports_is_their_wall_and_gpu_time():
    a, b = labkit.load_report(CPU), labkit.load_report(GPU)
    h = labkit.headline(a, b)
    assert isinstance(h, Headline) and (h.n_a, h.n_b) == (1, 1)
    assert np.isclose(h.wall_a_ms, _wall_ms(a)) and np.isclose(h.wall_b_ms, _wall_ms(b))
    assert h.gpu_a_ms == 0 and np.isclose(h.gpu_b_ms, _sm_ms(b)) and h.gpu_b_ms > 0
    assert h.gpu_speedup is None  # A ran no kernel: no ratio to give
    assert np.isclose(h.speedup, h.wall_a_ms / h.wall_b_ms) and h.speedup_interval is None
    # the H100 run spent seconds in CUDA start-up: over the whole trace it is the slower one
    assert h.speedup < 1 and str(h).startswith(f"B's profiled run was {1 / h.speedup:.2f}x longer than A's (profiled wall "
                                          "time): wall ")
    assert "whole trace" in h.where


def test_compare_keeps_its_rows_and_carries_the_headline_first():
    d = labkit.compare(CPU, GPU)
    assert list(d.columns) == COMPARE_COLUMNS and d["count_a"].dtype == "int64"
    assert d.attrs["headline"] == labkit.headline(CPU, GPU)
    swapped = labkit.headline(GPU, CPU)
    assert np.isclose(swapped.speedup, 1 / d.attrs["headline"].speedup)
    assert str(swapped).startswith("B's profiled run was ") and "x shorter than A's" in str(swapped)


def test_within_a_range_times_its_instances():
    a = labkit.load_report(CPU)
    h = labkit.headline(a, a, within="infer")
    inf = a.nvtx[a.nvtx["name"] == "infer"]
    s, e = busy_intervals(inf["start_ns"].to_numpy(), inf["end_ns"].to_numpy())
    assert np.isclose(h.wall_a_ms, (e - s).sum() / 1e6) and h.speedup == 1.0
    assert "'infer'" in h.where and "1.00x shorter" in str(h)


def test_repeats_give_the_ratio_of_means_with_an_interval_holding_the_known_answer():
    h = labkit.headline(SLOW, FAST)
    walls_a = [_wall_ms(labkit.load_report(p)) for p in SLOW]
    walls_b = [_wall_ms(labkit.load_report(p)) for p in FAST]
    assert (h.n_a, h.n_b) == (3, 3)
    assert np.isclose(h.speedup, np.mean(walls_a) / np.mean(walls_b))
    lo, hi = h.speedup_interval
    assert 1 < lo < h.speedup < hi and lo < 2.0 < hi  # 20 ms against 10 ms a step, beyond the noise
    assert str(h).startswith(f"B's profiled runs were {h.speedup:.2f}x shorter than A's (profiled wall time): "
                             "wall ") and "95 % interval" in str(h)
    assert "within the noise" not in str(h) and "means of 3 and 3 reports" in str(h)


def test_repeats_of_one_run_against_each_other_are_within_the_noise():
    h = labkit.headline(SLOW[:2], SLOW[1:])
    lo, hi = h.speedup_interval
    assert lo < 1 < hi and "within the noise of the repeats" in str(h)


def test_rows_of_repeats_are_per_report_means():
    d = labkit.compare(SLOW, FAST).set_index(["kind", "name"])
    step_a = [labkit.nvtx_summary(labkit.load_report(p)).set_index("name").loc["step", "total_ns"] for p in SLOW]
    assert np.isclose(d.loc[("nvtx", "step"), "total_a_ns"], np.mean(step_a))
    assert d.loc[("nvtx", "step"), "count_a"] == d.loc[("nvtx", "step"), "count_b"] == 12
    assert d.attrs["headline"].n_a == 3


def test_plot_compare_takes_two_reports_or_a_diff():
    from matplotlib.figure import Figure

    fig = labkit.plot_compare(CPU, GPU, top=5)
    assert isinstance(fig, Figure)
    title = fig.axes[0].get_title()
    assert "pipeline.nsys2022.4.sqlite -> pipeline.nsys2025.3.sqlite" in title and "longer than A's" in title
    same = labkit.plot_compare(labkit.compare(CPU, GPU), top=5)
    assert [t.get_text() for t in same.axes[0].get_yticklabels()] == \
        [t.get_text() for t in fig.axes[0].get_yticklabels()]
    with pytest.raises(labkit.LabkitError, match="two reports"):
        labkit.plot_compare(CPU)


H200 = Path(__file__).parents[1] / "reports" / "reference" / "h200"


def _cli(*args) -> str:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "labkit", "compare", *map(str, args), "--top", "1"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return " ".join(r.stdout.split("\n\n")[0].split("\n"))


def test_headline_leads_with_the_measured_runs_where_the_ledger_beside_the_reports_has_them():
    """The committed H200 reference: baseline.sqlite and interval3.sqlite beside the ledger that measured
    both steps; the headline is the ledger's fps ratio (with its interval), the profiled wall time after it."""
    from labkit.bench.ledger import Ledger
    from labkit.bench.measured import measured_speedup

    rows = {r["step"]: r for r in Ledger(H200 / "ledger.jsonl").rows() if r.get("status") in (None, "ok")}
    want = rows["interval3"]["metrics"]["fps"] / rows["baseline"]["metrics"]["fps"]
    m = measured_speedup(H200 / "baseline.sqlite", H200 / "interval3.sqlite")
    h = labkit.headline(H200 / "baseline.sqlite", H200 / "interval3.sqlite", measured=m)
    assert np.isclose(h.measured["speedup"], want) and h.measured["machine"] == "NVIDIA H200"
    assert str(h).startswith(f"B's measured runs were {want:.2f}x faster than A's (")
    assert "95 % interval" in str(h).split(";")[0] and "B's profiled run was " in str(h)
    assert "(profiled wall time)" in str(h) and "no measured runs" not in str(h)
    assert _cli(H200 / "baseline.sqlite", H200 / "interval3.sqlite") == str(h)  # the command line looks them up


def test_headline_without_a_ledger_says_it_is_the_profiled_wall_time(tmp_path):
    import shutil

    from labkit.bench.measured import measured_speedup

    a, b = (shutil.copy(p, tmp_path / p.name) for p in (SLOW[0], FAST[0]))
    assert measured_speedup(a, b) is None
    h = labkit.headline(a, b, measured=False)
    assert str(h).startswith(f"B's profiled run was {h.speedup:.2f}x shorter than A's (profiled wall time; no "
                             "measured runs in the ledger)")
    assert _cli(a, b) == str(h)
