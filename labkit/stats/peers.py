"""Waits a peer ended: a thread's polling loops, reads and untraced gaps that end at another
thread's act (the end of a work range, a call that hands something over), far more often than
chance. Such waits are on that peer, not latency of the thread's own (:mod:`labkit.stats.blocked`
counts them so)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.stats.calls import (LATENCY_OSRT, LOCK_OSRT, RELEASING_OSRT, SLEEP_OSRT, blocking_osrt,
                                runtime_threads, work_ranges)
from labkit.report.reader import pid_of
from labkit.stats.idle import Intervals, busy_intervals, covered_before

__all__ = ["POLL_P", "READ_SLACK_NS", "peer_gaps", "peer_polls", "peer_reads"]

POLL_GAP = 0.25
"""Two sleeps of one thread belong to one polling loop when the gap between them, less its waits for
a lock (:data:`LOCK_OSRT`), is at most this share of the shorter nap, and no range of that thread
starts or ends and no other blocking call falls in it: the thread only checks a condition between
naps."""
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


def _peer_events(rep) -> pd.DataFrame:
    """global_tid, t_ns: when each thread that can release a peer ended a work range or began a call
    that hands something over (:data:`RELEASING_OSRT`), sorted by time. Threads without ranges too: a
    feeder nobody annotated (a DataLoader's worker process, a decode thread) ends its consumer's reads
    with its writes. The runtime's threads never."""
    parts = []
    r = work_ranges(rep)
    if len(r):
        parts.append(pd.DataFrame({"global_tid": r["global_tid"].to_numpy(np.int64), "t_ns": r["end_ns"].to_numpy(np.int64)}))
    o = rep.osrt
    if len(o):
        o = o[o["name"].astype(str).str.match(RELEASING_OSRT)]
        # a call hands over from its start on: a reader may return while the write that filled its pipe
        # is still in its call (descheduled there, a write ended 2.5 ms after the read it ended returned)
        parts.append(pd.DataFrame({"global_tid": o["global_tid"].to_numpy(np.int64), "t_ns": o["start_ns"].to_numpy(np.int64)}))
    ev = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"global_tid": [], "t_ns": []}, dtype=np.int64)
    ev = ev[~ev["global_tid"].isin(runtime_threads(rep))]
    return ev.sort_values("t_ns", kind="stable")


def _acted(times: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether some instant of the sorted ``times`` lies in each [lo, hi]."""
    return np.searchsorted(times, hi, side="right") > np.searchsorted(times, lo, side="left")


def _ended_by_peers(others: np.ndarray, lo: np.ndarray, hi: np.ndarray, span: tuple[int, int],
                    tests: int = 1) -> np.ndarray:
    """For one thread's waits, whether a peer's act (``others``, sorted) ended each: one lies in its
    [lo, hi]. All False unless most did (:data:`POLL_RELEASED`) and far more than chance
    (:data:`POLL_OVER_CHANCE`: acts in windows as long as the waits', at instants spread evenly over
    ``span``),
    too many for chance to explain (:data:`POLL_P`, divided by ``tests``, the tests made of these
    waits)."""
    ended = _acted(others, lo, hi)
    if len(ended) == 0 or ended.mean() < POLL_RELEASED:
        return np.zeros(len(ended), dtype=bool)
    widths = np.sort(hi - lo)
    widths = widths[np.linspace(0, len(widths) - 1, min(len(widths), 64)).astype(int)]
    chance = 0.0
    for width in widths:  # the waits' own lengths: a wider one is ended by chance more often
        width = int(width)
        probes = np.linspace(span[0] + width, max(span[1], span[0] + width), 512).astype(np.int64)
        chance += float(_acted(others, probes - width, probes).mean()) / len(widths)
    if ended.mean() - chance < POLL_OVER_CHANCE:
        return np.zeros(len(ended), dtype=bool)
    from scipy.stats import binomtest

    p = binomtest(int(ended.sum()), len(ended), min(max(chance, 1e-6), 1 - 1e-6), alternative="greater").pvalue
    return ended if p < POLL_P / tests else np.zeros(len(ended), dtype=bool)


def _waited_on(events: pd.DataFrame, mine, lo: np.ndarray, hi: np.ndarray,
               span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """For the waits [lo, hi] of thread ``mine`` (a global tid, or a set of them that wait alike):
    which a peer's act ended (:func:`_ended_by_peers`), tested against all their peers' acts together
    and against each peer's alone (a consumer's waits end at its producer's acts, which the acts of
    busy bystanders would hide), the chance level divided by the number of tests. Returns (ended,
    the acts of the peers waited on, sorted)."""
    peers = events[~events["global_tid"].isin(mine if isinstance(mine, set) else {mine})]
    if len(peers) == 0:
        return np.zeros(len(lo), dtype=bool), np.zeros(0, np.int64)
    groups = [peers["t_ns"].to_numpy(np.int64)]
    if peers["global_tid"].nunique() > 1:
        groups += [d["t_ns"].to_numpy(np.int64) for _, d in peers.groupby("global_tid", sort=False)]
    ended = np.zeros(len(lo), dtype=bool)
    acts = []
    for times in groups:
        e = _ended_by_peers(times, lo, hi, span, tests=len(groups))
        if e.any():
            ended |= e
            acts.append(times)
    return ended, (np.unique(np.concatenate(acts)) if acts else np.zeros(0, np.int64))


def _quiet(lo: np.ndarray, hi: np.ndarray, bounds: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """Whether nothing of a thread's own falls strictly inside each gap (lo, hi): no range starts or
    ends (``bounds``, sorted) and no other call starts (``calls``, sorted)."""
    return ((np.searchsorted(bounds, hi, side="left") == np.searchsorted(bounds, lo, side="right")) &
            (np.searchsorted(calls, hi, side="left") == np.searchsorted(calls, lo, side="right")))


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
    linked = (gap >= 0) & (gap <= POLL_GAP * nap) & _quiet(e[:-1], s[1:], bounds, calls)
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
    the last nap, not counting the check's waits for a lock: the GIL the peer held as it acted), ended
    a work range or made a :data:`RELEASING_OSRT` call, the peer made it hold: the loop waited on that
    peer. A thread's loops count so only where most end that way, far more often than chance
    (:func:`_waited_on`), and then so does a loop that the thread's next loop continues
    (:func:`_continued`: a check descheduled between two naps split them); its loops that no peer
    ended stay latency.

    Both mends are for a loaded machine (busy loops beside the program on two cores): a polling
    consumer's check waited 2.5 ms for the GIL while the producer ended its range, and a check
    descheduled for 0.8 ms cut a loop of 17 ms in two; each time a loop of 10-15 ms had read as the
    consumer's latency, 5-7 % of its own time.
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
        if not (events["global_tid"] != g).any():
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
        cut = loop[pos][1:] != loop[pos][:-1]
        first, last = pos[np.r_[True, cut]], pos[np.r_[cut, True]]
        s, e = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        after = np.sort(np.r_[bounds, calls, s])
        i = np.searchsorted(after, e[last], side="right")
        nxt = np.where(i < len(after), after[np.minimum(i, len(after) - 1)], e[last] + READ_SLACK_NS)
        # the last check's waits for the lock a peer held (the GIL, while it acted) are no slack of its own
        held = covered_before(locks, nxt) - covered_before(locks, e[last])
        ended, _ = _waited_on(events, g, e[last - 1], np.minimum(nxt, e[last] + READ_SLACK_NS + held),
                              (int(s.min()), int(e.max())))
        if ended.any():
            ended = _continued(ended, s[first], e[last], bounds, calls)
        kept = set(loop[last][ended])
        out.append(mine.index[np.isin(loop, list(kept))])
    return out[0].append(out[1:]) if out else pd.Index([])


def _continued(ended: np.ndarray, s: np.ndarray, e: np.ndarray, bounds: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """``ended`` (whether a peer ended each of a thread's polling loops, which start at ``s`` and end
    at ``e``, in order), with each loop that the thread's next one continues marked as that one: the
    next begins at most :data:`READ_SLACK_NS` later with nothing of the thread's own in between (no
    range starts or ends, ``bounds``; no other call, ``calls``): it had not found what it polled for
    and polled on, the gap a check descheduled on a loaded machine, which split one loop in two."""
    out = ended.copy()
    goes_on = _quiet(e[:-1], s[1:], bounds, calls) & (s[1:] - e[:-1] <= READ_SLACK_NS)
    for k in range(len(out) - 2, -1, -1):  # from the last: a chain of splits takes its end's verdict
        out[k] |= goes_on[k] and out[k + 1]
    return out


def peer_reads(rep) -> pd.Index:
    """The OS runtime rows (index of ``rep.osrt``) of reads, receives and polls of a descriptor (the
    latency calls that are not sleeps) that a peer ended: each blocked at least :data:`READ_BLOCKED_NS`
    and returned within :data:`READ_SLACK_NS` of a peer's act (:func:`_peer_events`: a write, a send,
    the end of a work range), as a read of a pipe or a socket another thread or process fills does. A
    thread's reads count so only where most end that way, far more often than chance
    (:func:`_waited_on`), and then so do its reads during which a peer it waits on acted (woken more
    than :data:`READ_SLACK_NS` after the act: no core was free); the rest (a file, a device, a service
    that is no traced peer) stay latency.
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
        s, e = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        ended, acts = _waited_on(events, g, np.maximum(s, e - READ_SLACK_NS), e, (int(s.min()), int(e.max())))
        if ended.any():  # it reads what they hand over: a read during which one acted, woken late, waited too
            ended |= _acted(acts, s + 1, e)
        out.append(mine.index[ended])
    return out[0].append(out[1:]) if out else pd.Index([])


def _gaps(traced: pd.DataFrame, locks: pd.DataFrame, first: int, last: int):
    """One thread's untraced gaps that end from ``first`` to ``last`` (its first work range's start,
    its last's end: the wait for its first work, not its start-up), at least :data:`READ_BLOCKED_NS`
    long, outside its ``traced`` intervals: (start, end, wake), where a gap ending in a wait for a
    lock (``locks``: the GIL a peer holds) woke where that wait began."""
    s = traced["start_ns"].to_numpy(np.int64)
    bs, be = busy_intervals(s, np.maximum(traced["end_ns"].to_numpy(np.int64), s))
    gs, ge = be[:-1], bs[1:]
    keep = (ge - gs >= READ_BLOCKED_NS) & (ge >= first) & (ge <= last)
    gs, ge = gs[keep], ge[keep]
    woke = ge.copy()
    if len(locks) and len(gs):
        ls, le = busy_intervals(locks["start_ns"].to_numpy(np.int64), locks["end_ns"].to_numpy(np.int64))
        i = np.searchsorted(le, ge, side="right") - 1  # the gap's last lock wait, if it ends in the gap
        j = np.maximum(i, 0)
        late = (i >= 0) & (ls[j] >= gs) & (le[j] >= ge - READ_SLACK_NS)
        woke = np.where(late, ls[j], ge)
    return gs, ge, woke


def peer_gaps(rep) -> dict[int, Intervals]:
    """Per annotated thread (``global_tid``), its untraced gaps that a peer ended: waits below the
    trace, for a report without context switches.

    A *gap* is time up to a thread's first work range (from its first event, or its last traced one
    before that range: not its start-up) or between its work ranges in which it is in none of its
    NVTX ranges, CUDA calls or blocking OS runtime calls (a lock wait, :data:`LOCK_OSRT`, and calls
    that do not block lie inside it: a wait loop takes the GIL and signals), at least
    :data:`READ_BLOCKED_NS` long. A gap that ends within :data:`READ_SLACK_NS`
    after a peer's act (:func:`_peer_events`: the end of a work range, a hand-over call) waited for
    that act, as ``queue.get(timeout=...)`` in a loop does for the producer's put; a woken thread
    that then waits for a lock (the GIL) woke where that wait began.

    Gaps count so only where most end that way, far more often than chance (:func:`_waited_on`: by
    all the peers or by one); the threads of one process that run the same stages (a pool's
    workers) are tested together, as they wait alike. The gaps of a thread that computes between its ranges end on its
    own clock and stay its own time. The whole gap counts as waiting: untraced work just before such
    a wait reads as waiting too (context switches tell them apart). Threads that wait so also waited
    in their gaps that ended later than :data:`READ_SLACK_NS` after an act of a peer they wait on (no
    core was free, a peer held the GIL: waits, not work); their gaps in which no such peer acted stay
    their own time."""
    r = work_ranges(rep)
    if len(r) == 0:
        return {}
    events = _peer_events(rep)
    if len(events) == 0:
        return {}
    nv = rep.nvtx
    o = blocking_osrt(rep)
    lock = o["name"].astype(str).str.match(LOCK_OSRT) if len(o) else pd.Series(dtype=bool)
    locks = o[lock] if len(o) else o
    parts = [f[["global_tid", "start_ns", "end_ns"]] for f in (nv[nv["kind"] != "mark"], rep.cuda_api,
                                                               o[~lock] if len(o) else o) if len(f)]
    # each thread's first event of any kind (a mark, a call that does not block) starts its first gap
    firsts = pd.concat([f[["global_tid", "start_ns"]] for f in (nv, rep.cuda_api, rep.osrt) if len(f)])
    firsts = firsts.groupby("global_tid", as_index=False)["start_ns"].min()
    traced = pd.concat(parts + [firsts.assign(end_ns=firsts["start_ns"])], ignore_index=True)
    r = r[~r["global_tid"].isin(runtime_threads(rep))]
    gaps = {}
    for g, d in traced[traced["global_tid"].isin(set(r["global_tid"]))].groupby("global_tid", sort=False):
        mine = r[r["global_tid"] == g]
        gaps[int(g)] = _gaps(d, locks[locks["global_tid"] == g] if len(locks) else locks,
                             int(mine["start_ns"].min()), int(mine["end_ns"].max()))
    stages = r.groupby("global_tid")["name"].agg(lambda n: tuple(sorted(set(map(str, n)))))
    process = pd.Series(pid_of(stages.index.to_numpy(np.int64)), index=stages.index)
    out = {}
    for _, pool in stages.groupby([process, stages], sort=False):
        tids = [int(g) for g in pool.index if int(g) in gaps and len(gaps[int(g)][0])]
        if not tids:
            continue
        gs, ge, woke = (np.concatenate([gaps[g][k] for g in tids]) for k in range(3))
        ended, acts = _waited_on(events, set(tids), np.maximum(gs, woke - READ_SLACK_NS), ge,
                                 (int(gs.min()), int(ge.max())))
        if not ended.any():
            continue
        # threads that wait so: a gap in which a peer they wait on acted waited for it, and woke late
        # (more than READ_SLACK_NS after it: no core was free, a peer held the GIL)
        waited = ended | _acted(acts, gs + 1, ge)
        at = np.cumsum([0] + [len(gaps[g][0]) for g in tids])
        for k, g in enumerate(tids):
            w = waited[at[k]:at[k + 1]]
            if w.any():
                out[g] = (gs[at[k]:at[k + 1]][w], ge[at[k]:at[k + 1]][w])
    return out
