"""The rows and colours of a report's timeline, shared by the static timeline
(:mod:`labkit.show.timeline`), the interactive one (:mod:`labkit.show.interactive`) and the
Perfetto export's thread names (:mod:`labkit.show.perfetto`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.errors import LabkitError
from labkit.report.window import span_of
from labkit.style import GPU_COLORS, colour_map

__all__ = ["NothingToDraw", "Row", "layout", "colours", "colour_key", "thread_labels", "os_calls"]

_GENERIC_THREAD_NAMES = {"", "python", "python3", "nan", "None"}
_LAUNCHER_NAMES = {"sh", "nsys-launcher"}
"""Names nsys 2022.4 now and then keeps for a process's first thread from before it exec'd the
program: labkit's ``/bin/sh`` wrapper (``labkit.record.nsys``) or nsys's own launcher. Such a main
thread is the program's ``main``."""


class NothingToDraw(LabkitError):
    """The report holds no NVTX range, GPU operation, CUDA API call or OS runtime call in the window."""


def thread_labels(nv: pd.DataFrame) -> dict:
    """A readable name per thread, with its tid: its own name when it has one, ``main`` for a
    process's first thread (also one named by the launcher it was exec'd from, ``_LAUNCHER_NAMES``), else the stage it spends most time in (``decode (tid 12)``); ``nv``'s
    rows are NVTX ranges, or other events of the threads (then without ``depth``: ``thread``)."""
    labels = {}
    for gtid, g in nv.groupby("global_tid", sort=True):
        own = str(g["thread_name"].dropna().iloc[0]) if g["thread_name"].notna().any() else ""
        tid = int(g["tid"].iloc[0])
        first = bool((g["tid"] == g["pid"]).all())
        if own not in _GENERIC_THREAD_NAMES and not (first and own in _LAUNCHER_NAMES):
            name = own
        elif first:
            name = "main"
        elif "depth" not in g.columns:
            name = "thread"
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
    included), ``"osrt"`` (OS runtime calls, one colour per call name), ``"api"`` (CUDA API
    calls, one grey) or ``"category"`` (kernel, memcpy, memset)."""

    label: str
    events: pd.DataFrame
    how: str


def colour_key(events: pd.DataFrame, how: str) -> np.ndarray:
    """Per event, the key its colour is looked up by (:func:`colours`)."""
    if how == "api":
        return np.full(len(events), "cuda_api", dtype=object)
    if how in ("name", "osrt"):
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
    names = [k for r in rows if r.how in ("name", "osrt") for k in pd.unique(colour_key(r.events, r.how))]
    out = colour_map(names)
    out.update({k: v for k, v in GPU_COLORS.items()})
    return out


def layout(report, *, window=None, max_depth: int = 2) -> tuple[list[Row], int, int]:
    """The rows of a timeline, top to bottom, and its window (start_ns, end_ns): per thread and
    NVTX domain, one row per nesting level (default domain first); then, per GPU stream, a row of
    the CUDA API calls that launched its work above the row of that work. A report without NVTX
    ranges shows, per thread, the OS runtime calls it was traced in (reads, sleeps, waits):
    :func:`os_calls`. Shared by :func:`plot_timeline` and
    :func:`labkit.show.interactive.interactive_timeline`."""
    nv = report.nvtx
    nv = nv[nv["kind"] != "mark"]
    gpu, api = report.gpu_ops(), report.cuda_api
    osrt = os_calls(report)
    frames = [df for df in (nv, gpu, api, osrt) if len(df)]
    if window is None:
        window = (min(df["start_ns"].min() for df in frames), max(df["end_ns"].max() for df in frames)) if frames \
            else (0, 1)
        w0, w1 = int(window[0]), max(int(window[1]), int(window[0]) + 1)
    else:  # checked as restrict() checks it: a reversed or empty window is a WindowError, not a blank figure
        (w0, w1), = span_of(report, window=window)
    nv, gpu, api, osrt = (df[(df["end_ns"] >= w0) & (df["start_ns"] <= w1)] for df in (nv, gpu, api, osrt))
    rows = []
    labels = thread_labels(nv) if len(nv) else {}
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
    os_labels = thread_labels(osrt) if len(osrt) else {}
    for gtid, g in osrt.groupby("global_tid", sort=True):
        rows.append(Row(f"{os_labels[gtid]} OS calls", g, "osrt"))
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
                            "no NVTX range, GPU operation, CUDA API or OS runtime call; profile with trace "
                            "'cuda,nvtx,osrt' and annotate the program (labkit.annotate), or widen the window")
    return rows, w0, w1


def os_calls(report) -> pd.DataFrame:
    """The OS runtime calls a timeline shows: every traced call of a report without NVTX ranges
    (with each thread's name, ``thread_name``), where the threads have nothing else of their own
    to show; none where ranges were recorded (their threads show those)."""
    nv = report.nvtx
    if len(nv) and (nv["kind"] != "mark").any():
        return report.osrt.iloc[:0]
    o = report.osrt
    threads = report.threads
    if not len(o) or "thread_name" not in threads.columns:
        return o.assign(thread_name=pd.Series(dtype=object))
    names = threads.drop_duplicates("global_tid").set_index("global_tid")["thread_name"]
    return o.assign(thread_name=o["global_tid"].map(names))
