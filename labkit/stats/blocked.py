"""Blocked time: when a thread waits instead of working, from what the report traced.

A thread is *blocked* while it is in a call whose purpose is to wait, whatever range it is in:

- an OS runtime call that blocks (nsys ``-t osrt``): sleeps, condition and semaphore waits, locks,
  joins, ``poll``/``select``/``epoll``, blocking reads and receives (:data:`BLOCKING_OSRT`);
- a CUDA call that waits for the GPU (:data:`labkit.stats.idle.SYNC_CALLS`), or for a copy the
  driver runs synchronously (a synchronous memcpy/memset, or an async one on pageable memory);
- an NVTX range whose name says it waits (:data:`WAIT_WORDS`: ``wait``, ``queue``...), the
  program's own word for it.

A ``load_batch`` range that sleeps is therefore blocked, not work, as soon as the report traced the
sleep. Everything here is per thread (``global_tid``), as sorted disjoint interval arrays.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from labkit.stats.idle import busy_intervals, copy_calls, sync_calls

__all__ = ["BLOCKING_OSRT", "LATENCY_OSRT", "WAIT_WORDS", "is_wait", "blocking_osrt", "blocked_intervals",
           "blocked_in", "covered_before", "overlap_ns", "Intervals"]

BLOCKING_OSRT = re.compile(
    r"^(nanosleep|clock_nanosleep|usleep|sleep|pause|sigsuspend|sigwait\w*|sigtimedwait"
    r"|pthread_cond_(timed|clock)?wait|sem_(timed|clock)?wait|pthread_mutex_(timed|clock)?lock"
    r"|pthread_rwlock_(timed|clock)?(rd|wr)lock|pthread_join|pthread_barrier_wait|futex"
    r"|poll|ppoll|select|pselect6?|epoll_p?wait2?"
    r"|read|pread(64)?|readv|preadv2?|fread|fgets|getline|recv|recvfrom|recvmsg|recvmmsg|accept4?|msgrcv"
    r"|wait|waitpid|wait3|wait4|waitid|flock|lockf|fsync|fdatasync)(_v\d+)?$")
"""OS runtime calls (as nsys names them) that wait: time in them is blocked, not work."""

LATENCY_OSRT = re.compile(
    r"^(nanosleep|clock_nanosleep|usleep|sleep|poll|ppoll|select|pselect6?|epoll_p?wait2?"
    r"|read|pread(64)?|readv|preadv2?|fread|fgets|getline|recv|recvfrom|recvmsg|recvmmsg|accept4?|msgrcv"
    r"|fsync|fdatasync)(_v\d+)?$")
"""The blocking calls that wait on the outside world (a device, a file, the network, a timer): their
time is *latency*, which stays on the thread unless the lever overlaps it. Every other blocked
time (locks, condition variables, joins, CUDA syncs, blocking copies, wait ranges) waits on a peer:
another thread or the GPU."""

WAIT_WORDS = ("wait", "await", "idle", "queue", "sleep", "sync", "blocked", "blocking")
"""NVTX range names with one of these words count as waiting, not as work. Words, not substrings: the
name is split at anything but letters and at case changes (``queue_wait``, ``QueueWait``,
``main->test->wait``), and a word counts when it is one of these or starts with ``wait``, ``idle``,
``sleep`` or ``synchron`` (``waiting``, ``synchronize``). ``async_infer``, ``resblock``,
``transformer_block`` or TensorRT's ``/blocks.0/Conv`` layers are work."""
_STEMS = ("wait", "idle", "sleep", "synchron")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")

Intervals = tuple[np.ndarray, np.ndarray]


def is_wait(name) -> bool:
    """Whether an NVTX range name says it waits (:data:`WAIT_WORDS`)."""
    words = [w.lower() for w in _WORD.findall(str(name))]
    return any(w in WAIT_WORDS or w.startswith(_STEMS) for w in words)


def blocking_osrt(rep) -> pd.DataFrame:
    """The OS runtime calls of ``rep`` that block (:data:`BLOCKING_OSRT`), as the ``osrt`` frame."""
    o = rep.osrt
    if len(o) == 0:
        return o
    names = o["name"].astype(str)
    return o[names.str.match(BLOCKING_OSRT)]


def _wait_ranges(rep) -> pd.DataFrame:
    nv = rep.nvtx
    if len(nv) == 0:
        return nv
    r = nv[nv["kind"] != "mark"]
    return r[r["name"].map(is_wait).astype(bool)]


def blocked_intervals(rep, *, waits: bool = True, kind: str = "all") -> dict[int, Intervals]:
    """Per thread (``global_tid``), the merged intervals during which it was blocked: blocking OS
    runtime calls, synchronizing CUDA calls and blocking copies, and (``waits=True``) NVTX ranges
    named as waits. ``kind="latency"``: only the OS calls that wait on the outside world
    (:data:`LATENCY_OSRT`); ``kind="peer"``: everything else (waits on another thread or the GPU).
    Built once per report (``Report.memo``): stage_table, the accounting, bottleneck and the what-if
    model all read it."""
    memo = getattr(rep, "memo", None)
    if memo is not None:
        return memo(("blocked_intervals", waits, kind), lambda: _blocked_intervals(rep, waits=waits, kind=kind))
    return _blocked_intervals(rep, waits=waits, kind=kind)


def _blocked_intervals(rep, *, waits: bool, kind: str) -> dict[int, Intervals]:
    osrt = blocking_osrt(rep)
    if kind != "all" and len(osrt):
        outside = osrt["name"].astype(str).str.match(LATENCY_OSRT)
        osrt = osrt[outside] if kind == "latency" else osrt[~outside]
    if kind == "latency":
        parts = [osrt]
    else:
        copies = copy_calls(rep)
        copies = copies[copies["blocking"]] if len(copies) else copies
        parts = [osrt, sync_calls(rep), copies] + ([_wait_ranges(rep)] if waits else [])
    parts = [p[["global_tid", "start_ns", "end_ns"]] for p in parts if len(p)]
    if not parts:
        return {}
    allp = pd.concat(parts, ignore_index=True)
    out = {}
    for g, d in allp.groupby("global_tid", sort=False):
        s = d["start_ns"].to_numpy(dtype=np.int64)
        e = np.maximum(d["end_ns"].to_numpy(dtype=np.int64), s)
        out[int(g)] = busy_intervals(s, e)
    return out


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
