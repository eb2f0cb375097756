"""Charts render headless to real PNGs of notebook size, with the content they claim."""
from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.figure import Figure

from labkit import speedup_table
from labkit.bench import charts
from labkit.bench.ledger import Ledger

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "cpu": "AMD EPYC"}
XEON = {"gpu": None, "cpu": "Intel(R) Xeon(R) Processor"}
STEPS = [("baseline", 40.0, 0.80, 0.70, {"decode": 2.0, "preprocess": 6.0, "infer": 12.0, "draw": 5.0}),
         ("queues", 70.0, 0.80, 0.70, {"decode": 2.0, "preprocess": 6.0, "infer": 5.0, "draw": 1.0}),
         ("batching", 150.0, 0.80, 0.70, {"decode": 2.0, "preprocess": 3.0, "infer": 1.5, "draw": 0.2}),
         ("fp16", 300.0, 0.79, 0.69, {"decode": 1.0, "preprocess": 1.5, "infer": 0.6, "draw": 0.2})]


@pytest.fixture
def ledger_frame(tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    for env, scale in ((H100, 1.0), (XEON, 0.1)):
        for step, fps, map50, mota, stages in STEPS:
            led.append({"step": step, "env": env, "metrics": {
                "fps": fps * scale, "map50": map50, "mota": mota,
                "stage_ms": {k: v / scale for k, v in stages.items()}}})
    return led.read()


def _png(fig, path):
    import matplotlib.image as mpimg

    assert isinstance(fig, Figure)
    fig.savefig(path, dpi=100)
    img = mpimg.imread(path)
    assert path.stat().st_size > 10_000  # a real drawing, not a blank canvas
    assert img.std() > 0.05               # not one flat colour
    return img.shape[1], img.shape[0]


def test_speedup_bars(ledger_frame, tmp_path):
    fig = charts.speedup_bars(speedup_table(ledger_frame))
    w, h = _png(fig, tmp_path / "speedup.png")
    assert (w, h) == (800, 420)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [s[0] for s in STEPS]
    labels = {t.get_text() for t in ax.texts}
    assert {"1x", "7.5x", "1.8x"} <= labels  # 300/40 and 70/40 on both machines
    assert len(ax.patches) == 2 * len(STEPS)


def test_fps_vs_accuracy(ledger_frame, tmp_path):
    for acc in ("map50", "mota"):
        fig = charts.fps_vs_accuracy(ledger_frame, accuracy=acc)
        assert _png(fig, tmp_path / f"acc_{acc}.png") == (800, 450)
        ax = fig.axes[0]
        assert ax.get_ylabel() == acc and ax.get_xlabel() == "frames/s"
        assert sorted(t.get_text() for t in ax.texts) == sorted([s[0] for s in STEPS] * 2)
        # H100 and CPU rows: a log axis, labelled in plain numbers (no mathtext, whose font lookup
        # printed "findfont" warnings into 07 on a machine with a stale matplotlib font cache)
        labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_text()]
        assert ax.get_xscale() == "log" and labels and not [x for x in labels if "$" in x], labels
    with pytest.raises(ValueError, match="no 'hota' column"):
        charts.fps_vs_accuracy(ledger_frame, accuracy="hota")


def test_stage_bars_one_panel_per_machine(ledger_frame, tmp_path):
    fig = charts.stage_bars(ledger_frame)
    w, h = _png(fig, tmp_path / "stages.png")
    assert w == 800 and h > 300
    assert [ax.get_title() for ax in fig.axes] == ["NVIDIA H100 80GB HBM3", "CPU (Intel(R) Xeon(R) Processor)"]
    totals = [t.get_text() for t in fig.axes[0].texts]
    assert totals == ["25.0 ms", "14.0 ms", "6.7 ms", "3.3 ms"]


def test_stage_bars_uses_latest_row_and_needs_stages(tmp_path):
    led = Ledger(tmp_path / "l.jsonl")
    led.append({"step": "a", "env": XEON, "time": "2026-01-01T00:00:00+00:00", "metrics": {"stage_ms": {"x": 1.0}}})
    led.append({"step": "a", "env": XEON, "time": "2026-01-02T00:00:00+00:00", "metrics": {"stage_ms": {"x": 9.0}}})
    fig = charts.stage_bars(led.read())
    assert [t.get_text() for t in fig.axes[0].texts] == ["9.0 ms"]
    with pytest.raises(ValueError, match="no stage_ms"):
        charts.stage_bars(pd.DataFrame({"step": ["a"], "fps": [1.0]}))


@pytest.mark.parametrize("title", [None, "Time per frame"])
def test_stage_bars_legend_covers_no_title(ledger_frame, title):
    """The legend sits below the panels (above them it covered the first panel's title)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = charts.stage_bars(ledger_frame, title=title)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # lay the figure out as savefig would
    renderer = canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    if fig._suptitle is not None:
        titles.append(fig._suptitle.get_window_extent(renderer))
    assert titles and not any(legend.overlaps(t) for t in titles)
    stages = [c.split(".", 1)[1] for c in ledger_frame.columns if c.startswith("stage_ms.")]
    assert [t.get_text() for t in fig.legends[0].texts] == stages


def test_tradeoff_labels_each_point():
    from matplotlib.figure import Figure

    f = pd.DataFrame({"fps": [1.0, 2.0], "latency_p50_ms": [10.0, 30.0], "batch_size": [1, 4]})
    fig = charts.tradeoff(f, label="batch_size")
    assert isinstance(fig, Figure)  # no pyplot state: nothing left open
    assert [t.get_text() for t in fig.axes[0].texts] == ["batch_size 1", "batch_size 4"]
    assert fig.axes[0].get_xlabel() == "throughput (frames/s)"
    with pytest.raises(ValueError, match="no 'streams' column"):
        charts.tradeoff(f, label="streams")


def _predicted_ledger(tmp_path, rows):
    led = Ledger(tmp_path / "p.jsonl")
    for step, fps, builds_on, pred in rows:
        rec = {"step": step, "env": XEON, "metrics": {"fps": fps}, "builds_on": builds_on}
        if pred is not None:
            rec["predicted_speedup"], rec["basis"] = pred if isinstance(pred, tuple) else (pred, "estimate")
        led.append(rec)
    return speedup_table(led.read())


def test_predicted_vs_measured_bars_and_bounds(tmp_path):
    """Measured is fps over the step built on (not over the baseline); a bar above its bound is red."""
    table = _predicted_ledger(tmp_path, [("baseline", 10.0, None, None), ("queues", 12.0, "baseline", 1.18),
                                         ("batch4", 18.0, "queues", 1.25), ("compile", 20.0, "batch4", None)])
    p = charts.predictions(table)
    assert list(p.index) == ["queues", "batch4", "compile"]
    assert p["measured"].round(3).tolist() == [1.2, 1.5, 1.111]
    # 1.20 against 1.18: within the noise of a measurement; 1.50 against 1.25: above it
    assert p["side"].tolist()[:2] == ["within", "above"] and p["within"].tolist()[:2] == [True, False]
    assert p["within"].isna().tolist() == [False, False, True]
    fig = charts.predicted_vs_measured(table)
    assert _png(fig, tmp_path / "pvm.png") == (800, 420)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["1.20x", "1.50x", "1.11x"]
    ticks = ax.collections[0].get_offsets()  # the predicted bounds: only steps that had one
    assert ticks[:, 1].round(2).tolist() == [1.18, 1.25]
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "queues\n(on baseline)"
    # every prediction is an estimate (an upper bound only where its basis says so): never "bound" on the chart
    assert "estimate" in [t.get_text() for t in ax.get_legend().get_texts()] and "bound" not in ax.get_title()


def test_predicted_vs_measured_within_bound_is_green(tmp_path):
    table = _predicted_ledger(tmp_path, [("baseline", 10.0, None, None), ("queues", 11.5, "baseline", 1.18)])
    assert charts.predictions(table)["within"].tolist() == [True]
    fig = charts.predicted_vs_measured(table)
    assert fig.axes[0].patches[0].get_facecolor()[:3] == pytest.approx((0.17254901960784313, 0.6274509803921569,
                                                                        0.17254901960784313))


def test_a_regression_is_slower_not_at_or_under_its_estimate(tmp_path):
    """A step that measured slower than the step it builds on is no success of its estimate."""
    table = _predicted_ledger(tmp_path, [("baseline", 10.0, None, None), ("queues", 8.6, "baseline", 1.18),
                                         ("no_osd", 9.0, "queues", 1.5)])
    p = charts.predictions(table)
    assert p["side"].tolist() == ["slower", "below"] and p["within"].tolist() == [False, False]


def test_a_step_under_a_bound_is_inside_it_not_below_an_estimate(tmp_path):
    table = _predicted_ledger(tmp_path, [("baseline", 10.0, None, None), ("compile", 15.0, "baseline", (11.3, "bound")),
                                         ("fp16", 30.0, "compile", (1.5, "bound"))])
    assert charts.predictions(table)["side"].tolist() == ["inside", "above"]


def test_predicted_vs_measured_needs_a_step_after_the_baseline(tmp_path):
    table = _predicted_ledger(tmp_path, [("baseline", 10.0, None, None)])
    assert len(charts.predictions(table)) == 0
    with pytest.raises(ValueError, match="run a step after the baseline"):
        charts.predicted_vs_measured(table)


def test_stage_colours_are_labkit_style_in_every_plot(ledger_frame):
    """One colour per stage in every plot that draws stages: stage bars and the timelines (issue 21)."""
    from pathlib import Path

    from matplotlib.colors import to_hex

    from labkit.report.load import load_report
    from labkit.style import STAGE_COLORS
    from labkit.show.timeline import plot_timeline

    fig = charts.stage_bars(ledger_frame)
    legend = {t.get_text(): to_hex(h.get_facecolor()) for t, h in zip(fig.legends[0].texts, fig.legends[0].legend_handles)}
    assert {k: legend[k] for k in ("decode", "preprocess", "infer")} == {k: STAGE_COLORS[k] for k in
                                                                         ("decode", "preprocess", "infer")}
    assert legend["draw"] not in STAGE_COLORS.values() and len(set(legend.values())) == len(legend)
    for ax in fig.axes:  # every bar of a stage has the stage's colour
        for bars in ax.containers:
            assert {to_hex(b.get_facecolor()) for b in bars} == {legend[bars.get_label()]}
    rep = load_report(Path(__file__).parent / "fixtures" / "pipeline.nsys2022.4.sqlite")
    tl = plot_timeline(rep, max_depth=0)
    leg = tl.axes[0].get_legend()
    drawn = {t.get_text(): to_hex(h.get_facecolor()) for t, h in zip(leg.get_texts(), leg.legend_handles)}
    assert {k: drawn[k] for k in STAGE_COLORS} == STAGE_COLORS


def test_each_bar_is_coloured_by_its_side_and_the_legend_names_it(tmp_path):
    """07's text reads the colours off the chart: a bar below its estimate is not painted as a success,
    a bar inside its bound is told apart from one within the noise of an estimate."""
    import matplotlib.colors as mcolors

    table = _predicted_ledger(tmp_path, [("baseline", 10.0, None, None), ("queues", 11.5, "baseline", 1.18),
                                         ("no_osd", 12.0, "queues", 1.5), ("compile", 15.0, "no_osd", (11.3, "bound")),
                                         ("fp16", 45.0, "compile", 1.2), ("int8", 50.0, "fp16", None)])
    p = charts.predictions(table)
    assert p["side"].fillna("none").tolist() == ["within", "below", "inside", "above", "none"]
    ax = charts.predicted_vs_measured(table).axes[0]
    want = [charts.SIDE_COLORS[s] for s in ("within", "below", "inside", "above")] + ["tab:gray"]
    assert [mcolors.to_hex(b.get_facecolor()) for b in ax.patches[:5]] == [mcolors.to_hex(c) for c in want]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["estimate", "within the noise of its estimate", "inside its bound", "below its estimate",
                      "above its estimate or bound", "no estimate"]


def test_every_figure_of_measured_rows_draws_their_intervals():
    """The H200 reference's rows carry fps intervals: the speed-up bars, the estimate chart and the
    throughput scatter each draw one error bar per row that has one, from its own low to its high."""
    import warnings

    from matplotlib.collections import LineCollection

    from labkit.bench.ledger import Ledger as L

    ref = "reports/reference/h200"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = speedup_table(ref)

    def segments(fig):
        return [seg for c in fig.axes[0].collections if isinstance(c, LineCollection) for seg in c.get_segments()]

    m = table.machines[0]
    bars = segments(charts.speedup_bars(table))
    have = table.low[m].notna() & table.high[m].notna() & table.speedup[m].notna()
    assert len(bars) == int(have.sum()) > 10
    lows = sorted(round(min(s[:, 1]), 6) for s in bars)
    assert lows == sorted(round(max(0.0, float(v)), 6) for v in table.low[m][have])  # from each row's low
    p = charts.predictions(table, m)
    assert len(segments(charts.predicted_vs_measured(table))) == int((p["low"].notna() & p["high"].notna()).sum()) > 10
    frame = L(f"{ref}/ledger.jsonl").read()
    scatter = segments(charts.fps_vs_accuracy(frame))
    assert len(scatter) == len(charts.latest_rows(frame).dropna(subset=["fps", "map50", "fps_ci_low", "fps_ci_high"]))
