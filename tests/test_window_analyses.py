"""Every analysis and ``advise`` takes ``window=``/``within=`` (issue 22), on a real export of
someone else's program: restricting first and passing the window give the same answer."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import labkit
from labkit.judge import bottleneck as bn
from labkit.stats import copies
from labkit.stats import stages
from labkit.judge import advice
from labkit.stats import idle
from labkit.report.window import restrict

LLAMA = Path(__file__).parent / "fixtures" / "real" / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite"
WINDOWED = [stages.stage_table, stages.batches, bn.bottleneck, stages.stage_overlap,
            copies.pageable_copies, copies.copy_table, stages.choose_stages, stages.steady_window,
            idle.gpu_idle_gaps, idle.gpu_utilization, idle.gpu_idle_breakdown, advice.advise]


@pytest.fixture(scope="module")
def llama():
    return labkit.load_report(LLAMA)


@pytest.mark.parametrize("fn", WINDOWED, ids=lambda f: f.__name__)
def test_every_analysis_takes_window_and_within(fn):
    params = inspect.signature(fn).parameters
    assert {"window", "within"} <= set(params)
    assert params["within"].kind is inspect.Parameter.KEYWORD_ONLY


def test_stage_table_within_a_range_is_the_table_of_the_restricted_report(llama):
    name = "token_0_processing"
    got = stages.stage_table(llama, within=name)
    want = stages.stage_table(restrict(llama, within=name))
    assert got.equals(want)
    whole = stages.stage_table(llama)
    # the restricted table counts fewer calls of a range that repeats in every token
    calls = lambda t: int(t.loc[t["stage"] == "layer_0_computation", "instances"].iloc[0])  # noqa: E731
    assert 0 < calls(got) < calls(whole)


def test_advise_and_idle_breakdown_within_a_range(llama):
    name = "token_0_processing"
    a = advice.advise(llama, within=name)
    b = advice.advise(restrict(llama, within=name), steady=False)  # within= is the window: no steady window in it
    assert list(a["rule"]) == list(b["rule"]) and a.attrs["note"] == b.attrs["note"]
    gaps = idle.gpu_idle_breakdown(llama, within=name)
    span = restrict(llama, within=name).meta["window"]
    assert gaps.attrs["window"] == (span[0][0], span[-1][1])
    parts = gaps[["copy_ns", "sync_ns", "cuda_ns", "untraced_ns"]].sum(axis=1)
    assert (parts == gaps["duration_ns"]).all()
    util = idle.gpu_utilization(llama, within=name, bin_ms=1.0)
    assert util["start_ns"].iloc[0] == span[0][0] and util["busy_frac"].between(0, 1).all()


def test_a_window_is_not_stretched_by_a_call_that_ends_past_it():
    """An OS runtime call that starts inside the window and ends after it (a thread blocked in
    ``poll`` to the end of the run) is kept whole by ``restrict``, but the window analysed stays the
    window: a 2.5 s call once stretched a steady window of 0.16 s to 0.33 s, its gap called a stall."""
    r = labkit.load_report(Path(__file__).parent / "fixtures" / "lab" / "batch4.cpu-2core.r5.nsys2022.4.sqlite")
    o = r.osrt
    longest = o.loc[(o["end_ns"] - o["start_ns"]).idxmax()]
    w = (int(longest["start_ns"]) - 1_000_000, int(longest["start_ns"]) + 50_000_000)
    cut = restrict(r, window=w)
    assert int(cut.osrt["end_ns"].max()) > w[1]  # the call is kept whole ...
    span = stages.trace_span(cut)
    assert w[0] <= span[0] and span[1] <= w[1]  # ... and the span is the window's
    a = advice.advise(r, window=w, steady=False)
    assert a.attrs["window"][1] <= w[1]
