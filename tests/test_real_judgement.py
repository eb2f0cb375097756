"""labkit's judgement on every report of other people that nsys 2022.4 reads (tests/fixtures/real/,
nsys 2020.5-2026.1): ``advise``, ``bottleneck``, ``stage_table``, ``compare`` and ``plot_timeline``
run, and their claims agree with each other and with nsys's own CSVs beside each report."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import matplotlib.figure
import pandas as pd
import pytest

import labkit
from labkit.stats import stages as analysis
from labkit.judge.advice import ADVICE_COLUMNS, LEVERS

REAL = Path(__file__).parent / "fixtures" / "real"
NAMES = sorted(p.stem for p in REAL.glob("*.sqlite"))


@lru_cache(maxsize=None)
def rep(name: str):
    return labkit.load_report(REAL / f"{name}.sqlite")


def test_every_real_report_is_here():
    assert len(NAMES) == 13


@pytest.mark.parametrize("name", NAMES)
def test_advice_bottleneck_and_stage_table_agree(name):
    r = rep(name)
    a = labkit.advise(r)
    assert list(a.columns) == ADVICE_COLUMNS and a.attrs["note"]
    assert a["lever"].isin(list(LEVERS)).all() and a["basis"].isin(["bound", "estimate"]).all()
    assert "--" not in " ".join(a[["finding", "evidence", "lever_text", "assumptions"]].astype(str).to_numpy().ravel())
    st = labkit.stage_table(r)
    b = labkit.bottleneck(r)
    labels = set(analysis.stage_labels(st.rename(columns={"stage": "name"})))
    # every stage a finding or the bottleneck names is a stage the stage table has
    assert set(a["stage"].dropna()) <= labels | set(a.attrs["stages"]), (set(a["stage"].dropna()), labels)
    assert b.stage is None or b.stage in labels | {s.split(":", 1)[-1] for s in labels}
    assert 0 <= b.thread_busy_frac <= 1 + 1e-9 and 0 <= b.gpu_busy_frac <= 1 + 1e-9
    # the GPU is called the bound only when its SMs were busier than the busiest thread and the copy
    # engines; copies are named when they were the busiest
    assert b.gpu_bound == (b.gpu_busy_frac > b.thread_busy_frac and b.gpu_busy_frac >= b.copy_busy_frac)
    if b.copy_busy_frac > max(b.gpu_busy_frac, b.thread_busy_frac):
        assert str(b).startswith("Copies bound throughput"), str(b)
    if r.nvtx.empty:
        assert st.empty and b.stage is None
    # bottleneck reads advise's window, and says which
    assert (b.where != "") == ("over steady window" in a.attrs["note"]), (b.where, a.attrs["note"])
    assert b.where in a.attrs["note"] and b.where in str(b)


def test_the_cuda_drivers_threads_wait_for_work():
    """The unannotated CUTLASS run: its main thread is blocked in one synchronous copy and one sync;
    the CUDA driver's event thread sits in poll all along, waiting for work. It had read as the
    limiting thread, blocked on its input (parallel_input, 1.60x)."""
    from labkit.stats.calls import runtime_threads

    r = rep("wenscarl_2023.2_cutlass_report1")
    names = r.threads.set_index("global_tid")["thread_name"]
    assert "cuda-EvtHandlr" in set(names[list(runtime_threads(r))])
    assert "a.out" not in set(names[list(runtime_threads(r))])
    a = labkit.advise(r)
    # the copy is pageable (805 MB device-to-host at 3.0 GB/s on an A40): pinned, it would move at the
    # link's rate, so pinning leads; then the synchronous copy and the sync
    assert list(a["rule"][:3]) == ["pageable_memcpy", "sync_memcpy", "sync_apis"], a
    assert "parallel_input" not in set(a["lever"]) and a["basis"].iloc[0] == "estimate"
    assert "25 GB/s" in a["assumptions"].iloc[0] and "A40" in a["assumptions"].iloc[0]
    assert str(labkit.bottleneck(r)).startswith("Copies bound throughput")


@pytest.mark.parametrize("name", NAMES)
def test_compare_totals_are_nsys_own(name):
    """compare(r, r) changes nothing, and its kernel and CUDA API totals are nsys's CSVs'."""
    r = rep(name)
    d = labkit.compare(r, r)
    assert (d["delta_ns"] == 0).all() and (d["delta_count"] == 0).all()
    for kind, csv, col in (("kernel", "gpukernsum", "Total Time (ns)"), ("cuda_api", "cudaapisum", "Total Time (ns)")):
        path = REAL / f"{name}.{csv}.csv"
        theirs = pd.read_csv(path) if path.stat().st_size else pd.DataFrame({col: []})
        ours = d.loc[d["kind"] == kind, "total_a_ns"]
        assert int(ours.sum()) == int(theirs[col].sum()), (kind, int(ours.sum()), int(theirs[col].sum()))


@pytest.mark.parametrize("name", NAMES)
def test_plot_timeline_draws_a_steady_slice(name):
    r = rep(name)
    ends = [f["end_ns"] for f in (r.nvtx, r.kernels, r.cuda_api) if len(f)]
    starts = [f["start_ns"] for f in (r.nvtx, r.kernels, r.cuda_api) if len(f)]
    if not ends:
        pytest.skip(f"{name}: no NVTX, kernel or CUDA API rows to draw")
    t0 = int(min(s.min() for s in starts))
    t1 = min(int(max(e.max() for e in ends)), t0 + 200_000_000)  # the first 200 ms at most
    fig = labkit.plot_timeline(r, window=(t0, t1))
    assert isinstance(fig, matplotlib.figure.Figure) and fig.axes and fig.axes[0].get_yticklabels()


def test_a_wait_is_a_word_of_the_name_not_part_of_one():
    """Range names count as waits by their words: the lab's 'queue_wait', nsys users' 'wait' and
    'sync' do; TensorRT's layer ranges '/blocks.0/blocks.0.1/Conv' (centerformer) did by substring, and
    made 68.7 ms of find_centers' time blocked, though nothing there waited."""
    from labkit.stats.calls import is_wait

    for name in ("queue_wait", "wait_batch", "QueueWait", "main->test_copies->wait", "sync", "cudaStreamSynchronize",
                 "idle", "sleep_a_bit", "await_reply", "blocked_on_io"):
        assert is_wait(name), name
    for name in ("/blocks.0/blocks.0.1/Conv", "async_infer", "resblock", "transformer_block_3", "asynchronous copy",
                 "load_batch", "enqueue"):
        assert not is_wait(name), name
    r = rep("YoonKyonghwan_2022.4_centerformer_poolformer")
    layers = r.nvtx[r.nvtx["name"].astype(str).str.startswith("/blocks")]
    assert len(layers) > 1000 and not layers["name"].map(is_wait).any()
    st = labkit.stage_table(r)
    assert (st["blocked_ms"] == 0).all(), st[["stage", "blocked_ms"]]
