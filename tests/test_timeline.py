"""plot_timeline on real exports: rows named by thread, CUDA API rows, legend, colours, speed."""
from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

import labkit
from labkit.report.load import Report, load_report
from labkit.style import STAGE_COLORS, stage_color
from labkit.show.timeline import NothingToDraw, plot_timeline

FIX = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location(  # the benchmark's synthetic report, tested as it is timed
    "timeline_speed", Path(__file__).resolve().parents[1] / "benchmarks" / "timeline_speed.py")
timeline_speed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timeline_speed)


def _load(name):
    return load_report(FIX / name)


def _rows(fig):
    return [t.get_text() for t in fig.axes[0].get_yticklabels()]


def _legend(fig):
    leg = fig.axes[0].get_legend()
    return {t.get_text(): to_hex(h.get_facecolor()) for t, h in zip(leg.get_texts(), leg.legend_handles)}


def test_gpu_export_rows_api_above_each_stream():
    rep = _load("gputest.nsys2025.3.sqlite")
    fig = plot_timeline(rep)
    assert isinstance(fig, Figure) and fig.canvas.manager is None  # no pyplot state
    rows = _rows(fig)
    assert rows[:3] == ["main (tid 452)", "main (tid 452) ·1", "main (tid 452) ·2"]  # tid == pid: main thread
    streams = sorted(rep.gpu_ops().groupby(["device_id", "stream_id"]).groups)
    for d, s in streams:
        assert rows[rows.index(f"GPU {d} stream {s}") - 1] == f"CUDA API → stream {s}"
    legend = _legend(fig)
    assert legend["kernel"] == "#4c72b0" and "CUDA API call" in legend


def test_pipeline_threads_named_by_stage_with_shared_colours():
    rep = _load("pipeline.nsys2022.4.sqlite")  # every thread is named "python" by the OS
    fig = plot_timeline(rep, max_depth=0)
    rows = _rows(fig)
    tids = rep.nvtx.groupby("global_tid")["tid"].first().tolist()
    assert [r.split(" (")[0] for r in rows] == ["decode", "preprocess", "infer", "postprocess", "track", "display"]
    assert [int(r.split("tid ")[1].rstrip(")")) for r in rows] == tids  # each row names its thread's tid
    legend = _legend(fig)
    assert {k: legend[k] for k in STAGE_COLORS} == STAGE_COLORS
    assert stage_color("infer") == "#d62728" and stage_color("something") == stage_color("something")


def test_window_clips_and_labels_never_overlap():
    rep = _load("pipeline.nsys2025.3.sqlite")
    w0, w1 = labkit.steady_window(rep, warmup=1, count=3)
    fig = plot_timeline(rep, window=(w0, w1))
    ax = fig.axes[0]
    assert ax.get_xlim() == pytest.approx((0.0, (w1 - w0) / 1e6))
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in ax.texts]
    assert boxes, "no bar was labelled"
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1:])
    # a label stays inside its bar: inside the axes at least
    ax_box = ax.get_window_extent()
    assert all(ax_box.x0 <= b.x0 and b.x1 <= ax_box.x1 for b in boxes)


def test_short_events_keep_a_visible_width():
    rep = _load("gputest.nsys2025.3.sqlite")
    fig = plot_timeline(rep)
    ax = fig.axes[0]
    px = np.diff(ax.get_xlim())[0] / (ax.get_window_extent().width)
    widths = np.array([np.ptp(p.vertices[:, 0]) for c in ax.collections for p in c.get_paths()])
    assert widths.min() >= 1.0 * px  # a 2 us kernel in a seconds-long window is at least a pixel


def test_nothing_to_draw_says_so():
    rep = Report.from_frames(path="empty.sqlite")
    with pytest.raises(NothingToDraw, match="nothing to draw in empty.sqlite"):
        plot_timeline(rep)


def test_height_bounded_for_deep_reports():
    rep = _load("cpu_threads.nsys2022.4.sqlite")
    assert plot_timeline(rep, max_depth=50).get_figheight() <= 10


@pytest.mark.parametrize("n", [20_000, 200_000])
def test_large_reports_draw_a_bounded_picture(n):
    """What keeps a large report quick to draw: the shapes drawn are bounded by the pixels, not the
    events (the time itself is benchmarks/timeline_speed.py's figure, not a test's)."""
    rep = timeline_speed.synthetic(n, threads=6)
    rep.gpu_ops()
    fig = plot_timeline(rep)
    fig.savefig(io.BytesIO(), format="png")
    assert sum(len(c.get_paths()) for c in fig.axes[0].collections) < 20 * 1200  # bounded by pixels



def _bar_colours(fig):
    """Colour of every bar drawn, as hex."""
    return {to_hex(c.get_facecolor()[0]) for c in fig.axes[0].collections if len(c.get_paths())}


def test_domains_apart_and_names_never_share_a_colour():
    """Two NVTX domains: one row each, and every range name its own colour (issue 22)."""
    rep = _load("domains.nsys2022.4.sqlite")
    fig = plot_timeline(rep)
    rows = _rows(fig)
    tid = int(rep.nvtx["tid"].iloc[0])
    assert rows == [f"main (tid {tid})", f"main (tid {tid}) [mydomain]"]
    legend = _legend(fig)
    assert set(legend) == {"plain", "mydomain:work"}
    assert len(set(legend.values())) == len(legend)


def test_many_names_in_one_figure_get_distinct_colours():
    from labkit.style import colour_map

    names = ["epoch", "data", "infer", "decode"] + [f"range{i}" for i in range(120)]
    cmap = colour_map(names)
    assert len(set(cmap.values())) == len(names)  # no repeat, however many names
    assert cmap["infer"] == STAGE_COLORS["infer"] and cmap["decode"] == STAGE_COLORS["decode"]
    assert not set(cmap.values()) & set(labkit.style.GPU_COLORS.values())
    assert colour_map(["epoch", "data"]) == colour_map(["data", "epoch"])  # the same names, the same colours
    # epoch and data shared olive in the old hashed pick: now they differ in every figure
    assert stage_color("epoch") == stage_color("data") and cmap["epoch"] != cmap["data"]


def test_cuda_api_bars_named_where_wide_enough():
    rep = _load("gputest.nsys2025.3.sqlite")
    api = rep.cuda_api
    widest = api.loc[api["duration_ns"].idxmax()]
    fig = plot_timeline(rep, window=(int(widest["start_ns"]) - 1000, int(widest["end_ns"]) + 1000))
    assert widest["name"] in {t.get_text() for t in fig.axes[0].texts}


def test_a_main_thread_named_by_its_launcher_is_main():
    """nsys 2022.4 now and then keeps the name of what exec'd the program for its first thread (labkit's
    /bin/sh wrapper, nsys's launcher): that thread is still the program's main; a thread of another
    process, or a later thread, so named keeps its name."""
    import pandas as pd

    from labkit.show.layout import thread_labels

    ev = pd.DataFrame({"global_tid": [1, 2, 3, 4, 5], "pid": [10, 10, 20, 10, 30], "tid": [10, 11, 20, 12, 30],
                       "thread_name": ["sh", "sh", "nsys-launcher", "writer", "encoder"]})
    labels = thread_labels(ev)
    assert labels[1].startswith("main (tid 10") and labels[3].startswith("main (tid 20")
    assert labels[2].startswith("sh (tid 11") and labels[4].startswith("writer (tid 12")
    assert labels[5].startswith("encoder (tid 30")
