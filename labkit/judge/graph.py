"""The run as a graph, for :mod:`labkit.judge.replay`: per thread a sequence of segments, the edges
where one thread's act released another's wait, and the resources segments take.

Each traced thread of the window (the CUDA runtime's, CUPTI's and nsys's own apart) is cut into
segments at every boundary of its blocked time, its CUDA calls, its work ranges and its acts, and each
segment is one of: ``work`` (its own CPU time), ``cuda`` (a CUDA call that does not wait), ``peer``
(blocked on another thread or the GPU: :func:`labkit.stats.blocked.blocked_intervals` ``kind="peer"``)
or ``latency`` (blocked on the outside world: ``kind="latency"``). The classification is the stats
room's, read here, not made again. A segment's stage is the label of the innermost work range around
it (:func:`labkit.stats.stages.stage_labels`), or "" outside every range.

Edges: a peer wait ends at the last act of another thread inside it (the end of a work range, a call
that hands something over: :func:`labkit.stats.peers._peer_events`, the acts stats/peers tests waits
against), with the delay from that act to the wait's end (the wake-up) kept. A sync or a blocking copy
ends at the end of the last GPU operation of its process that ended inside it. The GPU is one more
lane per process: its kernels and copies in order, each released by the CUDA call that launched it
(its correlation id). A wait no traced act ended (a peer that is not traced, an untraced process)
keeps its recorded length: the trace cannot say what it depended on.

Resources: the usable cores (``cpu_cores`` in the report's meta; none said: no limit), which every
``work`` and ``cuda`` segment shares. A segment's CPU demand is its length times the share of a core
it had in the recording (all of one where no more threads were on CPU than cores), so the replay with
no change lasts what the run lasted. Locks, conditions and Python's GIL are not a resource with a
holder here (the trace does not name which lock a thread waited for); a thread queued on one waits in a
``peer`` segment, which the releasing thread's act ends, so the recorded order of the holders stays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.judge.critical import CriticalPath
from labkit.report.reader import pid_of
from labkit.stats.blocked import blocked_intervals
from labkit.stats.calls import _memo, runtime_threads, work_ranges
from labkit.stats.idle import busy_intervals, copy_calls, sync_calls, union_of
from labkit.stats.peers import READ_SLACK_NS, _peer_events
from labkit.stats.stages import stage_labels

__all__ = ["KINDS", "RunGraph", "run_graph"]

CREATE_OSRT = r"^(pthread_create|clone3?|fork|vfork|posix_spawnp?)(_v\d+)?$"
"""OS runtime calls that start a thread or a process: the edge from its creator to its first instant."""
KINDS = ("work", "cuda", "peer", "latency", "gpu")
"""Segment kinds, by their code in :attr:`RunGraph.kind` (0-4); ``gpu``: a kernel or a copy on a GPU lane."""
WORK, CUDA, PEER, LATENCY, GPU = range(5)


@dataclass
class RunGraph:
    """The window's run as segments (one row each, in order per lane), edges and resources.

    Attributes:
        window: (start_ns, end_ns) of the window.
        lanes: per lane (a thread's global tid, or ``-pid`` for a process's GPU lane), its segments'
            ids, in order.
        start_ns, end_ns: each segment's recorded bounds.
        kind: each segment's kind (:data:`KINDS` code).
        stage: each segment's stage label ("" outside every range).
        demand_ns: each ``work``/``cuda`` segment's CPU demand (its length at the share of a core it had).
        src: the segment whose end released this one (-1: none; a peer wait keeps its length then).
        wake_ns: for a segment with a ``src``, the recorded delay from the release to its end (a wait),
            or to its start (a GPU operation after its launch).
        cores: the usable cores (None: no limit).
        lane_start_ns: each lane's first recorded instant in the window.
        lane_src: per lane started in the window by a traced ``pthread_create`` of another thread of
            its process, (the creator's segment ending where that call began, the delay to the lane's
            first instant): a thread started per item starts when its creator gets there.
    """

    window: tuple[int, int]
    lanes: dict[int, np.ndarray]
    start_ns: np.ndarray
    end_ns: np.ndarray
    kind: np.ndarray
    stage: np.ndarray
    demand_ns: np.ndarray
    src: np.ndarray
    wake_ns: np.ndarray
    cores: float | None
    lane_start_ns: dict[int, int]
    lane_src: dict = None

    @property
    def length_ns(self) -> int:
        """The recorded run's length: from the window's start to the end of its last segment."""
        return int(self.end_ns.max() - self.window[0]) if len(self.end_ns) else 0

    def segments(self) -> pd.DataFrame:
        """The segments as a frame: lane, start_ns, end_ns, kind (name), stage, demand_ns, src, wake_ns."""
        lane = np.empty(len(self.kind), dtype=np.int64)
        for k, ids in self.lanes.items():
            lane[ids] = k
        return pd.DataFrame({"lane": lane, "start_ns": self.start_ns, "end_ns": self.end_ns,
                             "kind": np.array(KINDS)[self.kind], "stage": self.stage, "demand_ns": self.demand_ns,
                             "src": self.src, "wake_ns": self.wake_ns})


def run_graph(rep, window: tuple[int, int]) -> RunGraph:
    """The run graph of ``rep`` in ``window`` (see the module docstring), built once per report and window."""
    w0, w1 = int(window[0]), int(window[1])
    return _memo(rep, ("run_graph", w0, w1), lambda: _build(rep, w0, w1))


def _inside(iv, t: np.ndarray) -> np.ndarray:
    """Whether each instant ``t`` lies inside the sorted disjoint intervals ``iv`` (or None)."""
    if iv is None or len(iv[0]) == 0:
        return np.zeros(len(t), dtype=bool)
    i = np.searchsorted(iv[0], t, side="right") - 1
    return (i >= 0) & (t < iv[1][np.maximum(i, 0)])


def _clip(f: pd.DataFrame, w0: int, w1: int) -> pd.DataFrame:
    return f[(f["end_ns"] > w0) & (f["start_ns"] < w1)] if len(f) else f


def _build(rep, w0: int, w1: int) -> RunGraph:
    peer = dict(blocked_intervals(rep, kind="peer"))
    lat = blocked_intervals(rep, kind="latency")
    runtime = runtime_threads(rep)
    work = _clip(work_ranges(rep), w0, w1)
    labels = stage_labels(work) if len(work) else pd.Series(dtype=object)
    api = _clip(rep.cuda_api, w0, w1)
    osrt = _clip(rep.osrt, w0, w1)
    frames = [f[["global_tid", "start_ns", "end_ns"]] for f in (rep.nvtx, api, osrt) if len(f)]
    ev = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["global_tid", "start_ns", "end_ns"])
    ev = _clip(ev, w0, w1)
    ev = ev[~ev["global_tid"].isin(runtime)]
    acts = _peer_events(rep)
    acts = acts[(acts["t_ns"] > w0) & (acts["t_ns"] < w1)]
    annotated = set(work["global_tid"].astype("int64")) if len(work) else set()
    creates = osrt[osrt["name"].astype(str).str.match(CREATE_OSRT)] if len(osrt) else osrt
    creates = creates[~creates["global_tid"].isin(runtime)] if len(creates) else creates
    blocking = set()
    if len(api):
        c = copy_calls(rep)
        blocking = set(sync_calls(rep).index) | set(c.index[c["blocking"]])
    calls = api[~api.index.isin(blocking)] if len(api) else api

    starts, ends, kinds, stages, lanes, lane_start = [], [], [], [], {}, {}
    n = 0
    for g, e in ev.groupby("global_tid", sort=False):
        g = int(g)
        x0, x1 = max(w0, int(e["start_ns"].min())), min(w1, int(e["end_ns"].max()))
        if x1 <= x0:
            continue
        p = peer.get(g)
        # a thread without ranges where others have them waits for work in its reads and naps
        # (whatif's rule for a pool's result handler): peer waits, not its own latency
        lt = lat.get(g)
        if annotated and g not in annotated and lt is not None:
            p, lt = union_of(p, lt), None
        mine = work[work["global_tid"] == g] if len(work) else work
        cl = calls[calls["global_tid"] == g] if len(calls) else calls
        my_acts = acts.loc[acts["global_tid"] == g, "t_ns"].to_numpy(np.int64)
        if len(creates):  # a thread's creation is an act too: the created thread's start
            my_acts = np.union1d(my_acts, creates.loc[creates["global_tid"] == g, "start_ns"].to_numpy(np.int64))
        cuts = [np.array([x0, x1], dtype=np.int64), my_acts]
        for iv in (p, lt):
            if iv is not None:
                cuts += [iv[0], iv[1]]
        for f in (mine, cl):
            if len(f):
                cuts += [f["start_ns"].to_numpy(np.int64), f["end_ns"].to_numpy(np.int64)]
        cut = np.unique(np.clip(np.concatenate(cuts), x0, x1))
        s, t = cut[:-1], cut[1:]
        mid = s + (t - s) // 2
        k = np.full(len(s), WORK, dtype=np.int8)
        if len(cl):
            k[_inside(busy_intervals(cl["start_ns"].to_numpy(np.int64), cl["end_ns"].to_numpy(np.int64)), mid)] = CUDA
        k[_inside(lt, mid)] = LATENCY
        k[_inside(p, mid)] = PEER
        # a polling loop: its checks between naps (at most READ_SLACK_NS, none an act) are the wait
        short = (t - s <= READ_SLACK_NS) & (k == WORK) & ~np.isin(s, my_acts) & ~np.isin(t, my_acts)
        k[1:-1][short[1:-1] & (k[:-2] == PEER) & (k[2:] == PEER)] = PEER
        lab = np.full(len(s), "", dtype=object)
        if len(mine):  # outer ranges first, so an inner one's label wins
            order = mine.sort_values(["start_ns", "end_ns"], ascending=[True, False])
            for rs, re_, name in zip(order["start_ns"].to_numpy(np.int64), order["end_ns"].to_numpy(np.int64),
                                     labels.loc[order.index].to_numpy()):
                lab[np.searchsorted(mid, rs, side="left"):np.searchsorted(mid, re_, side="left")] = name
        # adjacent segments of one kind and stage merge, except across an act (an edge's source)
        keep = np.r_[True, (k[1:] != k[:-1]) | ((lab[1:] != lab[:-1]) & (k[1:] != PEER)) | np.isin(s[1:], my_acts)]
        first = np.flatnonzero(keep)
        s, t = s[first], np.r_[s[first[1:]], t[-1]]
        k, lab = k[first], lab[first]
        lanes[g] = np.arange(n, n + len(s))
        lane_start[g] = x0
        starts.append(s), ends.append(t), kinds.append(k), stages.append(lab)
        n += len(s)

    gpu = _gpu_ops(rep, w0, w1, set(pid_of(np.array(list(lanes), dtype=np.int64))) if lanes else set())
    for pid, ops in gpu.items():
        lanes[-pid] = np.arange(n, n + len(ops))
        lane_start[-pid] = int(ops["start_ns"].min())
        starts.append(ops["start_ns"].to_numpy(np.int64)), ends.append(ops["end_ns"].to_numpy(np.int64))
        kinds.append(np.full(len(ops), GPU, dtype=np.int8)), stages.append(ops["name"].astype(str).to_numpy(object))
        n += len(ops)
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    start, end = cat(starts, np.int64), cat(ends, np.int64)
    kind, stage = cat(kinds, np.int8), cat(stages, object)
    cores = rep.meta.get("cpu_cores")
    cores = float(cores) if cores else None
    src, wake = _edges(rep, lanes, start, end, kind, acts, gpu, api)
    return RunGraph(window=(w0, w1), lanes=lanes, start_ns=start, end_ns=end, kind=kind, stage=stage,
                    demand_ns=_demand(start, end, kind, cores), src=src, wake_ns=wake, cores=cores,
                    lane_start_ns=lane_start, lane_src=_created(creates, lanes, lane_start, end, w0))


def _created(creates: pd.DataFrame, lanes, lane_start, end, w0: int) -> dict:
    """Per lane that a traced creation started in the window: (the creator's segment ending at the
    call's start, the delay from there to the lane's first instant). Calls and new threads of one
    process pair up in time order: each call starts the first thread not yet paired to begin after it."""
    out: dict = {}
    if not len(creates):
        return out
    threads = sorted((x0, g) for g, x0 in lane_start.items() if g >= 0 and x0 > w0)
    taken: set = set()
    for c in creates.sort_values("start_ns").itertuples():
        cs, u = int(c.start_ns), int(c.global_tid)
        if u not in lanes:
            continue
        pid = int(pid_of(np.array([u], dtype=np.int64))[0])
        for x0, g in threads:
            if g in taken or g == u or x0 < cs or int(pid_of(np.array([g], dtype=np.int64))[0]) != pid:
                continue
            ids = lanes[u]
            m = int(np.searchsorted(end[ids], cs, side="left"))
            if m < len(ids) and end[ids[m]] == cs:
                out[g] = (int(ids[m]), x0 - cs)
                taken.add(g)
            break
    return out


def _gpu_ops(rep, w0: int, w1: int, pids: set) -> dict[int, pd.DataFrame]:
    """Per process, its kernels and copies in the window as one lane: start_ns, end_ns, name,
    correlation_id, sorted; overlapping operations (streams at once) are merged into the earlier."""
    parts = []
    for f in (getattr(rep, "kernels", None), getattr(rep, "memcpy", None)):
        if f is not None and len(f) and {"pid", "correlation_id"} <= set(f.columns):
            parts.append(_clip(f, w0, w1)[["pid", "start_ns", "end_ns", "correlation_id"]].assign(
                name="copy" if f is getattr(rep, "memcpy", None) else "kernel"))
    if not parts:
        return {}
    ops = pd.concat(parts, ignore_index=True).sort_values(["start_ns", "end_ns"], kind="stable")
    out = {}
    for pid, d in ops.groupby("pid", sort=False):
        if int(pid) not in pids:
            continue
        d = d.reset_index(drop=True)
        # one lane: an operation that starts before the previous ends is clipped to start there
        prev_end = np.maximum.accumulate(d["end_ns"].to_numpy(np.int64))
        s = np.maximum(d["start_ns"].to_numpy(np.int64), np.r_[w0, prev_end[:-1]])
        keep = d["end_ns"].to_numpy(np.int64) > s
        out[int(pid)] = d.assign(start_ns=s)[keep].reset_index(drop=True)
    return out


def _demand(start, end, kind, cores) -> np.ndarray:
    """Each CPU segment's demand: its length at the share of a core it had (``cores`` over the
    segments on CPU at once, at most one), the recording's processor sharing read back."""
    dur = (end - start).astype(np.float64)
    cpu = (kind == WORK) | (kind == CUDA)
    out = np.where(cpu, dur, 0.0)
    if not cores or not cpu.any():
        return out
    s, e = start[cpu], end[cpu]
    bp = np.unique(np.r_[s, e])
    load = np.zeros(len(bp), dtype=np.int64)
    np.add.at(load, np.searchsorted(bp, s), 1)
    np.add.at(load, np.searchsorted(bp, e), -1)
    on = np.cumsum(load)[:-1]  # segments on CPU in [bp_i, bp_i+1)
    share = np.minimum(1.0, cores / np.maximum(on, 1))
    cum = np.r_[0.0, np.cumsum(share * np.diff(bp))]
    out[cpu] = np.interp(e, bp, cum) - np.interp(s, bp, cum)
    return out


def _edges(rep, lanes, start, end, kind, acts, gpu, api):
    """(src, wake_ns) per segment: a peer wait's releasing act (the segment of another lane ending
    at the last act inside it) and the wake-up after it; a GPU operation's launching call; a sync's
    or a blocking copy's last GPU operation of its process. -1 where none."""
    src = np.full(len(start), -1, dtype=np.int64)
    wake = np.zeros(len(start), dtype=np.int64)
    # an act at t on lane u is the end of u's segment ending at t
    ends_of = {u: (end[ids], ids) for u, ids in lanes.items() if u >= 0}
    if len(acts):
        at = acts[acts["global_tid"].isin(list(ends_of))]
        a_t, a_g = at["t_ns"].to_numpy(np.int64), at["global_tid"].to_numpy(np.int64)
        o = np.argsort(a_t, kind="stable")
        a_t, a_g = a_t[o], a_g[o]
    else:
        a_t = a_g = np.zeros(0, np.int64)
    gpu_end = {pid: (ops["end_ns"].to_numpy(np.int64), lanes[-pid]) for pid, ops in gpu.items()}
    for g, ids in lanes.items():
        if g < 0:
            continue
        pid = int(pid_of(np.array([g], dtype=np.int64))[0])
        waits = ids[kind[ids] == PEER]
        other = a_g != g
        o_t, o_g = a_t[other], a_g[other]
        # the peers this thread waits on: whose acts fall just before its waits' ends most often (a
        # woken thread returns within READ_SLACK_NS of its releaser's act; busy bystanders act inside
        # its waits too)
        score: dict[int, int] = {}
        for i in waits:
            lo, hi = np.searchsorted(o_t, max(start[i], end[i] - READ_SLACK_NS), side="left"), \
                np.searchsorted(o_t, end[i], side="right")
            for u in set(o_g[lo:hi].tolist()):
                score[u] = score.get(u, 0) + 1
        for i in waits:
            t0, t1 = start[i], end[i]
            hit = None
            if t1 - t0 < CriticalPath.HOP_NS:  # contention for a lock held for moments: no hand-off
                continue
            if pid in gpu_end:  # a sync or a blocking copy: the GPU's last operation ending inside it
                ge, gids = gpu_end[pid]
                j = int(np.searchsorted(ge, t1, side="right")) - 1
                if j >= 0 and ge[j] > t0:
                    hit = (int(gids[j]), t1 - ge[j])
            lo, hi = np.searchsorted(o_t, t0, side="right"), np.searchsorted(o_t, t1, side="right")
            if hi > lo:  # of the peers that acted inside the wait, the one it waits on most; its last act
                cand = o_g[lo:hi]
                u = max(set(cand.tolist()), key=lambda x: (score.get(x, 0), int(o_t[lo:hi][cand == x].max())))
                ta = int(o_t[lo:hi][cand == u].max())
                ue, uids = ends_of[u]
                m = int(np.searchsorted(ue, ta, side="left"))
                if m < len(ue) and ue[m] == ta and (hit is None or ta > end[hit[0]]):
                    hit = (int(uids[m]), t1 - ta)
            if hit is not None:
                src[i], wake[i] = hit
    if len(api) and gpu:  # each GPU operation waits for the call that launched it
        call = api[["global_tid", "correlation_id", "start_ns", "end_ns"]]
        for pid, ops in gpu.items():
            gids = lanes[-pid]
            mine = call[pid_of(call["global_tid"].to_numpy(np.int64)) == pid]
            by_corr = mine.drop_duplicates("correlation_id").set_index("correlation_id")
            hit = by_corr.reindex(ops["correlation_id"].to_numpy())
            for j, (g, cs) in enumerate(zip(hit["global_tid"].to_numpy(), hit["start_ns"].to_numpy())):
                if g != g or int(g) not in ends_of:
                    continue
                ue, uids = ends_of[int(g)]
                m = int(np.searchsorted(ue, int(cs), side="right"))  # the segment the call starts after
                if 0 < m <= len(ue):
                    prev = ops["end_ns"].iloc[j - 1] if j else start[gids[j]]
                    src[gids[j]] = int(uids[m - 1])
                    wake[gids[j]] = max(0, int(start[gids[j]]) - max(int(ue[m - 1]), int(prev)))
    return src, wake
