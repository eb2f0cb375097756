"""Blocked time: when a thread waits instead of working, from what the report traced.

A thread is *blocked* while it is in a call whose purpose is to wait, whatever range it is in:

- an OS runtime call that blocks (nsys ``-t osrt``): sleeps, condition and semaphore waits, locks,
  joins, ``poll``/``select``/``epoll``, blocking reads and receives
  (:data:`labkit.stats.calls.BLOCKING_OSRT`);
- a CUDA call that waits for the GPU (:data:`labkit.stats.idle.SYNC_CALLS`), or for a copy the
  driver runs synchronously (a synchronous memcpy/memset, or an async one on pageable memory);
- an NVTX range whose name says it waits (:data:`labkit.stats.calls.WAIT_WORDS`: ``wait``,
  ``queue``...), the program's own word for it;
- a wait nothing else recorded (:func:`untraced_waits`): with context switches (``--cpuctxsw``,
  nsys's default) time off its CPU in no traced call and no range of its own; without them the
  untraced gaps between its ranges that a peer's acts end.

A ``load_batch`` range that sleeps is therefore blocked, not work, as soon as the report traced the
sleep. Blocked time waits either on the outside world (*latency*: a device, a file, a timer) or on a
*peer* (another thread, the GPU): by the call (:data:`labkit.stats.calls.LATENCY_OSRT`), except a
polling loop's naps and the reads that a peer ends (:mod:`labkit.stats.peers`). Everything here is
per thread (``global_tid``), as sorted disjoint interval arrays.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.stats.calls import LATENCY_OSRT, _memo, _wait_ranges, blocking_osrt
from labkit.stats.idle import Intervals, busy_intervals, copy_calls, covered_before, sync_calls, union_of
from labkit.stats.peers import peer_gaps, peer_polls, peer_reads

__all__ = ["blocked_intervals", "blocked_in", "common", "minus", "overlap_ns", "untraced_waits"]


def blocked_intervals(rep, *, waits: bool = True, kind: str = "all") -> dict[int, Intervals]:
    """Per thread (``global_tid``), the merged intervals during which it was blocked: blocking OS
    runtime calls, synchronizing CUDA calls and blocking copies, and (``waits=True``) NVTX ranges
    named as waits. ``kind="latency"``: only the OS calls that wait on the outside world
    (:data:`LATENCY_OSRT`, less the polls and reads a peer ended: :func:`peer_polls`,
    :func:`peer_reads`); ``kind="peer"``:
    everything else (waits on another thread or the GPU, and :func:`untraced_waits`).
    Built once per report (``Report.memo``): stage_table, the accounting, bottleneck and the what-if
    model all read it."""
    return _memo(rep, ("blocked_intervals", waits, kind), lambda: _blocked_intervals(rep, waits=waits, kind=kind))


def minus(a: Intervals, b: Intervals) -> Intervals:
    """The sorted disjoint intervals ``a`` less the sorted disjoint intervals ``b``."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    cuts = np.unique(np.r_[a[0], a[1], b[0], b[1]])
    lo, hi = cuts[:-1], cuts[1:]
    mid = lo + (hi - lo) // 2

    def inside(iv: Intervals) -> np.ndarray:
        i = np.searchsorted(iv[0], mid, side="right") - 1
        return (i >= 0) & (mid < iv[1][np.maximum(i, 0)])

    keep = (hi > lo) & inside(a) & ~inside(b)
    return busy_intervals(lo[keep], hi[keep])


def common(a: Intervals, b: Intervals) -> Intervals:
    """The time the sorted disjoint intervals ``a`` and ``b`` have in common, as sorted disjoint intervals."""
    return minus(a, minus(a, b))


def untraced_waits(rep) -> dict[int, Intervals]:
    """Per thread (``global_tid``), the time it waited in something the trace does not name. Python's
    timed waits (``queue.get(timeout=...)``, ``Event.wait(t)``) block in ``sem_clockwait``, which
    nsys 2022.4's OS runtime trace misses. Such time waits on a peer (a lock, a queue) far more often
    than on a device, whose calls are traced.

    - In a report recorded with context switches (``rep.offcpu``): the time the thread was off its CPU
      in no traced call (OS runtime or CUDA) and no NVTX range of its own. Time off the CPU inside a
      range or a traced call is that range's or call's; nsys 2022.4 records no thread state, so a
      thread preempted between its ranges reads as waiting too.
    - Without context switches: the untraced gaps between an annotated thread's ranges that its peers'
      acts end, far more often than chance (:func:`peer_gaps`).
    """
    off = getattr(rep, "offcpu", None)
    if off is None or len(off) == 0:
        return peer_gaps(rep)
    nv = rep.nvtx
    parts = [f[["global_tid", "start_ns", "end_ns"]] for f in (nv[nv["kind"] != "mark"] if len(nv) else nv,
                                                               rep.cuda_api, rep.osrt) if len(f)]
    traced = dict(tuple(pd.concat(parts, ignore_index=True).groupby("global_tid", sort=False))) if parts else {}
    out = {}
    for g, d in off.groupby("global_tid", sort=False):
        iv = busy_intervals(d["start_ns"].to_numpy(np.int64), d["end_ns"].to_numpy(np.int64))
        t = traced.get(g)
        if t is not None:
            s = t["start_ns"].to_numpy(np.int64)
            iv = minus(iv, busy_intervals(s, np.maximum(t["end_ns"].to_numpy(np.int64), s)))
        if len(iv[0]):
            out[int(g)] = iv
    return out


def _blocked_intervals(rep, *, waits: bool, kind: str) -> dict[int, Intervals]:
    osrt = blocking_osrt(rep)
    if kind != "all" and len(osrt):
        released = _memo(rep, ("peer_polls",), lambda: peer_polls(rep)).append(
            _memo(rep, ("peer_reads",), lambda: peer_reads(rep)))
        outside = osrt["name"].astype(str).str.match(LATENCY_OSRT) & ~osrt.index.isin(released)
        osrt = osrt[outside] if kind == "latency" else osrt[~outside]
    if kind == "latency":
        parts = [osrt]
    else:
        copies = copy_calls(rep)
        copies = copies[copies["blocking"]] if len(copies) else copies
        parts = [osrt, sync_calls(rep), copies] + ([_wait_ranges(rep)] if waits else [])
    parts = [p[["global_tid", "start_ns", "end_ns"]] for p in parts if len(p)]
    out = {}
    if parts:
        allp = pd.concat(parts, ignore_index=True)
        for g, d in allp.groupby("global_tid", sort=False):
            s = d["start_ns"].to_numpy(dtype=np.int64)
            e = np.maximum(d["end_ns"].to_numpy(dtype=np.int64), s)
            out[int(g)] = busy_intervals(s, e)
    if kind != "latency":
        for g, iv in _memo(rep, ("untraced_waits",), lambda: untraced_waits(rep)).items():
            out[g] = union_of(out.get(g), iv)
    return out


def overlap_ns(a: Intervals, b: Intervals) -> int:
    """Time (ns) that the sorted disjoint intervals ``a`` and ``b`` have in common."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return 0
    return int(np.sum(covered_before(a, b[1]) - covered_before(a, b[0])))


def blocked_in(frame: pd.DataFrame, blocked: dict[int, Intervals]) -> np.ndarray:
    """For each row (``global_tid``, ``start_ns``, ``end_ns``) of ``frame``: ns of its own thread's
    blocked time inside it."""
    out = np.zeros(len(frame), dtype=np.int64)
    if len(frame) == 0 or not blocked:
        return out
    g = frame["global_tid"].to_numpy()
    s = frame["start_ns"].to_numpy(dtype=np.int64)
    e = np.maximum(frame["end_ns"].to_numpy(dtype=np.int64), s)
    for tid, iv in blocked.items():
        m = g == tid
        if m.any():
            out[m] = covered_before(iv, e[m]) - covered_before(iv, s[m])
    return out
