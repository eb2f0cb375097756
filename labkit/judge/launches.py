"""What fewer launches leave of a run: the what-if model behind the batching and CUDA-graph findings
of :func:`labkit.advise`.

On the host. A step (an outermost stage range on the thread that launched most) that holds many
launches pays, per launch, the launch call and the framework's work around it (Python, the
dispatcher): the typical distance from one launch call's start to the next's. What the step does
before its first launch and after its last stays, as do pauses between launches more than
:data:`PAUSE` typical ones long (other work), with two exceptions where the steps are a burst of
launches (they fill at least :data:`BURST` of them):

- the cold start after a burst. From one step's last launch to the next step's first (a *boundary*:
  the tail, the time between steps, the head) the typical boundary's time beyond one typical launch
  goes with the launches, up to :data:`PAUSE` - 1 typical launches a boundary. In traces of steps of
  one-kernel adds on an H200 (2026-11-29) that time grew with the launches a step held: a boundary
  took 11, 40 and 74 us with 50, 500 and 2,000 adds a step and 12 us once they were one (also with CUDA untraced, and on a CPU: the code at a step's edges runs
  cold after a burst);
- interruptions. Pauses (inside steps, or a boundary more than :data:`PAUSE` typical launches and
  twice the typical one long) in fewer than :data:`RARE` of the steps, where the thread traced
  nothing of its own (no CUDA call but the launches' own, no OS runtime call, no NVTX event but the
  loop's), are the OS's, a collector's or the profiler's: they keep their share of the thread's time
  rather than their time. Work that recurs that rarely and traces nothing would be taken for one.

With each step's launches of one kernel at one launch shape merged into one (``batch``: copies of one
operation on like-sized data, as a batch makes them; a network's layers, each its own shape, stay
apart), a step keeps that work and pays one launch per kernel and shape; replayed as one CUDA graph
(``cuda_graphs``), it pays one launch in all.

On the GPU. A graph's kernels keep their times. A merged kernel runs its parts' threads together, in
as many waves of the device as they fill (SMs x warps per SM x threads per warp, from the report's
``TARGET_INFO_GPU``), each wave as long as the longest part's, where the parts are shorter than
:data:`TINY_KERNEL_US` (their time is the kernel's fixed cost); longer kernels keep their times, and
so do all where the report gives no device size. Thread slots are an upper count: registers and
shared memory can leave fewer, and a merged kernel that streams more bytes takes longer.

In a trace of steps of one-kernel adds of 1,024 floats (an H200, 2026-11-29) the merged kernel is
modelled at 0.90 us a step (one wave, as long as the longest add); the fix's own kernel, the same adds as
one launch, ran 1.41 us in the same trace (its 4 MB take time a wave of fixed cost does not show). The run
stays host-bound either way. Batching is estimated at 314x with 500 adds a step (346x measured; 255x in a
second call) and 31x with 50 (29x); keeping the boundaries and the three pauses of the 500-add trace as
recorded, it had been 128x. The estimate reads the profiled run: the profiler's own cost a launch is
not taken out (16 us from one launch to the next traced, 8 to 10 us in the plain runs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.report.cpu import osrt_calls
from labkit.stats import idle
from labkit.stats.stages import stage_labels

TINY_KERNEL_US = 20.0
"""A kernel shorter than this is mostly its fixed cost (a launch call alone took 11 us on the H100
fixture): many of them idle the GPU, and merged, their work takes about one of them."""
PAUSE = 4.0
"""A distance between two launches more than this many typical ones is other work, kept."""
MIN_LAUNCHES = 2
"""A step with fewer launches has nothing to merge."""
BURST = 0.5
"""Steps whose launches, one after another, fill at least this share of them are bursts of launches."""
RARE = 0.2
"""Pauses in fewer than this share of the steps of a burst, with nothing traced in them, are interruptions."""


@dataclass(frozen=True)
class Launches:
    """The launching thread's steps and what they would take with fewer launches (ms, in the window)."""
    global_tid: int
    steps: int
    launches: int
    now_ms: float        # the steps' time as measured
    merged_ms: float     # with each step's launches of one kernel at one shape merged into one
    graphed_ms: float    # with each step's launches replayed as one graph
    between_ms: float    # the time between steps that goes with the launches (cold starts, interruptions)
    cold_ms: float       # the cold start after a burst the steps' boundaries lose, between steps or not
    interrupted_ms: float  # the pauses taken for interruptions, which keep their share of the time (0: none)
    per_launch_us: float  # the typical launch: its call and the framework's work around it
    gpu_now_ms: float    # the kernels' summed time in the window
    gpu_merged_ms: float  # the same with each step's launches of one kernel at one shape merged
    waves: str           # how a merged kernel is costed, in words


def _capacity(gpu: pd.DataFrame) -> dict[int, tuple[int, str]]:
    """device id -> (threads the device runs at once, its name)."""
    need = {"device_id", "sm_count", "max_warps_per_sm", "threads_per_warp"}
    if not len(gpu) or not need <= set(gpu.columns):
        return {}
    num = gpu[list(need)].apply(pd.to_numeric, errors="coerce")  # a report's fields may be empty
    n = num["sm_count"] * num["max_warps_per_sm"] * num["threads_per_warp"]
    ok = n.notna() & (n > 0) & num["device_id"].notna()
    names = gpu["name"].astype(str) if "name" in gpu else pd.Series("the GPU", index=gpu.index)
    return {int(d): (int(t), nm) for d, t, nm in zip(num.loc[ok, "device_id"], n[ok], names[ok])}


SHAPE = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
"""A kernel's launch shape: the launches of one kernel at one shape in a step are the copies of one
operation a batch merges (a network's layers, each its own shape, are not)."""


def _groups(k: pd.DataFrame) -> list[str]:
    """The columns that tell one batchable operation from another: the name and, where the report
    has it, the launch shape."""
    return ["name"] + [c for c in SHAPE if c in k.columns]


def _merged_kernels(k: pd.DataFrame, cap: dict[int, tuple[int, str]]) -> tuple[float, str]:
    """(ms, how) the kernels ``k`` (with a ``step`` column) take with each step's launches of one
    kernel at one shape merged into one: their threads in as many device waves as they fill, each
    wave as long as the longest part's (a part's time over its own waves); never more than the parts
    took apart."""
    if not len(k):
        return 0.0, ""
    if not cap or not set(SHAPE) <= set(k.columns):
        return float(k["duration_ns"].sum()) / 1e6, "the kernels keep their times (this report gives no device size)"
    threads = k[SHAPE].astype("float64").fillna(1.0).clip(lower=1.0).prod(axis=1)
    first = next(iter(cap.values()))[0]
    size = k["device_id"].map(lambda d: cap.get(int(d), (first,))[0] if pd.notna(d) else first).astype("float64")
    own = np.ceil(threads / size).clip(lower=1.0)
    g = k.assign(ns=k["duration_ns"].astype("float64"), wave_ns=k["duration_ns"] / own, threads=threads,
                 size=size).groupby(["step"] + _groups(k), sort=False, dropna=False)
    parts = g.agg(ns=("ns", "sum"), wave_ns=("wave_ns", "max"), threads=("threads", "sum"), size=("size", "first"))
    merged = np.minimum(parts["wave_ns"] * np.ceil(parts["threads"] / parts["size"]).clip(lower=1.0), parts["ns"])
    merged = merged.where(parts["wave_ns"] < TINY_KERNEL_US * 1e3, parts["ns"])  # longer kernels: work, kept
    dev = next(iter(cap.values()))
    how = (f"a merged kernel runs its parts' threads in as many waves as they fill ({dev[1]}: {dev[0]:,} threads "
           f"at once), each as long as its longest part's (parts under {TINY_KERNEL_US:g} us: their time is fixed cost; "
           "one that streams more bytes takes longer); longer kernels keep their times")
    return float(merged.sum()) / 1e6, how


def _boundaries(st, en, lo, hi, head, tail, per: float):
    """A step's boundary runs from the previous step's last launch to its own first: that step's tail,
    the time between the two and its own head (the first step has none; nor has a step where a launch
    of the thread lies between the two). Per step: the boundary's cold part and its pause (see
    :func:`launch_steps`), and the share of it inside the steps (their edges)."""
    n = len(lo)
    b, ok, edges = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n)
    if n > 1:
        b[1:] = (st[lo[1:]] - en[hi[:-1] - 1]).astype("float64")
        ok[1:] = (lo[1:] == hi[:-1]) & (b[1:] > 0)
        edges[1:] = tail[:-1] + head[1:]
    if not ok.any():
        return np.zeros(n), np.zeros(n), np.ones(n)
    typical = float(np.median(b[ok]))
    cold = np.where(ok, np.minimum(np.clip(typical - per, 0.0, (PAUSE - 1) * per), np.clip(b - per, 0.0, None)), 0.0)
    pause = np.where(ok & (b > PAUSE * per) & (b > 2 * typical), b - typical, 0.0)
    within = np.divide(np.minimum(edges, b), b, out=np.ones(n), where=ok)
    return cold, pause, within


def _quiet(rep, mine: pd.DataFrame, span: tuple[int, int], x0: np.ndarray, x1: np.ndarray, steps: int) -> bool:
    """Whether the thread that made the launches ``mine`` traced nothing of its own in any of the
    intervals ``[x0, x1)``: no CUDA call, OS runtime call or NVTX range or mark, but the loop's: its
    launches, what is called at least once every other launch (``cuKernelGetName`` with each of
    PyTorch's) and the NVTX events named as one at least every other step (the steps, a count mark in
    each), counted over the ``steps`` steps' ``span``."""
    lo, hi = span
    gtid = int(mine["global_tid"].iloc[0])
    api = rep.cuda_api
    api = api[(api["global_tid"] == gtid) & (api["end_ns"] > lo) & (api["start_ns"] < hi) & ~api.index.isin(mine.index)]
    launched = int(((mine["end_ns"] > lo) & (mine["start_ns"] < hi)).sum())
    calls = [api[api["name"].map(api["name"].value_counts()) < 0.5 * launched]]
    if len(rep.osrt):
        os_ = osrt_calls(rep.osrt)
        calls.append(os_[os_["global_tid"] == gtid])
    for c in calls:
        held = idle.busy_intervals(c["start_ns"].to_numpy(), c["end_ns"].to_numpy())
        if (idle.covered_before(held, x1) > idle.covered_before(held, x0)).any():
            return False
    nv = rep.nvtx
    nv = nv[(nv["global_tid"] == gtid) & (nv["start_ns"] >= lo) & (nv["start_ns"] <= hi)]
    begun = np.sort(nv.loc[nv["name"].map(nv["name"].value_counts()) < 0.5 * steps, "start_ns"].to_numpy())
    return not (np.searchsorted(begun, x1, side="left") > np.searchsorted(begun, x0, side="left")).any()


def launch_steps(rep, window: tuple[int, int], stages) -> Launches | None:
    """The what-if of fewer launches for the thread that launched most in ``window``, over its
    ``stages``' ranges that hold launches; None where no step holds :data:`MIN_LAUNCHES`."""
    w0, w1 = window
    calls = idle.launch_calls(rep)
    if not len(calls) or not len(rep.nvtx) or not stages:
        return None
    calls = calls[(calls["start_ns"] >= w0) & (calls["end_ns"] <= w1)]
    if not len(calls):
        return None
    gtid = int(calls["global_tid"].value_counts().idxmax())
    mine = calls[calls["global_tid"] == gtid].sort_values("start_ns")
    nv = rep.nvtx
    named = nv["name"].isin(list(stages)) | stage_labels(nv).isin(list(stages))  # names or domain:name labels
    r = nv[(nv["global_tid"] == gtid) & (nv["kind"] != "mark") & named
           & (nv["start_ns"] >= w0) & (nv["end_ns"] <= w1)].sort_values("start_ns")
    if not len(r):
        return None
    # a step is an outermost stage range (a nested stage's launches count once, in its parent)
    s, e = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    outer = np.ones(len(r), dtype=bool)
    outer[1:] = s[1:] >= np.maximum.accumulate(e)[:-1]
    s, e = s[outer], e[outer]
    st, en = mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy()
    lo, hi = np.searchsorted(st, s, side="left"), np.searchsorted(st, e, side="left")
    full = (hi - lo) >= MIN_LAUNCHES
    if not full.any():
        return None
    s, e, lo, hi = s[full], e[full], lo[full], hi[full]
    step = np.full(len(st), -1, dtype=np.int64)  # each launch's step, -1 outside every step
    for i, (a, b) in enumerate(zip(lo, hi)):
        step[a:b] = i
    gaps = np.diff(st)
    inner = step[1:] >= 0
    inner &= step[1:] == step[:-1]  # the distances between launches of one step
    per = float(np.median(gaps[inner]))
    call = float(np.median(en - st))
    # a pause several typical launches long is other work: it stays, less the launch it holds
    long = inner & (gaps > PAUSE * per)
    kept = np.bincount(step[1:][long], weights=gaps[long] - per, minlength=len(s))
    head, tail = (st[lo] - s).astype("float64"), np.maximum(e - en[hi - 1], 0).astype("float64")
    cold, pause, within = _boundaries(st, en, lo, hi, head, tail, per)
    share = interrupted = 0.0
    burst = float(gaps[inner & ~long].sum()) >= BURST * float((e - s).sum())
    if not burst:  # launches among other work: no cold start, and a pause is that work
        cold, pause = np.zeros(len(s)), np.zeros(len(s))
    paused = (np.bincount(step[1:][long], minlength=len(s)) > 0) | (pause > 0)
    if burst and 0 < paused.sum() < RARE * len(s):
        at = np.flatnonzero(pause > 0)
        x0 = np.r_[en[:-1][long], en[hi[at - 1] - 1]]
        x1 = np.r_[st[1:][long], st[lo[at]]]
        if _quiet(rep, mine, (s[0], e[-1]), x0, x1, len(s)):  # interruptions: they keep their share of the time
            interrupted = float(kept.sum() + pause.sum())
            share = interrupted / float(e[-1] - s[0])
            kept = np.zeros(len(s))
    off = cold + (pause if share > 0 else 0.0)
    fixed = head + tail + kept
    off_in, off_out = float((off * within).sum()), float((off * (1 - within)).sum())
    k = rep.kernels
    kw = k[(k["start_ns"] >= w0) & (k["start_ns"] <= w1)] if len(k) else k
    gpu_now = float(kw["duration_ns"].sum()) / 1e6 if len(kw) else 0.0
    ops = np.ones(len(s))  # launches a step pays once merged: one a kernel and shape
    gpu_merged, how = gpu_now, "the kernels keep their times"
    if len(kw):
        ids = pd.DataFrame({"pid": mine["pid"].to_numpy(), "correlation_id": mine["correlation_id"].to_numpy(),
                            "step": step})
        ids = ids[ids["step"] >= 0]
        kk = kw.merge(ids, how="left", on=["pid", "correlation_id"])
        ours = kk[kk["step"].notna()].astype({"step": "int64"})
        if len(ours):
            n = ours.drop_duplicates(["step"] + _groups(ours)).groupby("step").size()
            ops[n.index.to_numpy()] = n.to_numpy()
        gpu_merged, how = _merged_kernels(ours, _capacity(rep.gpu))
        gpu_merged += float(kk.loc[kk["step"].isna(), "duration_ns"].sum()) / 1e6
    dur = (e - s).astype("float64")
    # a step's first and last launch already carry one launch's framework work in `fixed`
    merged = np.minimum(fixed + call + (ops - 1) * per, dur)
    graphed = np.minimum(fixed + call, dur)
    steps, launches, now = len(s), int((hi - lo).sum()), float(dur.sum())
    # what goes of the boundaries comes off the steps' edges and the time between them, in proportion (a
    # step keeps at least its launches); interruptions keep their share of what is left
    between = float(s[1:].sum() - e[:-1].sum()) if len(s) > 1 else 0.0
    left = between - off_out
    merged = max(float(merged.sum()) - off_in, steps * call)
    graphed = max(float(graphed.sum()) - off_in, steps * call)
    merged += share / (1 - share) * (merged + left) if share < 1 else 0.0
    graphed += share / (1 - share) * (graphed + left) if share < 1 else 0.0
    return Launches(global_tid=gtid, steps=steps, launches=launches, now_ms=now / 1e6, merged_ms=merged / 1e6,
                    graphed_ms=graphed / 1e6, between_ms=off_out / 1e6, cold_ms=float(cold.sum()) / 1e6,
                    interrupted_ms=interrupted / 1e6, per_launch_us=per / 1e3, gpu_now_ms=gpu_now,
                    gpu_merged_ms=gpu_merged, waves=how or "the kernels keep their times")


def speedup(window_ms: float, thread_ms: float, others_ms: float, gpu_ms: float) -> float:
    """The window over the largest of what is left: the launching thread, the others, the SMs."""
    floor = max(thread_ms, others_ms, gpu_ms)
    return window_ms / floor if floor > 0 else math.inf
