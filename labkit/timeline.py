"""Inline timeline of a report: a Gantt chart with one row per thread (NVTX ranges stacked by
nesting depth) and, per GPU stream, a row of the CUDA API calls that launched its work above
the row of that work (kernels, copies, memsets).

Large reports stay quick: per row and name, intervals closer than one pixel are merged
(:func:`labkit.analysis.busy_intervals`, the one interval-merge helper) before drawing, and
the bars are drawn as one collection per colour, so what is drawn is bounded by the figure's
pixels, not by the number of events.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.analysis import busy_intervals
from labkit.errors import LabkitError
from labkit.style import GPU_COLORS, stage_color

__all__ = ["plot_timeline", "NothingToDraw"]

_WIDTH_IN, _DPI = 12.0, 100
_MAX_HEIGHT_IN = 10.0
_GENERIC_THREAD_NAMES = {"", "python", "python3", "nan", "None"}


class NothingToDraw(LabkitError):
    """The report holds no NVTX range, GPU operation or CUDA API call in the window."""


def _thread_labels(nv: pd.DataFrame) -> dict:
    """A readable name per thread: its own name when it has one, ``main`` for a process's first
    thread, else the stage it spends most time in (``decode-0``, ``decode-1`` when shared)."""
    labels, by_stage = {}, {}
    for gtid, g in nv.groupby("global_tid", sort=True):
        own = str(g["thread_name"].dropna().iloc[0]) if g["thread_name"].notna().any() else ""
        if own not in _GENERIC_THREAD_NAMES:
            labels[gtid] = own
        elif (g["tid"] == g["pid"]).all():
            labels[gtid] = "main"
        else:
            top = g[g["depth"] == 0].groupby("name", observed=True)["duration_ns"].sum()
            by_stage.setdefault(str(top.idxmax()) if len(top) else f"tid {g['tid'].iloc[0]}", []).append(gtid)
    for stage, gtids in by_stage.items():
        for i, gtid in enumerate(gtids):
            labels[gtid] = stage if len(gtids) == 1 else f"{stage}-{i}"
    if len(set(nv["pid"])) > 1:  # several processes: say which
        pids = nv.groupby("global_tid")["pid"].first()
        labels = {g: f"{lab} (pid {pids[g]})" for g, lab in labels.items()}
    return labels


def _rows(nv: pd.DataFrame, gpu: pd.DataFrame, api: pd.DataFrame, max_depth: int) -> list[tuple]:
    """(label, starts, ends, names, colour per name) per row, top to bottom."""
    rows = []
    labels = _thread_labels(nv) if len(nv) else {}
    for gtid, g in nv.groupby("global_tid", sort=True):
        for d, gd in g[g["depth"] <= max_depth].groupby("depth", sort=True):
            rows.append((labels[gtid] if d == 0 else f"{labels[gtid]} ·{d}", gd, "name"))
    if len(gpu):
        owner = gpu[["pid", "correlation_id", "device_id", "stream_id"]].drop_duplicates(["pid", "correlation_id"])
        api = api.merge(owner, on=["pid", "correlation_id"], how="left")
        other = api[api["stream_id"].isna()]
        if len(other):
            rows.append(("CUDA API (other calls)", other, "api"))
        for (dev, stream), gs in gpu.groupby(["device_id", "stream_id"], sort=True):
            calls = api[(api["device_id"] == dev) & (api["stream_id"] == stream)]
            if len(calls):
                rows.append((f"CUDA API → stream {stream}", calls, "api"))
            rows.append((f"GPU {dev} stream {stream}", gs, "category"))
    elif len(api):
        rows.append(("CUDA API (no GPU work recorded)", api, "api"))
    return rows


def _colour_key(df: pd.DataFrame, how: str) -> np.ndarray:
    if how == "api":
        return np.full(len(df), "cuda_api", dtype=object)
    return df[how].astype(str).to_numpy(dtype=object)


def _colour(key: str, how: str) -> str:
    return GPU_COLORS.get(key, "#888888") if how in ("api", "category") else stage_color(key)


def _labels(ax, y, s, e, names, px_ns, origin):
    """Names on bars wide enough to hold them; a label that would touch the last one is left out."""
    keep = (e - s) / px_ns > 40  # at least ~40 px: short names at 7 pt
    last_right = -np.inf
    for si, ei, ni in list(zip(s[keep], e[keep], names[keep]))[:300]:
        text = str(ni)
        need = (len(text) * 5.5 + 6) * px_ns  # 7 pt text is about 5.5 px a character at 100 dpi
        if ei - si < need or si < last_right:
            continue
        ax.text((si + ei) / 2 / 1e6 - origin / 1e6, y, text, ha="center", va="center", fontsize=7, clip_on=True)
        last_right = ei


def plot_timeline(report, *, window=None, max_depth: int = 2, labels: bool = True, relative: bool = True,
                  ax=None, figsize=None, min_px: float = 1.5):
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
    Returns: the matplotlib Figure.
    Raises: NothingToDraw when the window holds no range, GPU operation or CUDA API call.
    """
    nv = report.nvtx
    nv = nv[nv["kind"] != "mark"]
    gpu, api = report.gpu_ops(), report.cuda_api
    frames = [df for df in (nv, gpu, api) if len(df)]
    if window is None:
        window = (min(df["start_ns"].min() for df in frames), max(df["end_ns"].max() for df in frames)) if frames \
            else (0, 1)
    w0, w1 = int(window[0]), max(int(window[1]), int(window[0]) + 1)
    nv, gpu, api = (df[(df["end_ns"] >= w0) & (df["start_ns"] <= w1)] for df in (nv, gpu, api))
    rows = _rows(nv, gpu, api, max_depth)
    if not rows:
        raise NothingToDraw(f"nothing to draw in {getattr(report, 'path', 'the report')} between {w0} and {w1} ns: "
                            "no NVTX range, GPU operation or CUDA API call; profile with trace 'cuda,nvtx' and "
                            "annotate the program (labkit.annotate), or widen the window")
    if ax is None:
        from matplotlib.figure import Figure

        height = min(0.32 * len(rows) + 1.6, _MAX_HEIGHT_IN)
        fig = Figure(figsize=figsize or (_WIDTH_IN, height), dpi=_DPI, layout="constrained")
        ax = fig.subplots()
    fig = ax.figure
    px_ns = (w1 - w0) / (fig.get_figwidth() * fig.dpi * 0.8)  # the axes take about 80 % of the width
    origin = w0 if relative else 0
    seen: dict[str, str] = {}
    for i, (label, df, how) in enumerate(rows):
        y = len(rows) - 1 - i
        s = np.clip(df["start_ns"].to_numpy(np.int64), w0, w1)
        e = np.clip(df["end_ns"].to_numpy(np.int64), w0, w1)
        keys = _colour_key(df, how)
        for key in pd.unique(keys):
            sel = keys == key
            # merge what is closer than a pixel: lossless on screen, and bounds the bar count
            ms, me = busy_intervals(s[sel], e[sel] + int(px_ns))
            me = np.maximum(me - int(px_ns), ms + int(min_px * px_ns))
            colour = _colour(key, how)
            ax.broken_barh(np.column_stack([(ms - origin) / 1e6, (me - ms) / 1e6]), (y - 0.4, 0.8),
                           facecolors=colour, linewidth=0)
            seen.setdefault("CUDA API call" if how == "api" else key, colour)
        if labels and how == "name":
            o = np.argsort(s, kind="stable")
            _labels(ax, y, s[o], e[o], df["name"].to_numpy(dtype=object)[o], px_ns, origin)
    ax.set_yticks(range(len(rows) - 1, -1, -1), [r[0] for r in rows], fontsize=8 if len(rows) < 20 else 6)
    ax.set_xlim((w0 - origin) / 1e6, (w1 - origin) / 1e6)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("time (ms" + (" from window start)" if relative else ")"))
    ax.set_title(str(getattr(report, "path", "")).split("/")[-1], fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=k) for k, c in list(seen.items())[:16]], loc="upper left",
              bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return fig
