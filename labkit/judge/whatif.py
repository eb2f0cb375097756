"""The what-if model behind advise's stage findings: each thread's *own* time, each stage's own time
on its thread, and the run's length after a change.

A thread's own time in the window is its extent less the time it waited on a peer (another thread,
through a lock, a condition, a queue or a wait range; or the GPU, through a sync or a blocking copy):
what it would take with every peer infinitely fast. It holds its work, its CUDA calls, its untraced
time and its *latency*: time blocked on the outside world (sleeps, reads, polls: the calls of
:data:`labkit.stats.blocked.LATENCY_OSRT`), which stays on the thread unless a lever overlaps it.
A stage's own time is the same over its ranges' self time (nested ranges apart). Without an OS
runtime trace, waits outside ranges are invisible, so an annotated thread owns only the time of its
ranges then. A thread without ranges of its own, where others have them, waits for work in its
reads, polls and sleeps (a pool's result handler on its pipe): peer waits; so do the threads the CUDA
driver, CUPTI and nsys start (:func:`~labkit.stats.blocked.runtime_threads`) in every report.

In a steady, pipelined run the slowest resource sets the pace, so the model's run length is the
largest own time of any thread, no shorter than the SMs' or the copy engines' busy time.
:meth:`WhatIf.speedup` compares that length before and after a change (time removed from threads,
stages moved to new threads); with no change it is exactly 1. The model's assumptions, said with
every finding: every other thread and engine keeps its measured time; the threads' CPU time
shares the profiled machine's cores (``CpuCores`` in the report), so a change off the limiting
thread still pays where the cores were full; a thread without ranges of its own (a library's worker
pool) works for the stages whose ranges it overlaps, and its time there changes with theirs.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.judge.accounting import thread_names
from labkit.report.cpu import osrt_calls
from labkit.stats.blocked import blocked_in, blocked_intervals, is_wait, overlap_ns, runtime_threads, work_ranges
from labkit.stats.idle import busy_intervals, union_of
from labkit.stats.stages import stage_labels

__all__ = ["WhatIf", "IN_FLIGHT"]

IN_FLIGHT = 8
"""Requests a thread can keep in flight once its latency is overlapped (parallel reads, prefetch
threads): the parallel-input lever's assumption."""


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


class WhatIf:
    """Own time per thread and per (thread, stage) in ``window``; see the module docstring.

    Attributes:
        threads: tid, thread, own_ms, latency_ms, wait_ms (one row per thread with traced events).
        stages: tid, thread, stage, own_ms, latency_ms (self time of the stage's ranges on that thread).
        floor_ms: the SMs' and the copy engines' busy time, the least any change leaves.
        helpers: threads with traced events but no work ranges of their own, such as a library's worker
            pool (OpenMP, ONNX Runtime's intra-op threads): their time inside a stage's ranges is counted
            as that stage's work, so it shrinks when the stage does (:meth:`helped`).
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
        osrt = len(rep.osrt) > 0
        work = work_ranges(rep)
        annotated = set(work["global_tid"].astype("int64")) if len(work) else set()
        # a thread without ranges waits for work in its reads, polls and sleeps (see the module's
        # docstring), as the CUDA driver's, CUPTI's and nsys's threads always do; where no thread has
        # ranges, the others' stay latency: the program's own reads
        peer, runtime = dict(peer), runtime_threads(rep)
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
        self.cores = rep.meta.get("cpu_cores")  # the profiled machine's, where the report says
        self.stages = self._stages(rep, window, stages, peer, lat, names)
        # helpers: traced threads without work ranges of their own (a library's worker pool: OpenMP,
        # ONNX Runtime's intra-op threads, MKL), counted as working for the stages they overlap
        self.helpers = [int(g) for g in self.threads["tid"] if int(g) not in annotated]
        inside = work[(work["start_ns"] >= w0) & (work["end_ns"] <= w1)] if len(work) else work
        self._ranges = inside.assign(label=stage_labels(inside)) if len(inside) else inside
        self._peer = peer
        self._helper_ms: dict = {}
        self._independent: pd.Series | None = None
        self.window = (int(w0), int(w1))
        self._ends = {int(g): np.sort(e["end_ns"].to_numpy(np.int64)) for g, e in ev.groupby("global_tid", sort=False)}
        self._critical: pd.DataFrame | None = None
        self._crit_in: dict = {}
        self._off_path: dict = {}
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
        default as measured) or new thread (``new``), no shorter than the engines' busy time, nor than
        the threads' CPU time (own less latency) shared by the profiled machine's cores."""
        own = self.threads.set_index("tid")["own_ms"] if own is None else own
        cpu = 0.0
        if self.cores:
            lat = self.threads.set_index("tid")["latency_ms"].reindex(own.index).fillna(0.0)
            cpu = float((own - lat).clip(lower=0).sum() + sum(new)) / self.cores
        return float(max([own.max() if len(own) else 0.0, *new, self.floor_ms, cpu]))

    def _inside_ms(self, ranges: pd.DataFrame) -> dict[int, float]:
        """Each helper thread's own time (ms) inside the union of ``ranges`` (NVTX rows): its time there
        within its own extent, less its waits on peers."""
        if not self.helpers or not len(ranges):
            return {}
        s, e = busy_intervals(ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64))
        out = {}
        for h in self.helpers:
            x0, x1 = self._extent[h]
            hs, he = np.clip(s, x0, x1), np.clip(e, x0, x1)
            span = pd.DataFrame({"global_tid": h, "start_ns": hs, "end_ns": he})
            out[h] = (int(np.sum(he - hs)) - int(blocked_in(span, self._peer).sum())) / 1e6
        return out

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
        st = self.stages
        for tid, ms in removed.items():
            own = float(st.loc[(st["tid"] == tid) & st["stage"].isin(list(stages)), "own_ms"].sum())
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

    # ------------------------------------------------------------------------- the critical path
    HOP_NS = 1_000_000
    """Waits shorter than this (1 ms: contention for a lock the threads hold for microseconds, such as
    Python's GIL between two threads that compute) keep the path on the waiting thread: following
    them would hand the path the other thread's whole stretch of work for a moment's wait."""
    MAX_STEPS = 200_000
    """Hops of the critical-path walk; a trace that needs more gets no path (the model then reads own
    times alone) rather than a partial one."""
    MAX_CHECKS = 5_000_000
    """Threads looked at over all hops (hops x threads alive): the same rule for traces of many
    threads, so the walk stays within about a second of Python."""

    def _waiting(self, g: int, t: int):
        """The peer wait of thread ``g`` holding the instant just before ``t`` as (start, end), or None."""
        iv = self._idle.get(g)
        if iv is None or len(iv[0]) == 0:
            return None
        i = int(np.searchsorted(iv[0], t - 1, side="right")) - 1
        return (int(iv[0][i]), int(iv[1][i])) if i >= 0 and iv[1][i] > t - 1 else None

    def _last_work(self, g: int, t: int) -> int:
        """The last instant at or before ``t`` that thread ``g`` worked (not waiting on a peer), or -1."""
        x0, x1 = self._extent[g]
        t = min(t, x1)
        while t > x0:
            iv = self._waiting(g, t)
            if iv is None:
                return t
            t = iv[0]
        return -1

    def _releaser(self, g: int, t: int, since: int):
        """(thread, its last working instant) that let ``g`` go on at ``t`` after waiting from ``since``:
        of the others that worked in that wait, the one that worked last before ``t`` (still working,
        or finished just before), ties going to the one whose last traced event (range, CUDA or OS
        call) ended nearest before ``t``; None when no traced thread worked meanwhile."""
        best, key = None, None
        ids, x0, x1 = self._spans
        self._checks += len(ids)
        for u in ids[(x1 > since) & (x0 < t)]:  # only threads that existed during the wait
            u = int(u)
            if u == g:
                continue
            lw = self._last_work(u, t)
            if lw <= since:
                continue
            ends = self._ends.get(u)
            i = int(np.searchsorted(ends, t, side="right")) - 1 if ends is not None else -1
            k = (lw, int(ends[i]) if i >= 0 else -1)
            if key is None or k > key:
                best, key = (u, lw), k
        return best

    def critical(self) -> pd.DataFrame | None:
        """The critical path through the window, walked back from its end: tid, start_ns, end_ns,
        waiting (the thread waited and no traced thread worked meanwhile: the GPU, an untraced thread
        or process). While a thread works the path stays on it; where it waited on a peer the path goes
        to the thread that worked until just before it went on (:meth:`_releaser`). Segments tile the
        window; before the first thread's first event, or after the last's, the path is tid -1.
        None when the walk needs more than :data:`MAX_STEPS` hops or :data:`MAX_CHECKS` looks."""
        if self._critical is not None:
            return self._critical if len(self._critical) else None
        w0, w1 = self.window
        segs: list[tuple[int, int, int, bool]] = []
        if not self._extent or w1 <= w0:
            self._critical = pd.DataFrame()
            return None

        g = max(self._extent, key=lambda u: (self._last_work(u, w1), float(self.independent_ms().get(u, 0.0))))
        t = max(self._last_work(g, w1), w0)
        if t < w1:
            segs.append((-1, t, w1, False))
        ids = np.array(list(self._extent), dtype=np.int64)
        self._spans = (ids, np.array([self._extent[int(u)][0] for u in ids], dtype=np.int64),
                       np.array([self._extent[int(u)][1] for u in ids], dtype=np.int64))
        self._checks = 0
        for _ in range(self.MAX_STEPS):
            if t <= w0:
                break
            if self._checks > self.MAX_CHECKS:
                self._critical = pd.DataFrame()
                return None
            x0 = self._extent[g][0]
            iv = self._waiting(g, t)
            if iv is None and t > x0:  # working: the path stays on the thread back to its last wait
                p = self._idle.get(g)
                j = int(np.searchsorted(p[1], t - 1, side="right")) - 1 if p is not None and len(p[0]) else -1
                s0 = max(int(p[1][j]) if j >= 0 else x0, x0, w0)
                segs.append((g, s0, t, False))
                t = s0
                continue
            since = iv[0] if iv is not None else w0  # waiting, or not started yet (whoever worked started it)
            found = self._releaser(g, t, since) if iv is None or iv[1] - iv[0] >= self.HOP_NS else None
            if found is None:  # a short wait, or nothing traced worked meanwhile: the wait is on the path
                s0 = max(since, w0)
                segs.append((g if iv is not None else -1, s0, t, iv is not None))
                t = s0
                continue
            u, lw = found
            if lw < t:  # the releaser finished before this thread went on: the gap is the wake-up
                segs.append((g, lw, t, True))
                t = lw
            g = u
        else:
            self._critical = pd.DataFrame()
            return None
        self._critical = pd.DataFrame(segs[::-1], columns=["tid", "start_ns", "end_ns", "waiting"])
        return self._critical

    def _off_path_ms(self, g: int) -> float:
        """Own time of an annotated thread outside its work ranges and off the critical path: a wait
        nothing recorded (a Python thread waiting for the interpreter's lock while another runs, a
        queue's wait below the OS trace). It counts as the thread's own time in the measured run, but
        a change that shortens the path does not leave it behind, so :meth:`speedup` drops it from the
        thread's length after the change (0 for a thread without ranges: a worker pool's time is all
        untraced; 0 without an OS runtime trace, where an annotated thread owns only its ranges)."""
        if g in self._off_path:
            return self._off_path[g]
        path, r = self.critical(), self._ranges
        mine = r[r["global_tid"] == g] if len(r) else r
        ms = 0.0
        if path is not None and self._osrt and len(mine) and g in self._extent:
            x0, x1 = self._extent[g]
            p = self._peer.get(g)
            ps, pe = (np.clip(p[0], x0, x1), np.clip(p[1], x0, x1)) if p is not None else (np.array([], np.int64),) * 2
            own_s, own_e = np.r_[x0, pe], np.r_[ps, x1]  # the extent less its peer waits
            keep = own_e > own_s
            own_s, own_e = own_s[keep], own_e[keep]
            seg = path[path["tid"] == g]
            bs, be = busy_intervals(np.r_[mine["start_ns"].to_numpy(np.int64), seg["start_ns"].to_numpy(np.int64)],
                                    np.r_[mine["end_ns"].to_numpy(np.int64), seg["end_ns"].to_numpy(np.int64)])
            inside = overlap_ns((bs, be), (own_s, own_e))
            ms = max(float(np.sum(own_e - own_s) - inside), 0.0) / 1e6
        self._off_path[g] = ms
        return ms

    def path_stages(self) -> pd.DataFrame:
        """Per stage: ``path_ms``, the critical path's time inside its ranges while their thread worked
        (summed over threads), and ``threads``, how many threads ran it on the path; largest first."""
        cols = ["stage", "path_ms", "threads"]
        path, r = self.critical(), self._ranges
        if path is None or not len(r):
            return pd.DataFrame(columns=cols)
        rows = []
        work = path[~path["waiting"]]
        for (g, label), rr in r.groupby(["global_tid", "label"], sort=False):
            mine = work[work["tid"] == int(g)]
            if not len(mine):
                continue
            iv = (mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64))
            rs, re_ = busy_intervals(rr["start_ns"].to_numpy(np.int64), rr["end_ns"].to_numpy(np.int64))
            ms = overlap_ns(iv, (rs, re_)) / 1e6
            if ms > 0:
                rows.append((str(label), ms))
        if not rows:
            return pd.DataFrame(columns=cols)
        d = pd.DataFrame(rows, columns=["stage", "path_ms"])
        g = d.groupby("stage", sort=False)["path_ms"]
        out = pd.DataFrame({"path_ms": g.sum(), "threads": g.size()}).reset_index()
        return out[cols].sort_values("path_ms", ascending=False, ignore_index=True)

    def on_path_share(self, tid: int, stages=()) -> float:
        """The share (0-1) of thread ``tid``'s own time, or of its own time in ``stages``, that the
        critical path holds while the thread works (a change to the rest leaves the path alone)."""
        key = (int(tid), tuple(sorted(map(str, stages))))
        if key in self._crit_in:
            return self._crit_in[key]
        path = self.critical()
        share = 0.0
        if path is not None:
            mine = path[(path["tid"] == key[0]) & ~path["waiting"]]
            s = mine["start_ns"].to_numpy(np.int64)
            e = mine["end_ns"].to_numpy(np.int64)
            if stages:
                r = self._ranges
                r = r[r["label"].isin(key[1]) | r["name"].isin(key[1])] if len(r) else r
                if key[0] in self.helpers:  # a worker pool works inside the stage's ranges on other threads
                    own = float(self._inside_ms(r).get(key[0], 0.0))
                else:
                    r = r[r["global_tid"] == key[0]] if len(r) else r
                    st = self.stages
                    own = float(st.loc[(st["tid"] == key[0]) & st["stage"].isin(list(key[1])), "own_ms"].sum())
                if len(r) and len(s):
                    rs, re_ = busy_intervals(r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64))
                    on = overlap_ns((s, e), (rs, re_)) / 1e6
                else:
                    on = 0.0
            else:
                own = float(self.threads.loc[self.threads["tid"] == key[0], "own_ms"].sum())
                on = float(np.sum(e - s)) / 1e6
            share = min(on / own, 1.0) if own > 0 else 0.0
        self._crit_in[key] = share
        return share

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
        a helper, only its time outside every annotated thread's stage ranges (the rest is their work).
        Computed once per model (the limiter and every stage rule's balance test read it)."""
        if self._independent is None:
            own = self.threads.set_index("tid")["own_ms"].astype(float).copy()
            for h, ms in self._inside_ms(self._ranges).items():
                own[h] = max(own[h] - ms, 0.0)
            self._independent = own
        return self._independent

    def stages_of(self, tid: int) -> pd.DataFrame:
        return self.stages[self.stages["tid"] == tid]

