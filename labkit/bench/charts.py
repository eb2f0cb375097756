"""Plots of benchmark results; each takes a table or ledger frame and returns a Figure.

    from labkit import speedup_table, Ledger
    from labkit.bench import charts
    charts.speedup_bars(speedup_table("reports/"))
    charts.fps_vs_accuracy(Ledger("reports/ledger.jsonl").read(), accuracy="map50")
    charts.stage_bars(Ledger("reports/ledger.jsonl").read())
    charts.tradeoff(sweep_frame, label="batch_size")
    charts.predicted_vs_measured(speedup_table("reports/"))

Ledger frames may hold several rows per step and machine; like the speed-up table, the plots
use the latest one (:func:`labkit.bench.tables.latest_rows`). Sized for a notebook cell (about 8x4 in).
"""
from __future__ import annotations

import math

import pandas as pd

from labkit.safe_text import mathtext as _m  # names from ledgers are text, never mathtext
from labkit.style import colour_map
from labkit.bench.tables import SpeedupTable, latest_rows

__all__ = ["speedup_bars", "fps_vs_accuracy", "stage_bars", "tradeoff", "predicted_vs_measured", "predictions"]

_WIDTH = 8.0


def _figure(nrows=1, ncols=1, height=4.0, **kw):
    # Figure() rather than pyplot: no global state, no open-figure warnings in long notebooks;
    # Jupyter still displays a returned Figure.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_WIDTH, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def _plain_log_x(ax) -> None:
    """A logarithmic x axis labelled in plain numbers (10, 20, 50, 100): matplotlib's default
    labels are mathtext (10^2), whose font lookup logs a "findfont" warning per font into the
    notebook wherever a stale font cache lacks matplotlib's own fonts."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))


def speedup_bars(table: SpeedupTable, *, title: str | None = None):
    """Grouped bars: speed-up over the baseline for each step, one colour per machine.

    Bars are labelled ``2.4x``; each draws its 95 % interval (``table.low``/``table.high``: the
    step's fps interval over the baseline's) where the rows have one; the dashed line marks 1x (the
    baseline). Missing values (a step not run on a machine) leave a gap.
    """
    sp = table.speedup
    steps, machines = list(sp.index), list(sp.columns)
    fig, axes = _figure(height=4.2)
    ax = axes[0, 0]
    width = 0.8 / max(len(machines), 1)
    for j, m in enumerate(machines):
        xs = [i + (j - (len(machines) - 1) / 2) * width for i in range(len(steps))]
        vals = sp[m].astype(float).tolist()
        bars = ax.bar(xs, [0 if math.isnan(v) else v for v in vals], width, label=_m(m))
        ends = [table.low[m].reindex(steps).tolist() if m in table.low else None,
                table.high[m].reindex(steps).tolist() if m in table.high else None]
        _interval_bars(ax, xs, vals, *ends)
        for bar, v in zip(bars, vals):
            if not math.isnan(v):
                ax.annotate(f"{v:.2g}x" if v < 10 else f"{v:.0f}x", (bar.get_x() + bar.get_width() / 2, v),
                            ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.axhline(1.0, color="0.3", lw=1, ls="--")
    crowded = len(steps) > 4  # slant long step names so they do not overlap
    ax.set_xticks(range(len(steps)), [_m(s) for s in steps], rotation=(45 if len(steps) > 10 else 20) if crowded else 0,
                  ha="right" if crowded else "center")
    ax.set_ylabel(f"speed-up over {table.baseline!r} ({table.metric})")
    ax.set_title(title or f"Speed-up per step ({table.metric})")
    ax.margins(y=0.12)
    if len(machines) > 1:
        ax.legend(fontsize=8)
    return fig


def _interval_bars(ax, xs, vals, low, high) -> None:
    """Black error bars from ``low`` to ``high`` (sequences in the order of ``vals``, or None) around
    each finite value; nothing where either end is unknown."""
    if low is None or high is None:
        return
    pts = [(x, v, float(lo), float(hi)) for x, v, lo, hi in zip(xs, vals, low, high)
           if not any(t is None or pd.isna(t) for t in (v, lo, hi))]
    if pts:
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                    yerr=[[max(0.0, p[1] - p[2]) for p in pts], [max(0.0, p[3] - p[1]) for p in pts]],
                    fmt="none", ecolor="black", elinewidth=1, capsize=3, zorder=4)


def _fps_intervals(ax, frame: pd.DataFrame, y: str, color) -> None:
    """Horizontal error bars of each row's 95 % interval of frames/s (``fps_ci_low``/``fps_ci_high``)
    at its ``fps`` and ``y``; nothing for rows, or a frame, without one."""
    if not {"fps_ci_low", "fps_ci_high"} <= set(frame.columns):
        return
    ok = frame.dropna(subset=["fps", y, "fps_ci_low", "fps_ci_high"])
    if len(ok):
        ax.errorbar(ok["fps"], ok[y], xerr=[(ok["fps"] - ok["fps_ci_low"]).clip(lower=0),
                                           (ok["fps_ci_high"] - ok["fps"]).clip(lower=0)],
                    fmt="none", ecolor=color, elinewidth=1, capsize=3, zorder=2)


def fps_vs_accuracy(frame: pd.DataFrame, accuracy: str = "map50", *, metric: str = "fps", title: str | None = None):
    """Scatter of throughput against accuracy, one labelled point per step and machine.

    Args:
        frame: ledger frame (:meth:`labkit.Ledger.read`) with ``step``, ``machine``, ``metric``
            and ``accuracy`` columns.
        accuracy: ``"map50"`` or ``"mota"`` (any accuracy column works).
        metric: the x axis; logarithmic when its values span more than 20x. For ``fps``, each
            point draws its 95 % interval (``fps_ci_low``/``fps_ci_high``) where the row has one.
    """
    for col in ("step", metric, accuracy):
        if col not in frame.columns:
            raise ValueError(f"frame has no {col!r} column; columns: {list(frame.columns)}")
    df = latest_rows(frame).dropna(subset=[metric, accuracy])
    fig, axes = _figure(height=4.5)
    ax = axes[0, 0]
    groups = df.groupby("machine", sort=False) if "machine" in df.columns else [("", df)]
    for machine, g in groups:
        points = ax.scatter(g[metric], g[accuracy], s=40, label=_m(machine) if machine else None, zorder=3)
        if metric == "fps":
            _fps_intervals(ax, g, accuracy, points.get_facecolor()[0])
        for _, r in g.iterrows():
            ax.annotate(_m(r["step"]), (r[metric], r[accuracy]), fontsize=8, xytext=(4, 4),
                        textcoords="offset points")
    positive = df[metric][df[metric] > 0]
    if len(positive) and positive.max() / positive.min() > 20:  # CPU and GPU rows on one axis
        _plain_log_x(ax)
    ax.set_xlabel("frames/s" if metric == "fps" else metric)
    ax.set_ylabel(accuracy)
    ax.set_title(title or f"{'Throughput' if metric == 'fps' else metric} vs {accuracy}")
    ax.grid(alpha=0.3)
    ax.margins(0.15)
    if df.get("machine") is not None and df["machine"].nunique() > 1:
        ax.legend(fontsize=8)
    return fig


def stage_bars(frame: pd.DataFrame, *, title: str | None = None):
    """Stacked horizontal bars of milliseconds per frame by stage, one bar per step.

    Args:
        frame: ledger frame with ``step`` and ``stage_ms.<stage>`` columns (ms per frame);
            one panel per machine when it holds several.
    """
    stages = [c for c in frame.columns if c.startswith("stage_ms.")]
    if not stages:
        raise ValueError("frame has no stage_ms.<stage> columns: benchmark an application that reports "
                         "stage_ms in its results file")
    df = latest_rows(frame).dropna(subset=stages, how="all")
    machines = list(dict.fromkeys(df["machine"])) if "machine" in df.columns else [None]
    fig, axes = _figure(nrows=len(machines), height=max(2.0, 0.45 * df["step"].nunique() + 1.4))
    colors = _stage_colors(stages)
    for ax, machine in zip(axes[:, 0], machines):
        g = df if machine is None else df[df["machine"] == machine]
        steps = [_m(s) for s in g["step"]]
        left = [0.0] * len(g)
        for col in stages:
            vals = g[col].fillna(0.0).astype(float).tolist()
            ax.barh(steps, vals, left=left, label=_m(col.split(".", 1)[1]), color=colors[col])
            left = [a + b for a, b in zip(left, vals)]
        for y, total in enumerate(left):
            ax.annotate(f"{total:.1f} ms", (total, y), va="center", fontsize=8, xytext=(3, 0),
                        textcoords="offset points")
        ax.invert_yaxis()  # first step on top
        ax.set_xlabel("ms per frame")
        ax.margins(x=0.12)
        ax.set_title(_m(machine) if machine else (title or "Time per frame by stage"), fontsize=10)
    # one legend for all panels, below them: above the axes it covered the panel's title
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncols=min(len(stages), 6), loc="outside lower center")
    if title and machines != [None]:
        fig.suptitle(title)
    return fig


def _stage_colors(columns):
    """Colour per ``stage_ms.<stage>`` column: the stage's own (labkit.style), looked up by the
    stage's name, not the column's; other names distinct within the figure."""
    cmap = colour_map(c.split(".", 1)[1] for c in columns)
    return {c: cmap[c.split(".", 1)[1]] for c in columns}


def tradeoff(frame: pd.DataFrame, *, label: str, title: str | None = None):
    """Median latency against throughput, one labelled point per row, joined in row order.

    Args:
        frame: ledger or sweep frame with ``fps`` (frames/s), ``latency_p50_ms`` (ms) and
            ``label``, the column written beside each point (e.g. ``batch_size``); with
            ``fps_ci_low``/``fps_ci_high``, each point draws its throughput's 95 % interval.
    """
    for col in ("fps", "latency_p50_ms", label):
        if col not in frame.columns:
            raise ValueError(f"frame has no {col!r} column; columns: {list(frame.columns)}")
    fig, axes = _figure(height=4.0)
    ax = axes[0, 0]
    ax.plot(frame["fps"], frame["latency_p50_ms"], "o-", zorder=3)
    _fps_intervals(ax, frame, "latency_p50_ms", "0.3")
    for value, x, y in zip(frame[label], frame["fps"], frame["latency_p50_ms"]):
        ax.annotate(_m(f"{label} {value}"), (x, y), fontsize=8, xytext=(5, 4), textcoords="offset points")
    ax.set_xlabel("throughput (frames/s)")
    ax.set_ylabel("latency p50 (ms)")
    ax.set_title(title or f"latency against throughput, by {label}")
    ax.grid(alpha=0.3)
    ax.margins(0.15)
    return fig


def predictions(table: SpeedupTable, machine: str | None = None) -> pd.DataFrame:
    """Each step's predicted speed-up beside the one measured, on one machine.

    Args:
        table: a speed-up table with ``builds_on`` (``labkit.speedup_table``); its ``rows`` carry
            the ledger's ``predicted_speedup`` where a step was run under a prediction.
        machine: one of ``table.machines`` (default: the first).
    Returns: index ``step``; columns ``builds_on``, ``predicted`` (the estimate the step ran
    under, NaN where none), ``measured`` (its metric over the step it builds on), ``side`` (where
    the measurement fell, by its 95 % interval over the step it builds on (``low``, ``high``:
    :func:`speedup_interval`; without one the usual noise, ``labkit.judge.advice.MIN_GAIN``):
    "slower" than the step it builds on, else "within" noise of the estimate, "above" it or
    "below" it, or for a prediction whose ``basis`` is "bound", "inside" or "above" it; NA without one), ``slower``
    (beyond the noise, with or without an estimate) and ``within`` (side is "within"; NA without one). Steps
    without a measured gain are left out.
    """
    machine = machine or (table.machines[0] if table.machines else None)
    if machine is None or machine not in table.over_builds_on.columns:
        return pd.DataFrame(columns=["builds_on", "predicted", "measured", "within"]).rename_axis("step")
    rows = table.rows
    if "predicted_speedup" in rows.columns and "machine" in rows.columns:
        mine = rows[rows["machine"] == machine].set_index("step")
        pred = mine["predicted_speedup"].astype(float)
        basis = mine["basis"] if "basis" in mine.columns else pd.Series(dtype=object)
    else:
        pred, basis = pd.Series(dtype=float), pd.Series(dtype=object)
    out = pd.DataFrame({"builds_on": table.builds_on_of(machine),
                        "predicted": pred.reindex(table.over_builds_on.index),
                        "measured": table.over_builds_on[machine].astype(float)})
    out = out.dropna(subset=["measured"])
    bound = basis.reindex(out.index).eq("bound") if len(basis) else pd.Series(False, index=out.index)
    ci = {st: speedup_interval(table, machine, st) for st in out.index}
    out["low"] = [ci[st][0] if ci[st] else math.nan for st in out.index]
    out["high"] = [ci[st][1] if ci[st] else math.nan for st in out.index]
    out["slower"] = [_side(m, m, False, ci[st]) == "slower" for st, m in zip(out.index, out["measured"])]
    out["side"] = [pd.NA if math.isnan(p) else _side(m, p, b, ci[st])
                   for st, p, m, b in zip(out.index, out["predicted"], out["measured"], bound)]
    out["within"] = [pd.NA if pd.isna(s) else s == "within" for s in out["side"]]
    return out.rename_axis("step")


def speedup_interval(table: SpeedupTable, machine: str, step: str) -> tuple[float, float] | None:
    """The 95 % interval of ``step``'s speed-up over the step it builds on, on ``machine``, from both
    rows' fps intervals (``fps_ci_low``/``fps_ci_high``): (low / other's high, high / other's low);
    None where either row has none. The lab's one noise rule: the verdicts use the same."""
    rows = table.rows
    if not {"fps_ci_low", "fps_ci_high", "step"} <= set(rows.columns):
        return None
    mine = rows[rows["machine"] == machine] if "machine" in rows.columns else rows
    mine = mine.drop_duplicates("step", keep="last").set_index("step")
    on = table.builds_on_of(machine).get(step)
    if step not in mine.index or not isinstance(on, str) or on not in mine.index:
        return None
    lo, hi = float(mine.at[step, "fps_ci_low"]), float(mine.at[step, "fps_ci_high"])
    blo, bhi = float(mine.at[on, "fps_ci_low"]), float(mine.at[on, "fps_ci_high"])
    if any(math.isnan(v) for v in (lo, hi, blo, bhi)) or not blo > 0:
        return None
    return lo / bhi, hi / blo


def _side(measured: float, predicted: float, bound: bool = False, ci: tuple[float, float] | None = None) -> str:
    """Where a measured speed-up fell against its estimate (or its bound: "inside" it), by its own
    95 % interval ``ci`` (:func:`speedup_interval`), else by the usual noise of a measurement."""
    from labkit.judge.advice import MIN_GAIN

    lo, hi = ci if ci else (measured / MIN_GAIN, measured * MIN_GAIN)
    if hi < 1.0:
        return "slower"
    if bound:
        return "inside" if lo <= predicted else "above"
    if lo <= predicted <= hi:
        return "within"
    return "above" if lo > predicted else "below"


SIDE_COLORS = {"within": "tab:green", "inside": "tab:blue", "below": "tab:orange", "above": "tab:red",
               "slower": "tab:purple"}
"""The bar colour of each ``side`` of :func:`predictions` (grey: no estimate)."""
SIDE_LABELS = {"within": "within the noise of its estimate", "inside": "inside its bound",
               "below": "below its estimate", "above": "above its estimate or bound", "slower": "slower than before"}


def predicted_vs_measured(table: SpeedupTable, *, machine: str | None = None, title: str | None = None):
    """Measured speed-up of each step over the step it builds on (bars), with the estimate
    it ran under (a black tick; none where the step had no estimate).

    Each bar draws its 95 % interval (:func:`speedup_interval`) where both rows have one. A bar
    above its tick measured more than its estimate: the estimate's assumptions missed a gain. Each
    bar's colour is its ``side`` (:data:`SIDE_COLORS`, named in the legend). The dashed line marks 1x (no
    gain over the step built on). Raises ValueError when no step has a
    measured gain over a step it builds on (a ledger with the baseline only).
    """
    p = predictions(table, machine)
    if len(p) == 0:
        raise ValueError("no step has a measured speed-up over the step it builds on: run a step after the baseline")
    fig, axes = _figure(height=4.2)
    ax = axes[0, 0]
    xs = list(range(len(p)))
    colors = [SIDE_COLORS.get(str(side), "tab:gray") for side in p["side"]]  # NA: grey
    bars = ax.bar(xs, p["measured"], 0.6, color=colors)
    _interval_bars(ax, xs, p["measured"].tolist(), p["low"].tolist(), p["high"].tolist())
    for bar, v in zip(bars, p["measured"]):
        ax.annotate(f"{v:.2f}x", (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    has = p["predicted"].notna()
    ax.scatter([x for x, h in zip(xs, has) if h], p["predicted"][has], marker="_", s=900, color="black",
               linewidths=2.5, zorder=3, label="estimate")
    ax.axhline(1.0, color="0.3", lw=1, ls="--")
    crowded = len(p) > 4
    ax.set_xticks(xs, [_m(f"{s}\n(on {b})" if isinstance(b, str) else s) for s, b in zip(p.index, p["builds_on"])],
                  rotation=(45 if len(p) > 10 else 20) if crowded else 0, ha="right" if crowded else "center", fontsize=8)
    ax.set_ylabel(f"{table.metric} over the step built on")
    ax.set_title(title or "Estimate against measured speed-up, per step")
    ax.margins(y=0.12)
    from matplotlib.patches import Patch

    shown = [k for k in SIDE_COLORS if k in set(p["side"].dropna().astype(str))]
    ax.legend(handles=[*ax.get_legend_handles_labels()[0]]
              + [Patch(color=SIDE_COLORS[k], label=SIDE_LABELS[k]) for k in shown]
              + ([Patch(color="tab:gray", label="no estimate")] if p["side"].isna().any() else []), fontsize=8)
    return fig
