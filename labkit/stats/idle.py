"""GPU busy and idle time of a :class:`labkit.report.Report`, for any program.

Two engines are kept apart: the SMs (kernels and whole CUDA graphs) and the copy engines
(memcpy and memset). "GPU busy" means the SMs: copy-engine time alone does not make the GPU the
bottleneck. For every stretch with no kernel running (an SM idle gap), :func:`gpu_idle_breakdown`
says what the host did meanwhile, as HTA's idle-time breakdown does: it was in a synchronizing CUDA
call, in a copy, in another CUDA call (launches), or nothing was traced (a host-side stall:
compilation, Python, I/O).

Everything is vectorized over sorted interval arrays; re-exported by :mod:`labkit.stats.stages`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.report.window import restrict, windowed

__all__ = ["Intervals", "busy_intervals", "covered_before", "depth", "union_of", "gpu_utilization", "gpu_idle_gaps", "gpu_idle_breakdown", "SYNC_CALLS", "SM_KINDS",
           "COPY_KINDS", "sync_calls", "copy_calls", "launch_calls"]

SM_KINDS = ("kernel", "graph")
COPY_KINDS = ("memcpy", "memset")
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cudaThreadSynchronize")
"""CUDA API calls whose purpose is to wait for the GPU (``nsys analyze``'s cuda_api_sync rule)."""


def _base(name: pd.Series) -> pd.Series:
    """API names without version suffixes (``cudaMemcpy_v3020`` -> ``cudaMemcpy``)."""
    return name.astype(str).str.replace(r"_v\d+$", "", regex=True).str.replace(r"_ptsz?$", "", regex=True)


def sync_calls(rep) -> pd.DataFrame:
    """CUDA API calls that wait for the GPU (:data:`SYNC_CALLS`)."""
    api = rep.cuda_api
    return api[_base(api["name"]).isin(SYNC_CALLS)] if len(api) else api


def launch_calls(rep) -> pd.DataFrame:
    """CUDA API calls that launch work on the GPU (kernels, graphs, cooperative launches: a name with
    ``Launch`` in it)."""
    api = rep.cuda_api
    return api[api["name"].astype(str).str.contains("Launch", regex=False)] if len(api) else api


def copy_calls(rep) -> pd.DataFrame:
    """CUDA API calls that copy or set memory (memcpy/memset, async or not), with ``blocking``: True
    for synchronous ones (no ``Async`` in the name) and for async copies from or to pageable host
    memory, which the driver runs synchronously (``nsys analyze``'s cuda_memcpy_sync and
    cuda_memcpy_async rules)."""
    api = rep.cuda_api
    if len(api) == 0:
        return api.assign(blocking=pd.Series(dtype=bool), pageable=pd.Series(dtype=bool))
    base = _base(api["name"])
    c = api[base.str.contains(r"^cu(?:da)?Mem(?:cpy|set)", regex=True)]
    m = rep.memcpy
    pg = np.zeros(len(c), dtype=bool)
    if len(m) and len(c):
        keys = m.loc[m["pageable"], ["pid", "correlation_id"]].assign(_pg=True).drop_duplicates(["pid", "correlation_id"])
        pg = c[["pid", "correlation_id"]].merge(keys, how="left", on=["pid", "correlation_id"])["_pg"]
        pg = pg.fillna(False).to_numpy(dtype=bool)
    sync = ~c["name"].astype(str).str.contains("Async", regex=False).to_numpy()
    return c.assign(blocking=sync | pg, pageable=pg)


# ----------------------------------------------------------------------------- intervals
Intervals = tuple[np.ndarray, np.ndarray]
"""Sorted disjoint intervals as (starts, ends) arrays of ns, as :func:`busy_intervals` returns them."""


def busy_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end) arrays (vectorized merge)."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if len(starts) == 0:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return s[first], run_end[last]


def union_of(a, b):
    """The union of two (starts, ends) interval sets, either of them None or empty; None when both are."""
    parts = [x for x in (a, b) if x is not None and len(x[0])]
    if not parts:
        return None
    return busy_intervals(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def covered_before(iv: Intervals, t: np.ndarray) -> np.ndarray:
    """Time covered by the sorted disjoint intervals ``iv`` before each instant of ``t``."""
    s, e = iv
    if len(s) == 0:
        return np.zeros(len(t), dtype=np.int64)
    cum = np.r_[0, np.cumsum(e - s)]
    i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
    before = cum[i]
    last = np.maximum(i - 1, 0)
    inside = (i > 0) & (t < e[last])
    return before - np.where(inside, e[last] - t, 0)


def depth(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The time line of the intervals ``s``-``e`` (any order, overlapping) cut wherever one starts or
    ends: (each piece's length in ns, how many intervals cover it). At one instant an end comes
    before a start."""
    t = np.concatenate([s, e])
    step = np.concatenate([np.ones(len(s), dtype=np.int64), -np.ones(len(e), dtype=np.int64)])
    order = np.lexsort((step, t))
    t, running = t[order], np.cumsum(step[order])[:-1]
    return np.diff(t), running


def busy_before(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time in [-inf, t) of disjoint sorted intervals, for each t (vectorized)."""
    t = np.asarray(t, dtype=np.int64)
    if len(ms) == 0:
        return np.zeros(len(t), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(me - ms)])
    k = np.searchsorted(ms, t, side="right")  # intervals started before t
    partial = np.where(k > 0, np.minimum(t, me[np.maximum(k - 1, 0)]) - ms[np.maximum(k - 1, 0)], 0)
    return cum[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(partial, 0)


def busy_in(ms, me, w0, w1) -> int:
    """Busy time of disjoint sorted intervals inside [w0, w1)."""
    b = busy_before(ms, me, np.array([w0, w1], dtype=np.int64))
    return int(b[1] - b[0])


def engine_ops(rep, engine: str = "sm", device_id: int | None = None) -> pd.DataFrame:
    """GPU operations of one engine: ``"sm"`` (kernels, graphs), ``"copy"`` (memcpy, memset) or ``"all"``."""
    ops = rep.gpu_ops()
    if len(ops) == 0:
        return ops
    kinds = {"sm": SM_KINDS, "copy": COPY_KINDS, "all": SM_KINDS + COPY_KINDS}[engine]
    ops = ops[ops["category"].isin(kinds)]
    return ops[ops["device_id"] == device_id] if device_id is not None else ops


def engine_busy(rep, engine: str = "sm", device_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted busy intervals of one engine (see :func:`engine_ops`)."""
    ops = engine_ops(rep, engine, device_id)
    if len(ops) == 0:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    return busy_intervals(ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy())


# ----------------------------------------------------------------------------- utilization
def _covered(rep, window, within):
    """The report restricted to ``within`` (an NVTX range) and the span to cover: ``window`` as given,
    else the range's first start to its last end (None: the functions' own default span)."""
    if within is None:
        return rep, window
    cut = restrict(rep, within=within)
    span = cut.meta["window"]  # the range's instances, merged
    return cut, (window or (span[0][0], span[-1][1]))


def gpu_utilization(rep, *, bin_ms: float = 10.0, device_id: int | None = None, window=None,
                    within=None) -> pd.DataFrame:
    """Fraction of each time bin the SMs ran a kernel, and, apart, the copy engines a copy.

    Args:
        bin_ms: bin width in ms.
        device_id: one GPU only (default: all together).
        window: (start_ns, end_ns) to cover (default: the trace span of NVTX and GPU work).
        within: an NVTX range name: GPU work launched inside its instances, over its span.
    Returns: start_ns, end_ns, busy_ns, idle_ns, busy_frac (SM: kernels and graphs),
        copy_busy_ns, copy_busy_frac (copy engines: memcpy and memset) per bin.
    """
    cols = ["start_ns", "end_ns", "busy_ns", "idle_ns", "busy_frac", "copy_busy_ns", "copy_busy_frac"]
    rep, window = _covered(rep, window, within)
    ms, me = engine_busy(rep, "sm", device_id)
    cs, ce = engine_busy(rep, "copy", device_id)
    if window is None:
        nv = rep.nvtx
        starts = [v.min() for v in (ms, cs) if len(v)] + ([nv["start_ns"].min()] if len(nv) else [])
        ends = [v.max() for v in (me, ce) if len(v)] + ([nv["end_ns"].max()] if len(nv) else [])
        if not starts:
            return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
        window = (int(min(starts)), int(max(ends)))
    w0, w1 = int(window[0]), int(window[1])
    step = max(int(bin_ms * 1e6), 1)
    edges = np.arange(w0, w1 + step, step, dtype=np.int64)
    if len(edges) < 2:
        edges = np.array([w0, w0 + step], dtype=np.int64)
    width = np.diff(edges)
    busy = np.diff(busy_before(ms, me, edges))
    copy = np.diff(busy_before(cs, ce, edges))
    return pd.DataFrame({"start_ns": edges[:-1], "end_ns": edges[1:], "busy_ns": busy.astype(np.int64),
                         "idle_ns": (width - busy).astype(np.int64), "busy_frac": busy / width,
                         "copy_busy_ns": copy.astype(np.int64), "copy_busy_frac": copy / width})


@windowed
def gpu_idle_gaps(rep, *, min_gap_ms: float = 1.0, device_id: int | None = None, engine: str = "all") -> pd.DataFrame:
    """Gaps between GPU operations (all streams together) of at least ``min_gap_ms``.

    Args:
        engine: ``"all"`` (no operation of any kind running), ``"sm"`` (no kernel running).
    Returns: start_ns, end_ns, duration_ns, before (name of the op that ended the busy stretch),
    after (the op that started the next), sorted by duration, longest first.
    """
    ops = engine_ops(rep, engine, device_id)
    cols = ["start_ns", "end_ns", "duration_ns", "before", "after"]
    ms, me = busy_intervals(ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()) if len(ops) else ([], [])
    if len(ms) < 2:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("before", "after") else "int64") for c in cols})
    gs, ge = me[:-1], ms[1:]
    keep = (ge - gs) >= min_gap_ms * 1e6
    gs, ge = gs[keep], ge[keep]
    s = ops["start_ns"].to_numpy()
    e_order = np.argsort(ops["end_ns"].to_numpy(), kind="stable")
    e_sorted = ops["end_ns"].to_numpy()[e_order]
    names = ops["name"].to_numpy()
    before = names[e_order[np.clip(np.searchsorted(e_sorted, gs, side="right") - 1, 0, len(ops) - 1)]]
    after = names[np.clip(np.searchsorted(s, ge, side="left"), 0, len(ops) - 1)]
    out = pd.DataFrame({"start_ns": gs, "end_ns": ge, "duration_ns": ge - gs, "before": before, "after": after})
    return out.sort_values("duration_ns", ascending=False, ignore_index=True)


def gpu_idle_breakdown(rep, *, min_gap_ms: float = 0.0, device_id: int | None = None, window=None,
                       within=None, ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """What the host did while no kernel ran, gap by gap (HTA's idle-time breakdown, by CUDA API).

    A gap is a stretch between kernels (or graphs) of at least ``min_gap_ms``, inside ``window``
    (default: first to last GPU operation; ``within``: an NVTX range's span, its work only). Its time is split, in this order of precedence, into:
    ``copy_ns`` (a copy ran on the GPU or a thread was in a memcpy/memset call), ``sync_ns`` (a
    thread was in a synchronizing call, :data:`SYNC_CALLS`), ``cuda_ns`` (in another CUDA call:
    launches, allocations), ``ranges_ns`` (in none of those, but inside one of ``ranges``, a frame of
    host ranges with start_ns and end_ns, such as the stages' NVTX ranges: annotated host work; 0
    where ``ranges`` is not given) and ``untraced_ns`` (nothing traced: a host-side stall such as
    compilation, Python or I/O). The five add up to ``duration_ns``.

    Returns: start_ns, end_ns, duration_ns, copy_ns, sync_ns, cuda_ns, ranges_ns, untraced_ns, cause (the
    largest part's name), longest gap first. ``attrs["totals_ms"]``: each part over all gaps;
    ``attrs["sm_busy_ms"]``, ``attrs["window"]``.
    """
    cols = ["start_ns", "end_ns", "duration_ns", "copy_ns", "sync_ns", "cuda_ns", "ranges_ns", "untraced_ns", "cause"]
    rep, window = _covered(rep, window, within)
    ms, me = engine_busy(rep, "sm", device_id)
    ops = engine_ops(rep, "all", device_id)
    out = pd.DataFrame({c: pd.Series(dtype=object if c == "cause" else "int64") for c in cols})
    if window is None:
        window = (int(ops["start_ns"].min()), int(ops["end_ns"].max())) if len(ops) else (0, 0)
    w0, w1 = int(window[0]), int(window[1])
    out.attrs.update(window=(w0, w1), sm_busy_ms=busy_in(ms, me, w0, w1) / 1e6 if len(ms) else 0.0,
                     totals_ms={k: 0.0 for k in ("copy", "sync", "cuda", "ranges", "untraced")})
    if w1 <= w0:
        return out
    # gaps: the complement of the SM busy intervals inside the window
    inner = (me > w0) & (ms < w1)
    bs, be = np.clip(ms[inner], w0, w1), np.clip(me[inner], w0, w1)
    gs = np.concatenate([[w0], be])
    ge = np.concatenate([bs, [w1]])
    keep = (ge - gs) > max(min_gap_ms * 1e6, 0)
    gs, ge = gs[keep], ge[keep]
    api = rep.cuda_api
    if device_id is not None and len(ops):
        api = api[api["pid"].isin(ops["pid"].unique())]
    cc = copy_calls(rep)
    sc = sync_calls(rep)
    cops = engine_ops(rep, "copy", device_id)
    layers = [  # cumulative unions: copy, copy+sync, copy+sync+any CUDA call
        (np.concatenate([cops["start_ns"], cc["start_ns"]]), np.concatenate([cops["end_ns"], cc["end_ns"]])),
    ]
    layers.append((np.concatenate([layers[0][0], sc["start_ns"]]), np.concatenate([layers[0][1], sc["end_ns"]])))
    layers.append((np.concatenate([layers[1][0], api["start_ns"]]), np.concatenate([layers[1][1], api["end_ns"]])))
    hr = ranges if ranges is not None and len(ranges) else pd.DataFrame({"start_ns": [], "end_ns": []})
    layers.append((np.concatenate([layers[2][0], hr["start_ns"]]), np.concatenate([layers[2][1], hr["end_ns"]])))
    cover = []
    for s, e in layers:
        us, ue = busy_intervals(np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64))
        cover.append(busy_before(us, ue, ge) - busy_before(us, ue, gs))
    dur = ge - gs
    parts = {"copy_ns": cover[0], "sync_ns": cover[1] - cover[0], "cuda_ns": cover[2] - cover[1],
             "ranges_ns": cover[3] - cover[2], "untraced_ns": dur - cover[3]}
    res = pd.DataFrame({"start_ns": gs, "end_ns": ge, "duration_ns": dur, **parts})
    names = np.array(["copy", "sync", "cuda", "ranges", "untraced"])
    res["cause"] = names[np.argmax(np.stack([parts[f"{n}_ns"] for n in names]), axis=0)] if len(res) else []
    res = res.sort_values("duration_ns", ascending=False, ignore_index=True)[cols]
    res.attrs.update(out.attrs)
    res.attrs["totals_ms"] = {str(n): float(parts[f"{n}_ns"].sum()) / 1e6 for n in names}
    return res
