"""The what-if model behind advise's stage findings: each thread's *own* time, each stage's own time
on its thread, and the run's length after a change.

A thread's own time in the window is its extent less the time it waited on a peer (another thread,
through a lock, a condition, a queue or a wait range; or the GPU, through a sync or a blocking copy):
what it would take with every peer infinitely fast. It holds its work, its CUDA calls, its untraced
time and its *latency*: time blocked on the outside world (sleeps, reads, polls: the calls of
:data:`labkit.stats.calls.LATENCY_OSRT`), which stays on the thread unless a lever overlaps it.
A stage's own time is the same over its ranges' self time (nested ranges apart). Without an OS
runtime trace, waits outside ranges are invisible, so an annotated thread owns only the time of its
ranges then. A thread without ranges of its own, where others have them, waits for work in its
reads, polls and sleeps (a pool's result handler on its pipe): peer waits; so do the threads the CUDA
driver, CUPTI and nsys start (:func:`~labkit.stats.calls.runtime_threads`) in every report.

In a steady, pipelined run the slowest resource sets the pace, so the model's run length is the largest
own time of any thread, no shorter than the SMs' or the copy engines' busy time. :meth:`WhatIf.speedup`
compares that length before and after a change (time removed from threads, stages moved to new threads);
with no change it is exactly 1. The model's assumptions, said with every finding: every other thread and
engine keeps its measured time; the threads' CPU time shares the profiled run's cores (``CpuCores`` in
the report, or the fewer its program could use), so a change off the limiting thread still pays where the
cores were full; a thread without ranges of its own in a stage's process (a library's worker pool) works
for the stages whose ranges it overlaps, and its time there changes with theirs (one in another process,
a data loader's worker, works on its own: counted as the work of the main process's ranges it
overlaps, a loader preparing items 20 ms each read as 'forward''s work, and a free 'forward' as 2.56x
where the loader then limits at 1.25x); threads that run the same stages (a pool taking
items from one queue) share their work evenly after a change. Both lengths are also no shorter than the
critical path's (:mod:`labkit.judge.critical`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.judge.accounting import thread_names
from labkit.judge.critical import CriticalPath
from labkit.report.cpu import osrt_calls
from labkit.report.reader import pid_of
from labkit.stats.blocked import blocked_in, blocked_intervals, common, minus
from labkit.stats.calls import is_wait, osrt_traced, runtime_threads, work_ranges
from labkit.stats.idle import busy_intervals, union_of
from labkit.stats.stages import stage_labels

__all__ = ["WhatIf", "IN_FLIGHT"]

POOL_AT_ONCE = 1.1
"""Threads that run the same stages share their work as a pool only where they run their main stage
(the one with the most own time) at once: its ranges, summed over the threads, are at least this many
times as long as their union. Threads that take a lock in turn for it run it one at a time (1.0,
their ranges never overlap in the trace): no pool, their turns are the run."""
POOL_EVEN = 2.0
"""A pool's threads do the same work per item: their mean own time per instance of the main stage is
within this factor of each other. Threads that pass each item on under one range name (a producer's
'work' of 8 ms feeding a consumer's 'work' of 30 ms) differ by more (3.6x): no pool, a cheaper consumer
leaves the producer its time."""
IN_FLIGHT = 8
"""Requests a thread can keep in flight once its latency is overlapped (parallel reads, prefetch
threads): the parallel-input lever's assumption."""


def _through_helpers(peer: dict, lat: dict, annotated: set, runtime, tids) -> tuple[dict, dict]:
    """(peer, latency) intervals per thread, where an annotated thread blocked on peers while a thread
    of its process without ranges (a helper: a futures pool's worker making a remote call) waits on the
    outside world waits on the outside world too: that time moves from its peer waits to its latency.
    The helper's own reads and sleeps are read as waits for work (see the module), so the remote
    call's latency would otherwise be nobody's time."""
    helpers = [int(g) for g in tids if int(g) not in annotated and int(g) not in runtime and lat.get(int(g)) is not None]
    if not helpers:
        return peer, lat
    lat = dict(lat)
    for a in annotated:
        if peer.get(a) is None or not len(peer[a][0]):
            continue
        far = None
        for h in helpers:
            if pid_of(h) == pid_of(a):
                far = union_of(far, common(peer[a], lat[h]))
        if far is not None and len(far[0]):
            peer[a] = minus(peer[a], far)
            lat[a] = union_of(lat.get(a), far)
    return peer, lat


def _stage_above(parent: pd.Series, keep: pd.Series) -> pd.Series:
    """For each range (``parent``: its parent's index, -1 for none; ``keep``: whether it is a stage
    range), the index of the nearest stage range it is nested in, or -1 (none in the window)."""
    is_stage = keep.to_dict()
    up = parent.astype("int64").copy()
    for _ in range(64):  # nesting deeper than this is not a program's stages
        above = up.map(is_stage)  # NaN: no parent in the window
        climb = above.eq(False)
        if not climb.any():
            break
        up[climb] = up[climb].map(parent).fillna(-1).astype("int64")
    return up.where(up.map(is_stage).eq(True), -1)


class WhatIf(CriticalPath):
    """Own time per thread and per (thread, stage) in ``window``; see the module docstring.

    Attributes:
        threads: tid, thread, own_ms, latency_ms, wait_ms (one row per thread with traced events).
        stages: tid, thread, stage, own_ms, latency_ms (self time of the stage's ranges on that thread).
        floor_ms: the SMs' and the copy engines' busy time, the least any change leaves.
        helpers: threads with traced events but no work ranges of their own, such as a library's worker
            pool (OpenMP, ONNX Runtime's intra-op threads): their time inside the ranges of a stage of their
            own process is counted as that stage's work, so it shrinks when the stage does (:meth:`helped`).
    """

    def __init__(self, rep, window: tuple[int, int], stages, *, sm_ms: float = 0.0, copy_ms: float = 0.0):
        w0, w1 = window
        self.floor_ms = max(sm_ms, copy_ms)
        peer = blocked_intervals(rep, kind="peer")
        lat = blocked_intervals(rep, kind="latency")
        frames = [f[["global_tid", "start_ns", "end_ns"]] for f in (rep.nvtx, rep.cuda_api, osrt_calls(rep.osrt))
                  if len(f)]
        ev = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["global_tid", "start_ns",
                                                                                    "end_ns"])
        ev = ev[(ev["end_ns"] > w0) & (ev["start_ns"] < w1)]
        names = thread_names(rep)
        # Without an OS runtime trace, a thread's time outside its ranges may be a wait nothing
        # recorded (a queue get): an annotated thread then owns only its ranges' time.
        osrt = osrt_traced(rep)
        work = work_ranges(rep)
        annotated = set(work["global_tid"].astype("int64")) if len(work) else set()
        # a thread without ranges waits for work in its reads, polls and sleeps (see the module's
        # docstring), as the CUDA driver's, CUPTI's and nsys's threads always do; where no thread has
        # ranges, the others' stay latency: the program's own reads
        peer, runtime = dict(peer), runtime_threads(rep)
        if annotated:
            peer, lat = _through_helpers(peer, lat, annotated, runtime, ev["global_tid"].unique())
        for g in ev["global_tid"].unique():
            g = int(g)
            if (g in runtime or (annotated and g not in annotated)) and lat.get(g) is not None:
                peer[g] = union_of(peer.get(g), lat.get(g))
        rows = []
        self._extent: dict[int, tuple[int, int]] = {}
        self._idle: dict = {}
        for g, e in ev.groupby("global_tid", sort=False):
            g = int(g)
            x0, x1 = max(w0, int(e["start_ns"].min())), min(w1, int(e["end_ns"].max()))
            if x1 <= x0:
                continue
            self._extent[g] = (x0, x1)
            mine = work[work["global_tid"] == g] if len(work) else work
            if osrt or len(mine) == 0:
                s, e_ = np.array([x0]), np.array([x1])
            else:
                s, e_ = busy_intervals(np.clip(mine["start_ns"].to_numpy(np.int64), x0, x1),
                                       np.clip(mine["end_ns"].to_numpy(np.int64), x0, x1))
            span = pd.DataFrame({"global_tid": g, "start_ns": s, "end_ns": e_})
            # where the thread does not work (the critical path's view): its peer waits and, without an
            # OS runtime trace, the time between its ranges (as in its own time)
            gaps = (np.r_[x0, e_], np.r_[s, x1])  # before, between and after the ranges
            self._idle[g] = union_of(peer.get(g), (gaps[0][gaps[1] > gaps[0]], gaps[1][gaps[1] > gaps[0]]))
            total = int(np.sum(e_ - s))
            wait = int(blocked_in(span, peer).sum())
            both = union_of(peer.get(g), lat.get(g))
            latency = int(blocked_in(span, {g: both}).sum()) - wait if both is not None else 0
            rows.append({"tid": g, "thread": names.get(g, f"tid {g & 0xFFFFFF}"), "own_ms": (total - wait) / 1e6,
                         "latency_ms": max(latency, 0) / 1e6, "wait_ms": wait / 1e6})
        self.threads = pd.DataFrame(rows, columns=["tid", "thread", "own_ms", "latency_ms", "wait_ms"])
        self.cores = rep.meta.get("cpu_cores")  # the profiled run's, where the report says
        self.stages = self._stages(rep, window, stages, peer, lat, names)
        # helpers: traced threads without work ranges of their own (a library's worker pool: OpenMP,
        # ONNX Runtime's intra-op threads, MKL), counted as working for the stages they overlap
        self.helpers = [int(g) for g in self.threads["tid"] if int(g) not in annotated]
        inside = work[(work["start_ns"] >= w0) & (work["end_ns"] <= w1)] if len(work) else work
        self._ranges = inside.assign(label=stage_labels(inside)) if len(inside) else inside
        self._peer = peer
        self._latency = lat  # its waits on the outside world: a thread in one acts on no peer (critical path)
        self._helper_ms: dict = {}
        self._independent: pd.Series | None = None
        self._pools: list[list[int]] | None = None
        self.window = (int(w0), int(w1))
        self._ends = {int(g): np.sort(e["end_ns"].to_numpy(np.int64)) for g, e in ev.groupby("global_tid", sort=False)}
        self._critical: pd.DataFrame | None = None
        self._crit_in: dict = {}
        self._off_path: dict = {}
        self._path_stages: pd.DataFrame | None = None
        self._osrt = osrt  # without an OS runtime trace an annotated thread owns only its ranges' time

    @staticmethod
    def _stages(rep, window, stages, peer, lat, names) -> pd.DataFrame:
        cols = ["tid", "thread", "stage", "own_ms", "latency_ms", "wait_ms", "instances"]
        nv = rep.nvtx
        if len(nv) == 0:
            return pd.DataFrame(columns=cols)
        w0, w1 = window
        r = nv[(nv["kind"] != "mark") & (nv["start_ns"] >= w0) & (nv["end_ns"] <= w1)]
        if len(r) == 0:
            return pd.DataFrame(columns=cols)
        both = {g: union_of(peer.get(g), lat.get(g)) for g in set(peer) | set(lat)}
        wait_in = pd.Series(blocked_in(r, peer), index=r.index)
        any_in = pd.Series(blocked_in(r, both), index=r.index)
        dur = r["duration_ns"].astype("int64")
        kids = r[r["parent"].isin(r.index)]
        by_parent = kids.groupby("parent")
        child_dur = by_parent["duration_ns"].sum().reindex(r.index).fillna(0)
        child_wait = wait_in[kids.index].groupby(kids["parent"]).sum().reindex(r.index).fillna(0)
        child_any = any_in[kids.index].groupby(kids["parent"]).sum().reindex(r.index).fillna(0)
        self_wait = (wait_in - child_wait).clip(lower=0)
        self_any = (any_in - child_any).clip(lower=0)
        own = (dur - child_dur - self_wait).clip(lower=0)
        latency = (self_any - self_wait).clip(lower=0)
        lab = stage_labels(r)
        waits = r["name"].map(is_wait).astype(bool)
        keep = ~waits
        if stages:
            keep &= lab.isin(list(stages)) | r["name"].isin(list(stages))
        # a range nested in a stage's call that is no stage itself (a set-up, a library's range) is
        # that stage's work: its self time goes to the nearest stage range around it
        at = _stage_above(r["parent"], keep) if stages else pd.Series(-1, index=r.index)
        rolled = ~keep & ~waits & (at >= 0)
        home = pd.Series(np.where(rolled, at, r.index), index=r.index)
        t = pd.DataFrame({"tid": r["global_tid"].astype("int64"), "stage": lab.loc[home.to_numpy()].to_numpy(),
                          "own": own, "latency": latency, "wait": self_wait, "call": keep.astype(int)})[keep | rolled]
        if len(t) == 0:
            return pd.DataFrame(columns=cols)
        g = t.groupby(["tid", "stage"], sort=False)
        out = pd.DataFrame({"own_ms": g["own"].sum() / 1e6, "latency_ms": g["latency"].sum() / 1e6,
                            "wait_ms": g["wait"].sum() / 1e6, "instances": g["call"].sum()}).reset_index()
        out["thread"] = out["tid"].map(lambda x: names.get(int(x), f"tid {int(x) & 0xFFFFFF}"))
        return out[cols].sort_values("own_ms", ascending=False, ignore_index=True)

    # ------------------------------------------------------------------------- the model
    def length(self, own: pd.Series | None = None, new: list[float] = ()) -> float:
        """The run's length in the model: the largest own time of any thread (``own``: tid -> ms,
        default as measured; a pool's threads, :attr:`pools`, their mean) or new thread (``new``), no
        shorter than the engines' busy time, nor than
        the threads' CPU time (own less latency) shared by the profiled run's cores."""
        own = self.threads.set_index("tid")["own_ms"] if own is None else own
        cpu = 0.0
        if self.cores:
            lat = self.threads.set_index("tid")["latency_ms"].reindex(own.index).fillna(0.0)
            cpu = float((own - lat).clip(lower=0).sum() + sum(new)) / self.cores
        longest = own.max() if len(own) else 0.0
        if self.pools:  # a pool's threads share its work: the pool takes its mean own time
            alone = own[~own.index.isin([t for p in self.pools for t in p])]
            longest = max([alone.max() if len(alone) else 0.0,
                           *(float(own.reindex(p).fillna(0.0).mean()) for p in self.pools)])
        return float(max([longest, *new, self.floor_ms, cpu]))

    @property
    def pools(self) -> list[list[int]]:
        """Groups of two or more threads of one process that run the same stages, their main one at
        once (:data:`POOL_AT_ONCE`; a pool's workers taking items from one queue): the model lets
        them share their work evenly after a change, as
        they take the next item when free (for threads that split the items in fixed shares this
        under-states the length). Processes that run the same stages (ranks, each with its own share
        of the data) are no pool: the slowest one keeps its time."""
        if self._pools is None:
            st = self.stages
            if len(st) == 0:
                self._pools = []
            else:
                kind = st.groupby("tid")["stage"].agg(lambda x: tuple(sorted(set(map(str, x)))))
                process = pd.Series(pid_of(kind.index.to_numpy(np.int64)), index=kind.index)
                self._pools = [sorted(int(t) for t in g.index) for _, g in kind.groupby([process, kind], sort=False)
                               if len(g) > 1 and self._at_once([int(t) for t in g.index])]
        return self._pools

    def _at_once(self, tids: list[int]) -> bool:
        """Whether threads ``tids`` run their main stage at once (:data:`POOL_AT_ONCE`), for about the
        same time per instance (:data:`POOL_EVEN`)."""
        st, r = self.stages[self.stages["tid"].isin(tids)], self._ranges
        if not len(r):
            return False
        main = str(st.groupby("stage")["own_ms"].sum().idxmax())
        per = st[st["stage"] == main].set_index("tid")
        each = (per["own_ms"] / per["instances"].where(per["instances"] > 0)).reindex(tids)
        if each.notna().all() and each.min() > 0 and each.max() > POOL_EVEN * each.min():
            return False  # different work under one name (where instances are counted in the window)
        mine = r[r["global_tid"].isin(tids) & ((r["label"] == main) | (r["name"] == main))]
        if not len(mine):
            return False
        s, e = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        us, ue = busy_intervals(s, e)
        union = int(np.sum(ue - us))
        return union > 0 and int(np.sum(e - s)) >= POOL_AT_ONCE * union

    def stage_own_ms(self, tid: int, stages) -> float:
        """Thread ``tid``'s own time (ms) in ``stages`` (labels)."""
        st = self.stages
        return float(st.loc[(st["tid"] == tid) & st["stage"].isin(list(stages)), "own_ms"].sum())

    def pool_of(self, tid: int) -> list[int]:
        """The threads of the pool (:attr:`pools`) that ``tid`` belongs to, or ``[tid]``."""
        return next((p for p in self.pools if tid in p), [tid])

    def pooled(self, removed: dict[int, float], stages) -> dict[int, float]:
        """The time (tid -> ms) the other threads of a pool (:attr:`pools`) lose with ``removed`` (tid ->
        ms) taken off ``stages`` on one of them: the same share of their own time in those stages."""
        out: dict[int, float] = {}
        if not stages or not self.pools:
            return out
        for tid, ms in removed.items():
            pool = self.pool_of(tid)
            if len(pool) < 2:
                continue
            mine = self.stage_own_ms(tid, stages)
            frac = min(ms / mine, 1.0) if mine > 0 else 0.0
            for other in pool:
                if other != tid and other not in removed:
                    out[other] = out.get(other, 0.0) + frac * self.stage_own_ms(other, stages)
        return out

    def _inside_ms(self, ranges: pd.DataFrame) -> dict[int, float]:
        """Each helper thread's own time (ms) inside the union of those of ``ranges`` (NVTX rows) that
        lie on threads of its own process (a pool works in its caller's process; a loader process
        works on its own): its time there within its own extent, less its waits on peers."""
        if not self.helpers or not len(ranges):
            return {}
        pid = pid_of(ranges["global_tid"].to_numpy(np.int64))
        start, end = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
        union = {int(p): busy_intervals(start[pid == p], end[pid == p]) for p in np.unique(pid)}
        return {h: self._own_in(h, union[int(pid_of(h))]) for h in self.helpers if int(pid_of(h)) in union}

    def _own_in(self, tid: int, union) -> float:
        """Thread ``tid``'s own time (ms) inside the sorted disjoint intervals ``union``, within its
        extent, less its waits on peers."""
        x = self._extent.get(int(tid))
        if x is None:
            return 0.0
        s, e = np.clip(union[0], *x), np.clip(union[1], *x)
        span = pd.DataFrame({"global_tid": int(tid), "start_ns": s, "end_ns": e})
        return (int(np.sum(e - s)) - int(blocked_in(span, self._peer).sum())) / 1e6

    def own_inside_ms(self, tid: int, ranges: pd.DataFrame) -> float:
        """Thread ``tid``'s own time (ms) inside the union of ``ranges`` (NVTX rows, on any thread of
        any process), within its extent, less its waits on peers."""
        if not len(ranges):
            return 0.0
        return self._own_in(tid, busy_intervals(ranges["start_ns"].to_numpy(np.int64),
                                                ranges["end_ns"].to_numpy(np.int64)))

    def served(self, tid: int, at_least_ms: float) -> tuple[str, int, float] | None:
        """The stage that thread ``tid``'s own time serves: (stage, thread, ms) for the stage's ranges on
        one other thread (any process) that hold at least ``at_least_ms`` of that time while their
        thread waits on peers in them for at least half as long (it waits for that work, a pool's worker
        process computing what its caller's 'map' waits for; a loader working beside a stage that
        works too serves none), the shortest such ranges in all (the innermost stage, not an envelope
        around the loop). None where no stage holds that much."""
        r = self._ranges
        if not len(r):
            return None
        r = r[r["global_tid"] != int(tid)]
        waits = self.stages.set_index(["tid", "stage"])["wait_ms"] if len(self.stages) else pd.Series(dtype=float)
        best, held = None, float("inf")
        for (g, stage), mine in r.groupby(["global_tid", "label"], sort=False):
            ms = self.own_inside_ms(tid, mine)
            length = int((mine["end_ns"] - mine["start_ns"]).sum())
            if ms >= at_least_ms and ms > 0 and length < held and 2 * float(waits.get((g, stage), 0.0)) >= ms:
                best, held = (str(stage), int(g), ms), length
        return best

    def helper_ms(self, tid: int, stages) -> dict[int, float]:
        """Each helper thread's own time (ms) inside the ranges of ``stages`` on thread ``tid``: the
        work a worker pool did for those stages (the model's assumption; see :attr:`helpers`)."""
        key = (int(tid), tuple(sorted(map(str, stages))))
        if key not in self._helper_ms:
            r = self._ranges
            if len(r):
                r = r[(r["global_tid"] == key[0]) & (r["label"].isin(key[1]) | r["name"].isin(key[1]))]
            self._helper_ms[key] = {h: ms for h, ms in self._inside_ms(r).items() if ms > 0}
        return self._helper_ms[key]

    def helped(self, removed: dict[int, float], stages) -> dict[int, float]:
        """The helper time (tid -> ms) that goes with taking ``removed`` (tid -> ms) off ``stages``:
        each helper's time inside those stages' ranges, in the share of the stages' own time removed."""
        out: dict[int, float] = {}
        if not stages or not self.helpers:
            return out
        for tid, ms in removed.items():
            own = self.stage_own_ms(tid, stages)
            frac = min(ms / own, 1.0) if own > 0 else 0.0
            for h, t in self.helper_ms(tid, stages).items():
                out[h] = out.get(h, 0.0) + frac * t
        return out

    def speedup(self, removed: dict[int, float] | None = None, new: list[float] = (), *, stages=()) -> float:
        """Length now over length after taking ``removed`` (tid -> ms) off threads and adding threads
        of ``new`` own time; 1.0 when nothing changes. ``stages``: the stages the removed time is
        taken from: helper threads lose their time inside those stages' ranges in the same share
        (:meth:`helped`).

        Both lengths are also no shorter than the critical path's (:meth:`critical`): the window now,
        and after the change the window less the removed time that lay on the path (each thread's
        removed time in the share of its own time, or of its stages', that the path holds). A thread
        that hands work to another and waits for it (a synchronous call, a lock held in turn) does
        not overlap with it, and this term says so where the largest own time alone would not."""
        removed = dict(removed or {})
        removed.update(self.pooled(removed, stages))
        now = self.length()
        own = self.threads.set_index("tid")["own_ms"].copy()
        helped = self.helped(removed, stages)
        for tid, ms in [*removed.items(), *helped.items()]:
            if tid in own.index:
                own[tid] = max(own[tid] - ms, 0.0)
        path = self.critical()
        after = self.length(self._less_off_path(own), list(new))
        if path is not None:
            span = (self.window[1] - self.window[0]) / 1e6
            on_path = sum(ms * self.on_path_share(tid, stages) for tid, ms in [*removed.items(), *helped.items()])
            now, after = max(now, span), max(after, span - on_path)
        return now / after if after > 0 else float("inf")

    def lifetime_ms(self, tid: int) -> float:
        """How long thread ``tid`` has events inside the window (first to last), ms; 0 if none."""
        x = self._extent.get(int(tid))
        return (x[1] - x[0]) / 1e6 if x else 0.0

    def without_turns(self) -> float:
        """Length now over the length if the threads no longer waited on each other: each keeps its
        own time (less what the path shows was an untraced wait), the threads' CPU time shares the
        cores, and no chain of hand-offs remains (the own-time view alone). What a lock that the
        threads take in turn (Python's GIL around pure-Python work) costs the run."""
        now = self.length()
        if self.critical() is not None:
            now = max(now, (self.window[1] - self.window[0]) / 1e6)
        after = self.length(self._less_off_path(self.threads.set_index("tid")["own_ms"].copy()))
        return now / after if after > 0 else float("inf")

    def _less_off_path(self, own: pd.Series) -> pd.Series:
        """``own`` (tid -> ms, changed in place) less each thread's untraced time off the critical path:
        a wait nothing recorded, which a change that shortens the path does not leave behind (see
        :meth:`_off_path_ms`); unchanged without a path."""
        if self.critical() is not None:
            for tid in own.index:
                own[tid] = max(own[tid] - self._off_path_ms(int(tid)), 0.0)
        return own

    @property
    def limiter(self) -> pd.Series | None:
        """The thread with the largest :meth:`independent_ms` (None without threads): a worker pool's
        time inside another thread's stages counts for that thread's stage, not as a limit of its own."""
        t = self.threads
        if t.empty:
            return None
        return t.iloc[self.independent_ms().reindex(t["tid"]).fillna(0.0).to_numpy().argmax()]

    def independent_ms(self) -> pd.Series:
        """Own time per thread (tid -> ms) that is its own limit: all of it for an annotated thread; for
        a helper, only its time outside the stage ranges of its own process's annotated threads (the
        rest is their work; a helper in another process, a loader's worker, is its own limit all along).
        Computed once per model (the limiter and every stage rule's balance test read it)."""
        if self._independent is None:
            own = self.threads.set_index("tid")["own_ms"].astype(float).copy()
            for h, ms in self._inside_ms(self._ranges).items():
                own[h] = max(own[h] - ms, 0.0)
            self._independent = own
        return self._independent

    def stages_of(self, tid: int) -> pd.DataFrame:
        return self.stages[self.stages["tid"] == tid]

