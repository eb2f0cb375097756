"""plot_timeline: rows per thread/depth and per GPU stream, window clipping, large inputs."""
from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from labkit.report import Report, load_report  # noqa: E402
from labkit.timeline import merge_close, plot_timeline  # noqa: E402

FIX = Path(__file__).parent / "fixtures"


def _load(name):
    return load_report(FIX / name)


def test_gpu_fixture_rows():
    rep = _load("gputest.nsys2025.3.sqlite")
    fig = plot_timeline(rep)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0].startswith("python3") and "  depth 1" in labels and "  depth 2" in labels
    streams = sorted(rep.gpu_ops().groupby(["device_id", "stream_id"]).groups)
    assert [lab for lab in labels if lab.startswith("GPU")] == [f"GPU {d} stream {s}" for d, s in streams]
    matplotlib.pyplot.close(fig)


def test_window_clips():
    rep = _load("gputest.nsys2025.3.sqlite")
    w0 = int(rep.nvtx["start_ns"].iloc[0])
    fig = plot_timeline(rep, window=(w0, w0 + 10_000_000))
    assert fig.axes[0].get_xlim() == pytest.approx((0.0, 10.0))
    matplotlib.pyplot.close(fig)


def test_threads_of_cpu_fixture():
    fig = plot_timeline(_load("annotated.nsys2022.4.sqlite"))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert sum(not lab.startswith("  ") for lab in labels) == 3  # main, decoder, worker
    matplotlib.pyplot.close(fig)


def test_large_input_is_merged_and_quick():
    n = 150_000
    rng = np.random.default_rng(0)
    start = np.cumsum(rng.integers(1_000, 5_000, n))
    end = start + rng.integers(100, 900, n)
    nvtx = pd.DataFrame({"name": np.where(np.arange(n) % 2, "a", "b").astype(object), "domain": "",
                         "start_ns": start, "end_ns": end, "duration_ns": end - start, "tid": 1, "pid": 1,
                         "global_tid": 1, "thread_name": "t", "depth": 0, "parent": -1, "kind": "push_pop",
                         "payload": pd.array([pd.NA] * n, dtype="Int64"), "color": None, "category": -1,
                         "ended": True})
    kern = pd.DataFrame({"name": "k", "demangled": "k", "device_id": 0, "context_id": 1, "stream_id": 7,
                         "correlation_id": np.arange(n), "grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 1,
                         "block_y": 1, "block_z": 1, "start_ns": start + 50, "end_ns": end + 50,
                         "duration_ns": end - start, "pid": 1})
    rep = Report.from_frames(nvtx=nvtx, kernels=kern)
    t0 = time.perf_counter()
    fig = plot_timeline(rep, max_events=5000)
    elapsed = time.perf_counter() - t0
    assert "merged" in fig.axes[0].get_title()
    bars = sum(len(c.patches) for c in fig.axes[0].containers)
    assert bars <= 5000
    assert elapsed < 10, elapsed
    matplotlib.pyplot.close(fig)


@pytest.mark.parametrize("starts,ends,gap,exp_s,exp_e", [
    ([0, 5, 20], [4, 10, 30], 1, [0, 20], [10, 30]),
    ([0, 5, 20], [4, 10, 30], 0, [0, 5, 20], [4, 10, 30]),
    ([0, 1, 2], [10, 3, 4], 0, [0], [10]),  # contained intervals
    ([], [], 5, [], []),
])
def test_merge_close(starts, ends, gap, exp_s, exp_e):
    s, e, first = merge_close(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), gap)
    assert list(s) == exp_s and list(e) == exp_e and len(first) == len(exp_s)
