"""Inline timeline of a report: a Gantt chart with one row per thread (NVTX ranges stacked by
nesting depth) and, per GPU stream, a row of the CUDA API calls that launched its work above
the row of that work (kernels, copies, memsets).

Large reports stay quick: per row and name, intervals closer than one pixel are merged
(:func:`labkit.analysis.busy_intervals`, the one interval-merge helper) before drawing, and
the bars are drawn as one collection per colour, so what is drawn is bounded by the figure's
pixels, not by the number of events.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.analysis import busy_intervals
from labkit.errors import LabkitError
from labkit.style import GPU_COLORS, colour_map

__all__ = ["plot_timeline", "NothingToDraw", "layout", "colours", "colour_key", "Row"]

_WIDTH_IN, _DPI = 12.0, 100
_MAX_HEIGHT_IN = 10.0
_GENERIC_THREAD_NAMES = {"", "python", "python3", "nan", "None"}


class NothingToDraw(LabkitError):
    """The report holds no NVTX range, GPU operation or CUDA API call in the window."""


def _thread_labels(nv: pd.DataFrame) -> dict:
    """A readable name per thread, with its tid: its own name when it has one, ``main`` for a
    process's first thread, else the stage it spends most time in (``decode (tid 12)``)."""
    labels = {}
    for gtid, g in nv.groupby("global_tid", sort=True):
        own = str(g["thread_name"].dropna().iloc[0]) if g["thread_name"].notna().any() else ""
        tid = int(g["tid"].iloc[0])
        if own not in _GENERIC_THREAD_NAMES:
            name = own
        elif (g["tid"] == g["pid"]).all():
            name = "main"
        else:
            top = g[g["depth"] == g["depth"].min()].groupby("name", observed=True)["duration_ns"].sum()
            name = str(top.idxmax()) if len(top) else "thread"
        labels[gtid] = f"{name} (tid {tid})"
    if len(set(nv["pid"])) > 1:  # several processes: say which
        pids = nv.groupby("global_tid")["pid"].first()
        labels = {g: f"{lab[:-1]}, pid {pids[g]})" for g, lab in labels.items()}
    return labels


@dataclass
class Row:
    """One row of a timeline: its label, its events (a frame with start_ns, end_ns, name) and
    what colours them: ``"name"`` (NVTX ranges: one colour per range name, NVTX domain
    included), ``"api"`` (CUDA API calls, one grey) or ``"category"`` (kernel, memcpy, memset)."""

    label: str
    events: pd.DataFrame
    how: str


def colour_key(events: pd.DataFrame, how: str) -> np.ndarray:
    """Per event, the key its colour is looked up by (:func:`colours`)."""
    if how == "api":
        return np.full(len(events), "cuda_api", dtype=object)
    if how == "name":
        names = events["name"].astype(str).to_numpy(dtype=object)
        if "domain" in events.columns:  # IO:read and Compute:read are two ranges, two colours
            dom = events["domain"].fillna("").astype(str).to_numpy(dtype=object)
            return np.where(dom == "", names, dom + ":" + names)
        return names
    return events[how].astype(str).to_numpy(dtype=object)


def colours(rows: list[Row]) -> dict:
    """Colour per key for one figure: stages as :data:`labkit.style.STAGE_COLORS`, every other
    range name its own (no two names share one, :func:`labkit.style.colour_map`), GPU work and
    CUDA API calls as :data:`labkit.style.GPU_COLORS`."""
    names = [k for r in rows if r.how == "name" for k in pd.unique(colour_key(r.events, "name"))]
    out = colour_map(names)
    out.update({k: v for k, v in GPU_COLORS.items()})
    return out


def layout(report, *, window=None, max_depth: int = 2) -> tuple[list[Row], int, int]:
    """The rows of a timeline, top to bottom, and its window (start_ns, end_ns): per thread and
    NVTX domain, one row per nesting level (default domain first); then, per GPU stream, a row of
    the CUDA API calls that launched its work above the row of that work. Shared by
    :func:`plot_timeline` and :func:`labkit.timeline_interactive.interactive_timeline`."""
    nv = report.nvtx
    nv = nv[nv["kind"] != "mark"]
    gpu, api = report.gpu_ops(), report.cuda_api
    frames = [df for df in (nv, gpu, api) if len(df)]
    if window is None:
        window = (min(df["start_ns"].min() for df in frames), max(df["end_ns"].max() for df in frames)) if frames \
            else (0, 1)
    w0, w1 = int(window[0]), max(int(window[1]), int(window[0]) + 1)
    nv, gpu, api = (df[(df["end_ns"] >= w0) & (df["start_ns"] <= w1)] for df in (nv, gpu, api))
    rows = []
    labels = _thread_labels(nv) if len(nv) else {}
    dom_col = nv["domain"].fillna("").astype(str) if "domain" in nv.columns else pd.Series("", index=nv.index)
    for (gtid, dom), g in nv.groupby([nv["global_tid"], dom_col], sort=True):
        # depth counted within the domain: levels present, renumbered from 0
        levels = sorted(set(g["depth"]))
        for d, gd in g.groupby("depth", sort=True):
            level = levels.index(d)
            if level > max_depth:
                continue
            label = labels[gtid] + (f" [{dom}]" if dom else "")
            rows.append(Row(label if level == 0 else f"{label} ·{level}", gd, "name"))
    if len(gpu):
        owner = gpu[["pid", "correlation_id", "device_id", "stream_id"]].drop_duplicates(["pid", "correlation_id"])
        api = api.merge(owner, on=["pid", "correlation_id"], how="left")
        other = api[api["stream_id"].isna()]
        if len(other):
            rows.append(Row("CUDA API (other calls)", other, "api"))
        for (dev, stream), gs in gpu.groupby(["device_id", "stream_id"], sort=True):
            calls = api[(api["device_id"] == dev) & (api["stream_id"] == stream)]
            if len(calls):
                rows.append(Row(f"CUDA API → stream {stream}", calls, "api"))
            rows.append(Row(f"GPU {dev} stream {stream}", gs, "category"))
    elif len(api):
        rows.append(Row("CUDA API (no GPU work recorded)", api, "api"))
    if not rows:
        raise NothingToDraw(f"nothing to draw in {getattr(report, 'path', 'the report')} between {w0} and {w1} ns: "
                            "no NVTX range, GPU operation or CUDA API call; profile with trace 'cuda,nvtx' and "
                            "annotate the program (labkit.annotate), or widen the window")
    return rows, w0, w1


def _labels(ax, y, s, e, names, px_ns, origin, white=False):
    """Names on bars wide enough to hold them; a label that would touch the last one is left out."""
    keep = (e - s) / px_ns > 40  # at least ~40 px: short names at 7 pt
    last_right = -np.inf
    for si, ei, ni in list(zip(s[keep], e[keep], names[keep]))[:300]:
        text = str(ni)
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
            (:func:`labkit.timeline_interactive.interactive_timeline`; same rows and colours).
    Returns: the matplotlib Figure (interactive: an ``InteractiveTimeline``, shown by the cell).
    Raises: NothingToDraw when the window holds no range, GPU operation or CUDA API call.
    """
    if interactive:
        from labkit.timeline_interactive import interactive_timeline

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
            names = keys if how == "name" else df["name"].astype(str).to_numpy(dtype=object)
            _labels(ax, y, s[o], e[o], names[o], px_ns, origin, white=how != "name")
    ax.set_yticks(range(len(rows) - 1, -1, -1), [r.label for r in rows], fontsize=8 if len(rows) < 20 else 6)
    ax.set_xlim((w0 - origin) / 1e6, (w1 - origin) / 1e6)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("time (ms" + (" from window start)" if relative else ")"))
    ax.set_title(str(getattr(report, "path", "")).split("/")[-1], fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=k) for k, c in list(seen.items())[:16]], loc="upper left",
              bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return fig
