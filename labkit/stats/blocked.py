"""Blocked time: when a thread waits instead of working, from what the report traced.

A thread is *blocked* while it is in a call whose purpose is to wait, whatever range it is in:

- an OS runtime call that blocks (nsys ``-t osrt``): sleeps, condition and semaphore waits, locks,
  joins, ``poll``/``select``/``epoll``, blocking reads and receives (:data:`BLOCKING_OSRT`);
- a CUDA call that waits for the GPU (:data:`labkit.stats.idle.SYNC_CALLS`), or for a copy the
  driver runs synchronously (a synchronous memcpy/memset, or an async one on pageable memory);
- an NVTX range whose name says it waits (:data:`WAIT_WORDS`: ``wait``, ``queue``...), the
  program's own word for it;
- where the report has context switches (``--cpuctxsw``, nsys's default), time off its CPU in no
  traced call and no range of its own: a wait nothing else recorded (:func:`untraced_waits`).

A ``load_batch`` range that sleeps is therefore blocked, not work, as soon as the report traced the
sleep. Blocked time waits either on the outside world (*latency*: a device, a file, a timer) or on a
*peer* (another thread, the GPU): by the call (:data:`LATENCY_OSRT`), except a polling loop's naps
and the reads that a peer ends (:func:`peer_polls`, :func:`peer_reads`). Everything here is per thread (``global_tid``), as sorted
disjoint interval arrays.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from labkit.stats.idle import busy_intervals, copy_calls, sync_calls, union_of

__all__ = ["BLOCKING_OSRT", "LATENCY_OSRT", "RELEASING_OSRT", "RUNTIME_THREADS", "WAIT_WORDS", "is_wait",
           "blocking_osrt", "blocked_intervals", "blocked_in", "covered_before", "overlap_ns", "peer_polls",
           "peer_gaps", "peer_reads", "runtime_threads", "untraced_waits", "work_ranges", "Intervals"]

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
another thread or the GPU. A polling loop's sleeps and the reads that a peer ends are peer waits (:func:`peer_polls`,
:func:`peer_reads`)."""

SLEEP_OSRT = re.compile(r"^(nanosleep|clock_nanosleep|usleep|sleep)(_v\d+)?$")
"""The OS runtime calls that nap for a set time: a run of them is a polling loop (:func:`peer_polls`)."""

RELEASING_OSRT = re.compile(
    r"^(write|writev|pwrite(64)?|pwritev2?|fwrite|fputs|fflush|send|sendto|sendmsg|sendmmsg"
    r"|pthread_cond_(signal|broadcast)|sem_post|pthread_mutex_unlock|pthread_rwlock_unlock|kill|tgkill|raise"
    r"|mq_send|msgsnd|eventfd_write)(_v\d+)?$")
"""OS runtime calls that hand something to another thread or process (data, a signal, a permit): the
events that can end a peer's poll (:func:`peer_polls`), besides the end of a work range."""

RUNTIME_THREADS = re.compile(r"^(cuda-EvtHandlr|cuda[0-9a-f]{8,}|CUPTI worker thread|\[NSys[^\]]*\])$")
"""Names of the threads the CUDA driver (its event handler, its workers), CUPTI and nsys start in a
profiled process: they wait for work, whatever they are blocked in; never the program's own."""

POLL_GAP = 0.25
"""Two sleeps of one thread belong to one polling loop when the gap between them, less its waits for
a lock (:data:`LOCK_OSRT`), is at most this share of the shorter nap, and no range of that thread
starts or ends and no other blocking call falls in it: the thread only checks a condition between
naps."""
LOCK_OSRT = re.compile(
    r"^(pthread_cond_(timed|clock)?wait|sem_(timed|clock)?wait|pthread_mutex_(timed|clock)?lock"
    r"|pthread_rwlock_(timed|clock)?(rd|wr)lock|futex)(_v\d+)?$")
"""Waits for a lock or a condition. Between two naps they are the polling thread taking the lock its
check needs (Python's GIL: CPython waits for it in ``pthread_cond_timedwait``), not the end of its
loop: a thread whose loop such waits split would end its loops whenever its peers hold the GIL,
that is, when they act."""
POLL_P = 1e-3
"""A thread's waits end by its peers' acts only where so many did that chance explains it with
probability below this (one-sided binomial test against the chance share, :func:`_ended_by_peers`):
five loops, three of which a peer happened to end, tell nothing."""
POLL_RELEASED = 0.5
"""A thread's polls wait on peers when at least this share of them ends in a nap during which a peer
acted (ended a work range or made a :data:`RELEASING_OSRT` call)..."""
POLL_OVER_CHANCE = 0.3
"""...and that share exceeds by this much the share of instants, spread evenly over the polls' span,
at which a peer acted in the preceding nap's length: peers that act all the time end every nap by
chance, and tell nothing."""
READ_SLACK_NS = 1_000_000
"""A read a peer ended returns within this much of the peer's act (a thread woken on a loaded machine);
a poll's last check may end up to this much after its last nap (it waited for the GIL the peer held)."""
READ_BLOCKED_NS = 50_000
"""A read shorter than this found its data there: nothing ended it."""

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


def _memo(rep, key: tuple, build):
    """``build()``, once per report where the report keeps derived values (``Report.memo``)."""
    memo = getattr(rep, "memo", None)
    return memo(key, build) if memo is not None else build()


def _ranges(rep, waiting: bool) -> pd.DataFrame:
    nv = rep.nvtx
    if len(nv) == 0:
        return nv
    r = nv[nv["kind"] != "mark"]
    return r[r["name"].map(is_wait).astype(bool) == waiting]


def _wait_ranges(rep) -> pd.DataFrame:
    return _memo(rep, ("wait_ranges",), lambda: _ranges(rep, True))


def work_ranges(rep) -> pd.DataFrame:
    """The report's NVTX ranges that are work: not marks, not named as waits (:func:`is_wait`). Built
    once per report; callers filter it, never change it."""
    return _memo(rep, ("work_ranges",), lambda: _ranges(rep, False))


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


def runtime_threads(rep) -> set[int]:
    """Global tids of the report's :data:`RUNTIME_THREADS`."""
    t = rep.threads
    if len(t) == 0 or "thread_name" not in t.columns:
        return set()
    named = t["thread_name"].fillna("").astype(str).str.match(RUNTIME_THREADS)
    return set(t.loc[named, "global_tid"].astype("int64"))


def _peer_events(rep) -> pd.DataFrame:
    """global_tid, t_ns: when each thread that can release a peer ended a work range or made a call
    that hands something over (:data:`RELEASING_OSRT`), sorted by time. Where some thread has work
    ranges, only such threads: a thread without ranges of its own works for others' stages and waits
    for work (the what-if model's helpers), so what it releases is theirs. The runtime's threads never."""
    parts = []
    r = work_ranges(rep)
    if len(r):
        parts.append(pd.DataFrame({"global_tid": r["global_tid"].to_numpy(np.int64), "t_ns": r["end_ns"].to_numpy(np.int64)}))
    o = rep.osrt
    if len(o):
        o = o[o["name"].astype(str).str.match(RELEASING_OSRT)]
        parts.append(pd.DataFrame({"global_tid": o["global_tid"].to_numpy(np.int64), "t_ns": o["end_ns"].to_numpy(np.int64)}))
    ev = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"global_tid": [], "t_ns": []}, dtype=np.int64)
    ev = ev[~ev["global_tid"].isin(runtime_threads(rep))]
    if len(r):
        ev = ev[ev["global_tid"].isin(set(r["global_tid"].astype("int64")))]
    return ev.sort_values("t_ns", kind="stable")


def _acted(times: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether some instant of the sorted ``times`` lies in each [lo, hi]."""
    return np.searchsorted(times, hi, side="right") > np.searchsorted(times, lo, side="left")


def _ended_by_peers(others: np.ndarray, lo: np.ndarray, hi: np.ndarray, span: tuple[int, int]) -> np.ndarray:
    """For one thread's waits, whether a peer's act (``others``, sorted) ended each: one lies in its
    [lo, hi]. All False unless most did (:data:`POLL_RELEASED`) and far more than chance
    (:data:`POLL_OVER_CHANCE`: acts in a window as long, at instants spread evenly over ``span``),
    too many for chance to explain (:data:`POLL_P`)."""
    ended = _acted(others, lo, hi)
    if len(ended) == 0 or ended.mean() < POLL_RELEASED:
        return np.zeros(len(ended), dtype=bool)
    width = int(np.median(hi - lo))
    probes = np.linspace(span[0] + width, max(span[1], span[0] + width), 512).astype(np.int64)
    chance = float(_acted(others, probes - width, probes).mean())
    if ended.mean() - chance < POLL_OVER_CHANCE:
        return np.zeros(len(ended), dtype=bool)
    from scipy.stats import binomtest

    p = binomtest(int(ended.sum()), len(ended), min(max(chance, 1e-6), 1 - 1e-6), alternative="greater").pvalue
    return ended if p < POLL_P else np.zeros(len(ended), dtype=bool)


def _polls(naps: pd.DataFrame, calls: np.ndarray, bounds: np.ndarray, locks: Intervals | None = None) -> np.ndarray:
    """For one thread's sleeps (sorted by start), the id of the polling loop each belongs to (-1: a
    single nap, no loop): consecutive naps with a short gap (:data:`POLL_GAP`; the time in ``locks``,
    its waits for a lock, sorted disjoint intervals, not counted) in which ``bounds`` (its ranges'
    starts and ends, sorted) and ``calls`` (its other blocking calls' starts, sorted) have nothing."""
    s, e = naps["start_ns"].to_numpy(np.int64), naps["end_ns"].to_numpy(np.int64)
    if len(s) < 2:
        return np.full(len(s), -1)
    gap = s[1:] - e[:-1]
    if locks is not None and len(locks[0]):
        gap = gap - (covered_before(locks, s[1:]) - covered_before(locks, e[:-1]))
    nap = np.minimum(e[:-1] - s[:-1], e[1:] - s[1:])
    quiet = (np.searchsorted(bounds, s[1:], side="left") == np.searchsorted(bounds, e[:-1], side="right")) & \
            (np.searchsorted(calls, s[1:], side="left") == np.searchsorted(calls, e[:-1], side="right"))
    linked = (gap >= 0) & (gap <= POLL_GAP * nap) & quiet
    loop = np.r_[0, np.cumsum(~linked)]  # naps of one loop share a number
    size = np.bincount(loop)
    return np.where(size[loop] >= 2, loop, -1)


def peer_polls(rep) -> pd.Index:
    """The OS runtime rows (index of ``rep.osrt``) of sleeps in polling loops that a peer ended.

    A *polling loop* is two or more naps of one thread with next to nothing between them (:func:`_polls`):
    the thread checks a condition between naps, taking the lock it needs (a lock wait between naps
    is no end of the loop, :data:`LOCK_OSRT`). The loop ends when the condition holds; if a peer
    (:func:`_peer_events`) acted between the check before (the end of the loop's last-but-one nap) and
    the end of the check that found it (the thread's next event, at most :data:`READ_SLACK_NS` after
    the last nap), ended a work range or made a :data:`RELEASING_OSRT` call, the peer made
    it hold: the loop waited on that peer. A thread's
    loops count so only where most end that way, far more often than chance (:func:`_ended_by_peers`);
    its loops that no peer ended stay latency.
    """
    o = blocking_osrt(rep)
    if len(o) == 0:
        return pd.Index([])
    naps = o[o["name"].astype(str).str.match(SLEEP_OSRT)]
    if len(naps) < 2:
        return pd.Index([])
    events = _peer_events(rep)
    nv = rep.nvtx
    ranges = nv[nv["kind"] != "mark"] if len(nv) else nv
    out = []
    for g, mine in naps.sort_values("start_ns", kind="stable").groupby("global_tid", sort=False):
        others = events.loc[events["global_tid"] != g, "t_ns"].to_numpy(np.int64)
        if len(others) == 0:
            continue
        r = ranges[ranges["global_tid"] == g] if len(ranges) else ranges
        bounds = np.sort(np.r_[r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)]) if len(r) else \
            np.zeros(0, np.int64)
        other = o[(o["global_tid"] == g) & ~o.index.isin(naps.index)]
        lock = other["name"].astype(str).str.match(LOCK_OSRT)
        calls = np.sort(other.loc[~lock, "start_ns"].to_numpy(np.int64))
        locks = busy_intervals(other.loc[lock, "start_ns"].to_numpy(np.int64), other.loc[lock, "end_ns"].to_numpy(np.int64))
        loop = _polls(mine, calls, bounds, locks)
        if (loop >= 0).sum() == 0:
            continue
        # each loop's last check found the condition: a peer acted after the check before it (from the
        # end of the loop's last-but-one nap) and before that last check ended (the thread's next event,
        # at most READ_SLACK_NS after its last nap: a check waits for the GIL a peer holds as it acts)
        pos = np.flatnonzero(loop >= 0)
        last = pos[np.r_[loop[pos][1:] != loop[pos][:-1], True]]
        e = mine["end_ns"].to_numpy(np.int64)
        after = np.sort(np.r_[bounds, calls, mine["start_ns"].to_numpy(np.int64)])
        i = np.searchsorted(after, e[last], side="right")
        nxt = np.where(i < len(after), after[np.minimum(i, len(after) - 1)], e[last] + READ_SLACK_NS)
        ended = _ended_by_peers(others, e[last - 1], np.minimum(nxt, e[last] + READ_SLACK_NS),
                                (int(mine["start_ns"].min()), int(e.max())))
        kept = set(loop[last][ended])
        out.append(mine.index[np.isin(loop, list(kept))])
    return out[0].append(out[1:]) if out else pd.Index([])


def peer_reads(rep) -> pd.Index:
    """The OS runtime rows (index of ``rep.osrt``) of reads, receives and polls of a descriptor (the
    latency calls that are not sleeps) that a peer ended: each blocked at least :data:`READ_BLOCKED_NS`
    and returned within :data:`READ_SLACK_NS` of a peer's act (:func:`_peer_events`: a write, a send,
    the end of a work range), as a read of a pipe or a socket another thread or process fills does. A
    thread's reads count so only where most end that way, far more often than chance
    (:func:`_ended_by_peers`); the rest (a file, a device, a service that is no traced peer) stay latency.
    """
    o = blocking_osrt(rep)
    if len(o) == 0:
        return pd.Index([])
    names = o["name"].astype(str)
    reads = o[names.str.match(LATENCY_OSRT) & ~names.str.match(SLEEP_OSRT) & (o["duration_ns"] >= READ_BLOCKED_NS)]
    if len(reads) == 0:
        return pd.Index([])
    events = _peer_events(rep)
    out = []
    for g, mine in reads.groupby("global_tid", sort=False):
        others = events.loc[events["global_tid"] != g, "t_ns"].to_numpy(np.int64)
        if len(others) == 0:
            continue
        s, e = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        ended = _ended_by_peers(others, np.maximum(s, e - READ_SLACK_NS), e, (int(s.min()), int(e.max())))
        out.append(mine.index[ended])
    return out[0].append(out[1:]) if out else pd.Index([])


def _minus(a: Intervals, b: Intervals) -> Intervals:
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
            iv = _minus(iv, busy_intervals(s, np.maximum(t["end_ns"].to_numpy(np.int64), s)))
        if len(iv[0]):
            out[int(g)] = iv
    return out


def peer_gaps(rep) -> dict[int, Intervals]:
    """Per annotated thread (``global_tid``), its untraced gaps that a peer ended: waits below the
    trace, for a report without context switches.

    A *gap* is time between a thread's first work range and its last (not its start-up) in which it is in none of its NVTX ranges, CUDA
    calls or blocking OS runtime calls (a lock wait, :data:`LOCK_OSRT`, and calls that do not block
    lie inside it: a wait loop takes the GIL and signals). A gap of at least :data:`READ_BLOCKED_NS`
    that ends within :data:`READ_SLACK_NS` after a peer's act (:func:`_peer_events`: the end of a work
    range, a hand-over call) waited for that act, as ``queue.get(timeout=...)`` in a loop does for
    the producer's put. A thread's gaps count so only where most end that way, far more often than
    chance (:func:`_ended_by_peers`); the gaps of a thread that computes between its ranges end on
    its own clock and stay its own time. The whole gap counts as waiting: untraced work just before
    such a wait reads as waiting too (context switches tell them apart)."""
    r = work_ranges(rep)
    if len(r) == 0:
        return {}
    events = _peer_events(rep)
    if len(events) == 0:
        return {}
    nv = rep.nvtx
    o = blocking_osrt(rep)
    if len(o):
        o = o[~o["name"].astype(str).str.match(LOCK_OSRT)]
    parts = [f[["global_tid", "start_ns", "end_ns"]] for f in (nv[nv["kind"] != "mark"], rep.cuda_api, o) if len(f)]
    traced = pd.concat(parts, ignore_index=True)
    runtime = runtime_threads(rep)
    span = r.groupby("global_tid")[["start_ns", "end_ns"]].agg({"start_ns": "min", "end_ns": "max"})
    out = {}
    for g, d in traced[traced["global_tid"].isin(set(span.index) - runtime)].groupby("global_tid", sort=False):
        s = d["start_ns"].to_numpy(np.int64)
        bs, be = busy_intervals(s, np.maximum(d["end_ns"].to_numpy(np.int64), s))
        gs, ge = be[:-1], bs[1:]
        first, last = int(span.at[g, "start_ns"]), int(span.at[g, "end_ns"])
        keep = (ge - gs >= READ_BLOCKED_NS) & (gs >= first) & (ge <= last)  # between its ranges, not start-up
        gs, ge = gs[keep], ge[keep]
        others = events.loc[events["global_tid"] != g, "t_ns"].to_numpy(np.int64)
        if len(gs) == 0 or len(others) == 0:
            continue
        ended = _ended_by_peers(others, np.maximum(gs, ge - READ_SLACK_NS), ge, (int(bs[0]), int(be[-1])))
        if ended.any():
            out[int(g)] = (gs[ended], ge[ended])
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
