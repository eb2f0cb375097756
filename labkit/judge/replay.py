"""A discrete-event replay of the run graph (:mod:`labkit.judge.graph`): the run's length after a
change, and the prediction a change makes.

Each lane runs its segments in order from its recorded first instant. A ``work`` or ``cuda`` segment
needs its CPU demand served; the segments on CPU at once share the cores (processor sharing: each
runs at ``min(1, cores / on CPU)``), which is how the demand was read from the recording, so the
replay with no change lasts what the run lasted. A ``latency`` segment lasts its (scaled) length. A
``peer`` wait with a source ends at the later of its own start and its source's end plus its
recorded wake-up (none if the source ended before the wait began); without one it keeps its length.
A GPU operation starts after the lane's previous one and its launching call's segment, plus its
recorded gap. Events (a segment's end, a wait's release) come off a priority queue (heapq).

A :class:`Lever` is a change to the graph: segments of some stages (on some lanes, of some kinds)
scaled by a factor or removed (factor 0), latency overlapped ``in_flight`` ways, a sync removed (its
waits on the GPU no longer wait), more cores. :func:`predict` replays the lever and says recorded
length over replayed length, with a range from the run's own variation (the same prediction over runs
drawn from this one, each segment's length drawn from those of its stage: a bootstrap).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from labkit.judge.graph import CUDA, GPU, LATENCY, PEER, WORK, RunGraph

__all__ = ["Lever", "Prediction", "replay", "predict", "what_if"]


@dataclass(frozen=True)
class Lever:
    """A change to the run graph.

    ``stages``: the stage labels whose segments ``factor`` scales (0: removed); ``kinds``: which of
    their segments (default ``work`` and ``cuda``: the stage's own time; ``latency`` too for an
    overlap); ``lanes``: only these lanes (default all); ``in_flight``: the latency segments of
    ``stages`` (all, where none named) overlapped this many ways (each takes 1/N of its length);
    ``remove_sync``: a thread's waits on the GPU end when their own start does (the GPU still
    runs its work in order); ``cores``: the usable cores instead of the recorded ones.
    """

    stages: tuple[str, ...] = ()
    factor: float = 1.0
    kinds: tuple[str, ...] = ("work", "cuda")
    lanes: tuple[int, ...] = ()
    in_flight: int = 1
    remove_sync: bool = False
    cores: float | None = None


@dataclass
class Prediction:
    """A lever's replayed prediction: ``speedup`` (recorded over replayed length), ``low`` and ``high``
    (from the spread of the segments it scales), the lengths (ms) and the lever."""

    speedup: float
    low: float
    high: float
    recorded_ms: float
    replayed_ms: float
    lever: Lever = field(default_factory=Lever)


_KIND = {"work": WORK, "cuda": CUDA, "peer": PEER, "latency": LATENCY, "gpu": GPU}


def _scale(graph: RunGraph, lever: Lever, dur: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(CPU demand, length) per segment after ``lever``; ``dur``: the lengths to start from."""
    dur = (graph.end_ns - graph.start_ns).astype(np.float64) if dur is None else dur.astype(np.float64)
    rec = (graph.end_ns - graph.start_ns).astype(np.float64)
    share = np.divide(graph.demand_ns, rec, out=np.ones_like(rec), where=rec > 0)
    demand = dur * share
    mask = np.ones(len(dur), dtype=bool)
    if lever.lanes:
        on = np.zeros(len(dur), dtype=bool)
        for u in lever.lanes:
            on[graph.lanes.get(int(u), np.zeros(0, np.int64))] = True
        mask &= on
    in_stage = np.isin(graph.stage, list(lever.stages)) if lever.stages else np.ones(len(dur), dtype=bool)
    if lever.stages and lever.factor != 1.0:
        # with its own time go its moments of contention inside it (short waits with no hand-off)
        hit = mask & in_stage & (np.isin(graph.kind, [_KIND[k] for k in lever.kinds])
                                 | ((graph.kind == PEER) & (graph.src < 0) & ("work" in lever.kinds)))
        dur = np.where(hit, dur * lever.factor, dur)
        demand = np.where(hit, demand * lever.factor, demand)
    if lever.in_flight > 1:
        hit = mask & in_stage & (graph.kind == LATENCY)
        dur = np.where(hit, dur / lever.in_flight, dur)
    return demand, dur


def replay(graph: RunGraph, lever: Lever | None = None, *, dur: np.ndarray | None = None) -> float:
    """The replayed run's length (ns, from the window's start to its last segment's end) after
    ``lever`` (none: the recorded graph); ``dur``: segment lengths to replay instead of the recorded."""
    lever = lever or Lever()
    demand, length = _scale(graph, lever, dur)
    cores = lever.cores if lever.cores is not None else graph.cores
    kind, src, wake = graph.kind, graph.src, graph.wake_ns
    if lever.remove_sync:  # waits on the GPU no longer wait: their source is a GPU lane's segment
        gpu_src = (kind == PEER) & (src >= 0)
        gpu_src[gpu_src] = kind[src[gpu_src]] == GPU
        src = np.where(gpu_src, -1, src)
        length = np.where(gpu_src, 0.0, length)
    lanes = list(graph.lanes.values())
    keys = list(graph.lanes)
    end = np.full(len(kind), np.nan)
    pos = [0] * len(lanes)
    heap: list = []  # (time, seq, lane, segment): a delay's end or a lane's start
    seq = 0
    waiters: dict[int, list[tuple[int, float]]] = {}  # source segment -> (lane, wait start)
    active: dict[int, float] = {}  # lane -> remaining CPU demand of its segment
    prev_gpu_end = {}
    w0 = float(graph.window[0])
    created = graph.lane_src or {}
    for li, key in enumerate(graph.lanes):
        if not len(lanes[li]):
            continue
        if key in created:  # started by its creator's call: when the creator gets there
            waiters.setdefault(created[key][0], []).append((li, -1.0))
            continue
        heapq.heappush(heap, (float(graph.lane_start_ns[key]), seq, li, -1))
        seq += 1
    now = w0

    def begin(li: int, t: float) -> None:
        """Start lane ``li``'s next segment at ``t``."""
        nonlocal seq
        ids = lanes[li]
        if pos[li] >= len(ids):
            return
        i = int(ids[pos[li]])
        k = kind[i]
        if k == WORK or k == CUDA:
            active[li] = demand[i]
            if demand[i] <= 0:
                active.pop(li)
                heapq.heappush(heap, (t, seq, li, i))
                seq += 1
            return
        if k == GPU:
            ready = max(t, prev_gpu_end.get(li, t))
            s = src[i]
            if s >= 0:
                if np.isnan(end[s]):
                    waiters.setdefault(int(s), []).append((li, t))
                    return
                ready = max(ready, end[s]) + wake[i]
            else:
                ready = max(ready, float(graph.start_ns[i]))
            heapq.heappush(heap, (ready + length[i], seq, li, i))
            seq += 1
            return
        if k == PEER and src[i] >= 0:
            s = int(src[i])
            if np.isnan(end[s]):
                waiters.setdefault(s, []).append((li, t))
                return
            heapq.heappush(heap, (max(t, end[s] + wake[i]), seq, li, i))
        else:
            heapq.heappush(heap, (t + length[i], seq, li, i))
        seq += 1

    def finish(li: int, i: int, t: float) -> None:
        """Segment ``i`` of lane ``li`` ends at ``t``: release its waiters, go on with the lane."""
        nonlocal seq
        end[i] = t
        if kind[i] == GPU:
            prev_gpu_end[li] = t
        pos[li] += 1
        for wl, ws in waiters.pop(i, ()):
            if ws < 0:  # a lane this segment's end created
                heapq.heappush(heap, (t + created[keys[wl]][1], seq, wl, -1))
                seq += 1
                continue
            j = int(lanes[wl][pos[wl]])
            if kind[j] == GPU:
                ready = max(ws, prev_gpu_end.get(wl, ws), t) + wake[j]
                heapq.heappush(heap, (ready + length[j], seq, wl, j))
            else:
                heapq.heappush(heap, (max(ws, t + wake[j]), seq, wl, j))
            seq += 1
        begin(li, t)

    while heap or active:
        rate = min(1.0, cores / len(active)) if (active and cores) else 1.0
        t_cpu = now + min(active.values()) / rate if active else np.inf
        t_next = heap[0][0] if heap else np.inf
        t = min(t_cpu, t_next)
        if active:
            served = (t - now) * rate
            for li in active:
                active[li] -= served
        # ns since the epoch carry about 1e-5 ns of float precision: a remainder below what a step
        # can serve is done (at least the one that set this step)
        first = t == t_cpu
        now = t
        done = [li for li, r in active.items() if r <= 1e-3]
        if first and not done:
            done = [min(active, key=active.get)]
        for li in done:
            del active[li]
            finish(li, int(lanes[li][pos[li]]), now)
        while heap and heap[0][0] <= now:
            _, _, li, i = heapq.heappop(heap)
            if i < 0:
                begin(li, now)
            else:
                finish(li, i, now)
    if np.isnan(end).any():  # a wait whose source never ran: the graph is not causal
        raise RuntimeError("replay left segments unfinished: a wait's source never ran")
    return float(np.max(end) - w0) if len(end) else 0.0


BOOTSTRAP = 20
"""Resamples of the run behind a prediction's range (:func:`predict`); 5 for graphs of more than
:data:`BOOTSTRAP_BIG` segments, whose replays take a second each."""
BOOTSTRAP_BIG = 20_000


def _resampled(graph: RunGraph, rng: np.random.Generator) -> np.ndarray:
    """Segment lengths drawn again, with replacement, from those of their own stage and kind (the
    segments whose length the replay keeps: CPU work, CUDA calls, latency, GPU operations, waits
    without a source); a wait with a source keeps what its source makes of it."""
    d = (graph.end_ns - graph.start_ns).astype(np.float64)
    free = np.isin(graph.kind, [WORK, CUDA, LATENCY, GPU]) | ((graph.kind == PEER) & (graph.src < 0))
    idx = np.flatnonzero(free)
    key = pd.Series(graph.kind[idx].astype(str)) + "\0" + pd.Series(graph.stage[idx].astype(str))
    for rows in key.groupby(key, sort=False).indices.values():
        at = idx[rows]
        d[at] = rng.choice(d[at], size=len(at), replace=True)
    return d


def predict(graph: RunGraph, lever: Lever, *, seed: int = 0) -> Prediction:
    """``lever``'s prediction: recorded length over the replayed length, with its range from the run's
    own variation: the 25th to the 75th percentile of the same prediction over :data:`BOOTSTRAP` runs
    drawn from this one (each segment's length drawn from those of its stage and kind,
    :func:`_resampled`), widened to hold the prediction itself; ``seed`` fixes the draws."""
    base = replay(graph)
    after = replay(graph, lever)
    speed = base / after if after > 0 else float("inf")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(BOOTSTRAP if len(graph.kind) <= BOOTSTRAP_BIG else 5):
        d = _resampled(graph, rng)
        b, a = replay(graph, dur=d), replay(graph, lever, dur=d)
        out.append(b / a if a > 0 else float("inf"))
    lo, hi = (np.percentile(out, [25, 75]) if out else (speed, speed))
    return Prediction(speedup=speed, low=float(min(lo, speed)), high=float(max(hi, speed)),
                      recorded_ms=graph.length_ns / 1e6, replayed_ms=after / 1e6, lever=lever)


def lever_for(rep, graph: RunGraph, finding: dict, *, skip_every: int | None = None) -> Lever | None:
    """The graph change that a finding of ``labkit.advise`` (a row, as a dict) names, or None where the
    replay has no lever for it yet (batching calls, CUDA graphs, overlapping stages on new threads,
    releasing a lock): a cheaper stage (``cheaper_stage``: the stage's own time removed, the finding's
    "costs nothing"), a removed stage (``remove_stage``), the stage run every ``skip_every``-th item
    (``skip_work``), its latency overlapped :data:`labkit.judge.whatif.IN_FLIGHT` ways
    (``parallel_input``, ``in_flight``; every latency segment where the finding names no stage), a
    sync removed (``remove_sync``), pinned copies (``pin_memory``: the window's pageable copies at the
    pinned rate the ``pageable`` rule assumes, :func:`labkit.judge.gpu_rules._pinned_gbps`)."""
    lever, stage = finding.get("lever"), finding.get("stage")
    stage = str(stage) if stage is not None and stage == stage and stage != "" else None
    if lever in ("cheaper_stage", "remove_stage") and stage:
        return Lever(stages=(stage,), factor=0.0)
    if lever == "skip_work" and stage and skip_every and skip_every > 1:
        return Lever(stages=(stage,), factor=1.0 / skip_every)
    if lever in ("parallel_input", "in_flight"):
        from labkit.judge.whatif import IN_FLIGHT

        return Lever(stages=(stage,) if stage else (), in_flight=IN_FLIGHT)
    if lever == "remove_sync":
        return Lever(remove_sync=True)
    if lever == "pin_memory":
        from types import SimpleNamespace

        from labkit.judge.gpu_rules import _pinned_gbps

        m = rep.memcpy
        w0, w1 = graph.window
        m = m[(m["start_ns"] >= w0) & (m["end_ns"] <= w1)] if len(m) else m
        paged = m[m["pageable"]] if len(m) else m
        busy = float(paged["duration_ns"].sum()) if len(paged) else 0.0
        if busy <= 0:
            return None
        pinned_ns = float(paged["bytes"].sum()) / _pinned_gbps(SimpleNamespace(rep=rep), m[m["pinned"]])[0]  # B / (B/ns)
        return Lever(stages=("copy",), kinds=("gpu",), factor=min(pinned_ns / busy, 1.0))
    return None


def what_if(report, stages, factor: float, *, factor_range: tuple[float, float] | None = None,
            window: tuple[int, int] | None = None, seed: int = 0) -> Prediction:
    """The run's speed-up if the own time of ``stages`` (NVTX range names or ``domain:name`` labels)
    were ``factor`` times what it was (0.5: twice as fast; 0: free), by replaying the report's run
    graph with that change (:func:`predict`): a factor measured elsewhere (the stage alone under a
    new backend, precision or layout) becomes the whole run's figure, with the stages' waits, the
    other threads and the cores as they were.

    ``factor_range``: the factor's own interval (low, high); the prediction's ``low`` and ``high``
    then hold the replays at both ends too, beside the run's own variation. ``window``: the window
    replayed (``advise(...).attrs["window"]`` to match a judgement); default the steady window past
    start-up (:func:`labkit.judge.accounting.chosen_window`), else the whole trace. It assumes the
    stages' time in the run scales as the factor does: their waits on other threads do not.
    Raises ValueError for a negative factor or no stage."""
    from labkit.judge.accounting import chosen_window
    from labkit.judge.graph import run_graph
    from labkit.stats.stages import trace_span

    names = (stages,) if isinstance(stages, str) else tuple(stages)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError("what_if needs the stage names whose time changes, e.g. ('infer',)")
    if not (isinstance(factor, (int, float)) and factor >= 0):
        raise ValueError(f"what_if: factor={factor!r}: give the stage's new time over its old, 0 or more")
    if window is None:
        window, _ = chosen_window(report)
    graph = run_graph(report, window if window is not None else trace_span(report))
    known = set(np.unique(graph.stage))
    missing = [n for n in names if n not in known]
    if len(missing) == len(names):
        raise ValueError(f"what_if: no segment of {', '.join(map(repr, names))} in the window "
                         f"(its stages: {', '.join(sorted(s for s in known if s)) or 'none'})")
    p = predict(graph, Lever(stages=names, factor=float(factor)), seed=seed)
    if factor_range is not None:
        lo_f, hi_f = sorted(float(f) for f in factor_range)
        base = replay(graph)
        ends = [base / replay(graph, Lever(stages=names, factor=max(f, 0.0))) for f in (hi_f, lo_f)]
        p.low, p.high = min(p.low, ends[0]), max(p.high, ends[1])
    return p
