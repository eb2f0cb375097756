"""The critical path through a what-if model's window (:class:`labkit.judge.whatif.WhatIf`): which
thread holds up progress at each instant, walked back from the window's end. While a thread works the
path stays on it; where it waited on a peer the path goes to the thread that worked until just before
it went on. It says how much of a change's removed time would shorten the run, and which untraced
time of a thread was a wait nothing recorded (off the path)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.stats.blocked import overlap_ns
from labkit.stats.idle import busy_intervals


def _holding(iv, t: int) -> tuple[int, int] | None:
    """The interval of the sorted disjoint ``iv`` (starts, ends; or None) holding the instant just
    before ``t``, as (start, end), or None."""
    if iv is None or len(iv[0]) == 0:
        return None
    i = int(np.searchsorted(iv[0], t - 1, side="right")) - 1
    return (int(iv[0][i]), int(iv[1][i])) if i >= 0 and iv[1][i] > t - 1 else None


class CriticalPath:
    """The critical path of a :class:`~labkit.judge.whatif.WhatIf` (a mixin: it reads the model's
    ``window``, ``threads``, ``_extent``, ``_idle``, ``_ends``, ``_ranges``, ``_peer``, ``_latency``, ``_osrt`` and ``lifetime_ms``,
    and keeps ``_critical``, ``_crit_in``, ``_off_path``, ``_path_stages``)."""

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
        return _holding(self._idle.get(g), t)

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

    def _last_act(self, g: int, t: int) -> int:
        """The last instant at or before ``t`` that thread ``g`` could act on a peer: its last working
        instant (:meth:`_last_work`), or where it was then blocked on the outside world (a sleep, a read:
        latency, which the path counts as its own time) the start of that wait."""
        lw = self._last_work(g, t)
        iv = _holding(self._latency.get(g), lw) if lw > 0 else None
        return iv[0] if iv is not None else lw

    def _releaser(self, g: int, t: int, since: int):
        """(thread, its last working instant) that let ``g`` go on at ``t`` after waiting from ``since``:
        of the others that could act in that wait, the one that acted last before ``t`` (still working,
        or finished just before: :meth:`_last_act`; a thread in the middle of a sleep or a read then
        released no one, as a pool's workers in their remote calls do not release their feeder's next
        wait), ties going to the one whose last traced event (range, CUDA or OS call) ended nearest
        before ``t``; None when no traced thread could act meanwhile."""
        best, key = None, None
        ids, x0, x1 = self._spans
        self._checks += len(ids)
        for u in ids[(x1 > since) & (x0 < t)]:  # only threads that existed during the wait
            u = int(u)
            if u == g:
                continue
            lw = self._last_act(u, t)
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

    TURN_SHARE = 0.2
    """A thread takes turns in a stage on the path when it holds at least this share of the path's
    time in the stage and lives at least half the window (a worker started per item is a chain's
    link, :func:`labkit.judge.rules.chain`, not a turn-taker)."""

    def path_stages(self) -> pd.DataFrame:
        """Per stage: ``path_ms``, the critical path's time inside its ranges while their thread worked
        (summed over threads); ``threads``, how many threads ran it on the path; ``turns``, how many of
        them took turns in it (:data:`TURN_SHARE`); largest first. Computed once per model (two rules
        read it)."""
        if self._path_stages is None:
            self._path_stages = self._stages_on_path()
        return self._path_stages

    def _stages_on_path(self) -> pd.DataFrame:
        """:meth:`path_stages`, computed."""
        cols = ["stage", "path_ms", "threads", "turns"]
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
                rows.append((str(label), int(g), ms))
        if not rows:
            return pd.DataFrame(columns=cols)
        d = pd.DataFrame(rows, columns=["stage", "tid", "path_ms"])
        half = (self.window[1] - self.window[0]) / 2e6
        d["turn"] = ((d["path_ms"] >= self.TURN_SHARE * d.groupby("stage")["path_ms"].transform("sum"))
                     & (d["tid"].map(self.lifetime_ms) >= half))
        g = d.groupby("stage", sort=False)
        out = pd.DataFrame({"path_ms": g["path_ms"].sum(), "threads": g.size(), "turns": g["turn"].sum()}).reset_index()
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
                    own = self.stage_own_ms(key[0], key[1])
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
