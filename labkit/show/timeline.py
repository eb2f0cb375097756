"""Inline timeline of a report: a Gantt chart with one row per thread (NVTX ranges stacked by
nesting depth) and, per GPU stream, a row of the CUDA API calls that launched its work above
the row of that work (kernels, copies, memsets).

Large reports stay quick: per row and name, intervals closer than one pixel are merged
(:func:`labkit.stats.idle.busy_intervals`, the one interval-merge helper) before drawing, and
the bars are drawn as one collection per colour, so what is drawn is bounded by the figure's
pixels, not by the number of events.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.safe_text import mathtext
from labkit.stats.idle import busy_intervals
from labkit.show.layout import NothingToDraw, Row, colour_key, colours, layout

__all__ = ["plot_timeline", "NothingToDraw", "layout", "colours", "colour_key", "Row"]  # the last four: labkit.show.layout

_WIDTH_IN, _DPI = 12.0, 100
_MAX_HEIGHT_IN = 10.0


def _labels(ax, y, s, e, names, px_ns, origin, white=False):
    """Names on bars wide enough to hold them; a label that would touch the last one is left out."""
    keep = (e - s) / px_ns > 40  # at least ~40 px: short names at 7 pt
    last_right = -np.inf
    for si, ei, ni in list(zip(s[keep], e[keep], names[keep]))[:300]:
        text = mathtext(ni)  # a range name is text, never mathtext
        need = (len(text) * 5.5 + 6) * px_ns  # 7 pt text is about 5.5 px a character at 100 dpi
        if ei - si < need or si < last_right:
            continue
        ax.text((si + ei) / 2 / 1e6 - origin / 1e6, y, text, ha="center", va="center", fontsize=7, clip_on=True,
                color="white" if white else "black")
        last_right = ei


def plot_timeline(report, *, window=None, max_depth: int = 2, labels: bool = True, relative: bool = True,
                  ax=None, figsize=None, min_px: float = 1.5, interactive: bool = False):
    """Gantt chart of NVTX ranges per thread and GPU work per stream, with a legend.

    Args:
        report: a :class:`labkit.report.Report`.
        window: (start_ns, end_ns) on the report clock, or None for everything.
        max_depth: deepest NVTX nesting level drawn (0: top-level ranges only); keeps the
            figure's height bounded for deeply nested reports.
        labels: write range names on bars wide enough to hold them (never overlapping).
        relative: x axis in ms from the window start (else absolute ms).
        ax: an Axes to draw on (default: a new Figure, no pyplot state).
        min_px: the narrowest bar drawn, in pixels, so that short events stay visible.
        interactive: a zoomable Bokeh figure with a hover naming each event instead
            (:func:`labkit.show.interactive.interactive_timeline`; same rows and colours).
    Returns: the matplotlib Figure (interactive: an ``InteractiveTimeline``, shown by the cell).
    Raises: NothingToDraw when the window holds no range, GPU operation, CUDA API or OS runtime call.
    """
    if interactive:
        from labkit.show.interactive import interactive_timeline

        return interactive_timeline(report, window=window, max_depth=max_depth)
    rows, w0, w1 = layout(report, window=window, max_depth=max_depth)
    if ax is None:
        from matplotlib.figure import Figure

        height = min(0.32 * len(rows) + 1.6, _MAX_HEIGHT_IN)
        fig = Figure(figsize=figsize or (_WIDTH_IN, height), dpi=_DPI, layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    px_ns = (w1 - w0) / (fig.get_figwidth() * fig.dpi * 0.8)  # the axes take about 80 % of the width
    origin = w0 if relative else 0
    seen: dict[str, str] = {}
    cmap = colours(rows)
    for i, row in enumerate(rows):
        y, df, how = len(rows) - 1 - i, row.events, row.how
        s = np.clip(df["start_ns"].to_numpy(np.int64), w0, w1)
        e = np.clip(df["end_ns"].to_numpy(np.int64), w0, w1)
        keys = colour_key(df, how)
        for key in pd.unique(keys):
            sel = keys == key
            # merge what is closer than a pixel: lossless on screen, and bounds the bar count
            ms, me = busy_intervals(s[sel], e[sel] + int(px_ns))
            me = np.maximum(me - int(px_ns), ms + int(min_px * px_ns))
            colour = cmap.get(key, "#888888")
            ax.broken_barh(np.column_stack([(ms - origin) / 1e6, (me - ms) / 1e6]), (y - 0.4, 0.8),
                           facecolors=colour, linewidth=0)
            seen.setdefault("CUDA API call" if how == "api" else key, colour)
        if labels:  # range names, and CUDA API calls and GPU work named where wide enough
            o = np.argsort(s, kind="stable")
            names = keys if how in ("name", "osrt") else df["name"].astype(str).to_numpy(dtype=object)
            _labels(ax, y, s[o], e[o], names[o], px_ns, origin, white=how not in ("name", "osrt"))
    ax.set_yticks(range(len(rows) - 1, -1, -1), [mathtext(r.label) for r in rows], fontsize=8 if len(rows) < 20 else 6)
    ax.set_xlim((w0 - origin) / 1e6, (w1 - origin) / 1e6)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("time (ms" + (" from window start)" if relative else ")"))
    ax.set_title(mathtext(str(getattr(report, "path", "")).split("/")[-1]), fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=mathtext(k)) for k, c in list(seen.items())[:16]], loc="upper left",
              bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return fig
