"""The interactive (Bokeh) timeline on real exports: the static timeline's rows and colours, a
hover naming each event with its duration, merging past max_bars said on the figure."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.report.load import load_report
from labkit.style import STAGE_COLORS
from labkit.show.timeline import plot_timeline

pytest.importorskip("bokeh", reason="pip install -e . (bokeh draws the interactive timeline)")
FIX = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location(
    "timeline_speed", Path(__file__).resolve().parents[1] / "benchmarks" / "timeline_speed.py")
timeline_speed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timeline_speed)


def _data(t):
    return t.table()


def _static_rows(fig):
    return [x.get_text() for x in fig.axes[0].get_yticklabels()]


@pytest.mark.parametrize("name", ["gputest.nsys2025.3.sqlite", "pipeline.nsys2022.4.sqlite",
                                  "domains.nsys2022.4.sqlite"])
def test_same_rows_and_colours_as_the_static_timeline(name):
    rep = load_report(FIX / name)
    t = plot_timeline(rep, interactive=True)
    static = plot_timeline(rep)
    assert t.rows == _static_rows(static)
    labels = t.figure.yaxis.major_label_overrides
    assert [labels[k] for k in sorted(labels, reverse=True)] == t.rows
    leg = static.axes[0].get_legend()
    from matplotlib.colors import to_hex

    static_colours = {x.get_text(): to_hex(h.get_facecolor()) for x, h in zip(leg.get_texts(), leg.legend_handles)}
    d = _data(t)
    drawn = dict(zip(d["name"], d["colour"]))
    for key, colour in static_colours.items():
        if key in drawn:
            assert drawn[key] == colour, key
    assert t.events == t.bars == len(d) and t.gap_ns == 0
    assert set(d["row"]) == set(t.rows)


def test_hover_names_each_event_with_its_duration():
    rep = load_report(FIX / "gputest.nsys2025.3.sqlite")
    t = labkit.interactive_timeline(rep)
    d = _data(t)
    ops, api = rep.gpu_ops(), rep.cuda_api
    ranges = rep.nvtx[rep.nvtx["kind"] != "mark"]
    assert len(d["name"]) == len(ops) + len(api) + len(ranges)
    assert set(d["what"]) == {"NVTX range", "CUDA API call"} | set(ops["category"])
    assert set(d["name"]) == set(ops["name"]) | set(api["name"]) | set(ranges["name"])
    k = list(d["what"]).index("kernel")
    kern = ops[ops["category"] == "kernel"].iloc[0]
    assert d["name"][k] == kern["name"] and d["duration_ms"][k] == pytest.approx(kern["duration_ns"] / 1e6)
    assert d["row"][k] == f"GPU 0 stream {kern['stream_id']}"
    hover = next(x for x in t.figure.tools if type(x).__name__ == "HoverTool")
    assert ("duration", "@dur{0,0.000} ms") in hover.tooltips and ("", "@name{custom}") in hover.tooltips
    html = t.html()
    assert "Bokeh" in html and "cdn.bokeh.org" not in html  # BokehJS inline: renders offline


def test_stage_colours_are_labkit_style():
    t = labkit.interactive_timeline(load_report(FIX / "pipeline.nsys2022.4.sqlite"), max_depth=0)
    d = _data(t)
    drawn = {n: c for n, c in zip(d["name"], d["colour"])}
    assert {k: drawn[k] for k in STAGE_COLORS} == STAGE_COLORS


def test_past_max_bars_events_merge_and_the_title_says_so():
    rep = timeline_speed.synthetic(60_000, threads=6)
    t = labkit.interactive_timeline(rep, max_bars=20_000)
    assert t.events == 60_000 and t.bars <= 20_000 and t.gap_ns > 0
    assert "merged into" in t.figure.title.text and f"{t.bars:,} bars" in t.figure.title.text
    d = _data(t)
    assert int(np.sum(d["events"])) == 60_000  # every event is in one bar, and the hover counts them
    full = labkit.interactive_timeline(rep)
    assert full.bars == 60_000 and full.gap_ns == 0 and "merged" not in full.figure.title.text
