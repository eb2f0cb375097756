"""The evidence :func:`labkit.advise` reasons on, the levers it may name, and how a finding row
is written. Levers are in general words only: a program's own switches (command-line flags) are
its authors' business (the lab's ``labbook`` maps these ids to its application's flags).

The model behind a prediction. A run takes at least as long as any one of its threads' own
remaining work, and no less than its kernels keep the SMs busy. A finding that removes time a
thread spent waiting (in a sync, a blocking copy, a launch) predicts wall over the larger of that
thread's span minus the time removed and the SMs' busy time: a true upper bound ("bound") under
the assumption that everything else keeps its measured time. That assumption fails where more
threads were ready to run than the machine had cores (their times then include waits for a core,
which a change that frees one takes away too): there a bound becomes an estimate
(:attr:`labkit.judge.accounting.Accounting.oversubscribed_ms`). Findings about stages move stage
time between threads or remove it; stage times were measured under the run's own contention for
cores and change when the run changes, so those predictions are estimates ("estimate").
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from labkit.judge import bottleneck as bn
from labkit.judge.launches import Launches, launch_steps
from labkit.judge.whatif import WhatIf
from labkit.stats.stages import stage_labels, stage_table, trace_span
from labkit.stats import idle

LEVERS = {
    "pin_memory": "pin (page-lock) the host memory that copies read or write, so they run asynchronously",
    "remove_sync": "remove a per-step synchronization (keep results on the GPU until they are needed)",
    "batch": "batch more work per call: fewer, larger launches",
    "cuda_graphs": "capture the launches in CUDA graphs (one launch replays a whole step)",
    "compile": "compile or fuse the model, or use a faster inference runtime",
    "overlap_copies": "overlap copies with compute (asynchronous copies on their own stream)",
    "overlap_stages": "overlap stages in threads (each stage on its own thread, queues between them)",
    "reduce_precision": "lower the precision: FP16/BF16/INT8",
    "gpu_offload": "move the stage's work to the GPU",
    "parallel_input": "read and decode several inputs in parallel, or use a hardware decoder",
    "skip_work": "run the stage on fewer items (e.g. every K-th)",
    "remove_stage": "drop a stage the output does not need",
    "cheaper_stage": "make the stage itself cheaper (a faster algorithm, library or device)",
    "release_lock": "let the threads run at once: processes for pure-Python work (Python's GIL), code that "
                    "releases the GIL (NumPy, C), or a lock of your own held for less",
    "in_flight": "run several items at once (a pool of threads or processes, asynchronous calls) instead of "
                 "starting one worker per item and waiting for it",
}
"""Lever id -> what the lever does, in general words (the contract with a program's own mapping)."""

ADVICE_COLUMNS = ["finding", "evidence", "lever", "lever_text", "predicted_speedup", "basis", "assumptions", "rule",
                  "stage", "saves_ms", "window_ms"]

# Thresholds. Each is the point past which the finding is worth a step.
MIN_GAIN = 1.05  # the CPU baseline's spread over 3 repeats was 3.9 % (ledger.reference.jsonl): below, noise
DOMINANT_SHARE = 0.5  # one stage over half the stage time: no lever on the others can reach 2x
LOW_GPU_BUSY = 0.5  # the SMs idle more than they work (nsys analyze's low-utilization rule)
IDLE_GAP_MS = 1.0  # gaps shorter than this are launch latency, not starvation
MANY_KERNELS_PER_BATCH = 20  # with fewer launches per batch their cost is small against a stage
MANY_KERNELS = 1000  # without batches: this many tiny kernels make launch cost worth a look
CHAIN_THREADS = 4
"""A chain of hand-offs: at least this many short-lived threads (each alive under half the window: a
thread or process per item) on the critical path, holding most of it."""
UNDERFILL = 0.9  # fill under 90 %: more than the last partial batch of a short clip
DECODE_BOUND = 0.8  # at 80 % of the input-only rate the other stages have 1.25x left at most
SKIP_EVERY = 3  # the K of the skip-work lever's estimate (1 item in K)
TURNS_SHARE = 0.2  # a thread that takes turns: own time and waits on peers inside its stages both over a fifth
ONE_AT_A_TIME = (0.8, 1.15)  # the threads' own times summed, over the window: they worked one at a time


def row(rule: str, finding: str, evidence: str, lever: str, predicted: float, basis: str, assumptions: str,
        stage: str | None = None) -> dict:
    assert lever in LEVERS, lever
    return {"finding": finding, "evidence": evidence, "lever": lever, "lever_text": LEVERS[lever],
            "predicted_speedup": float(predicted), "basis": basis, "assumptions": assumptions, "rule": rule,
            "stage": stage}


class Evidence:
    """What every rule reads, computed once: the window, the stages' per-thread load, SM and copy
    busy time, the CUDA calls inside the window."""

    def __init__(self, rep, stages, how: str, warmup: int, batch_size: int | None):
        self.rep, self.stages, self.how, self.warmup = rep, tuple(stages), how, warmup
        nv = rep.nvtx
        lab = stage_labels(nv) if len(nv) else pd.Series(dtype=object)
        r = nv[(nv["kind"] != "mark") & (lab.isin(self.stages) | nv["name"].isin(self.stages))] if len(nv) else nv
        self.stage_ranges = r[["start_ns", "end_ns"]] if len(r) else pd.DataFrame({"start_ns": [], "end_ns": []})
        pay = r["payload"].astype("float64") if len(r) else pd.Series(dtype="float64")
        self.batches = int(r.loc[pay.notna(), "payload"].nunique()) if len(r) else 0
        if warmup and pay.notna().any():  # batch-indexed ranges: the steady state past the warm-up
            warm = r[pay.notna() & (pay < warmup)]
            r = r[pay.notna() & (pay >= warmup)]
            self.batches = int(r["payload"].nunique())
            # steady state starts when the last warm-up batch has left the pipeline
            start = max(int(warm["end_ns"].max()), int(r["start_ns"].min())) if len(warm) and len(r) else None
            self.window = (start or int(r["start_ns"].min()), int(r["end_ns"].max())) if len(r) else (0, 0)
            self.where = f"the steady state past warm-up batch {warmup}"
        else:
            self.window = trace_span(rep)
            self.where = ("the whole trace (no warm-up left out: warmup=0)" if pay.notna().any() else
                          "the whole trace (no range carries a batch index, so no warm-up is left out)")
        self.wall_ms = (self.window[1] - self.window[0]) / 1e6
        t = bn.bottleneck(rep, warmup=warmup, steady=False).table  # rep: advise's window already
        name = [s[len(d) + 1:] if d else s for s, d in zip(t["stage"], t["domain"])]
        keep = t["stage"].isin(self.stages) | pd.Series(name, index=t.index, dtype=object).isin(self.stages)
        t = t[keep]
        self.load = pd.DataFrame({"tid": t["tid"].astype("int64").to_numpy(), "thread": t["thread"].to_numpy(),
                                  "stage": t["stage"].to_numpy(), "ms": t["self_ms"].to_numpy(dtype=float)})
        self.table = stage_table(rep, self.stages, warmup=warmup) if self.stages else stage_table(
            rep).iloc[:0]
        items = self.table["items"] / self.table["instances"]
        self.batch_size = batch_size or (int(np.ceil(items.max())) if len(items) and items.max() > 0 else None)
        w0, w1 = self.window
        sm, se = idle.engine_busy(rep, "sm")
        cs, ce = idle.engine_busy(rep, "copy")
        self.sm_ms = idle.busy_in(sm, se, w0, w1) / 1e6 if len(sm) else 0.0
        self.copy_ms = idle.busy_in(cs, ce, w0, w1) / 1e6 if len(cs) else 0.0
        self.kernels = self.in_window(rep.kernels)
        self.model = WhatIf(rep, self.window, self.stages, sm_ms=self.sm_ms, copy_ms=self.copy_ms)
        self.skip_with, self.skip_every, self.skip_given, self.removable = (), SKIP_EVERY, False, ()
        self.call_cost, self.batch_to = {}, None  # the caller's fitted fixed cost per call (advise(call_cost=))

    @functools.cached_property
    def launches(self) -> Launches | None:
        """The what-if of fewer launches on the thread that launched most (:mod:`labkit.judge.launches`)."""
        return launch_steps(self.rep, self.window, self.stages)

    def in_window(self, df: pd.DataFrame) -> pd.DataFrame:
        """Rows of a frame with start_ns inside the window."""
        if len(df) == 0:
            return df
        return df[(df["start_ns"] >= self.window[0]) & (df["start_ns"] <= self.window[1])]

    def waited_bound(self, calls: pd.DataFrame, floor_ms: float = 0.0) -> tuple[float, float, int]:
        """(bound, most ms one thread spent in ``calls``, that thread's tid) for removing the time
        the threads spent in ``calls``: the run can shorten by at most the time during which some
        thread was in them (their union inside the window), and is no faster than the SMs' busy
        time or ``floor_ms``."""
        if len(calls) == 0 or self.wall_ms <= 0:
            return 1.0, 0.0, -1
        w0, w1 = self.window
        s, e = calls["start_ns"].clip(lower=w0), calls["end_ns"].clip(upper=w1)
        dur = (e - s).clip(lower=0)
        waited = dur.groupby(calls["global_tid"]).sum() / 1e6
        us, ue = idle.busy_intervals(s.to_numpy(), np.maximum(e.to_numpy(), s.to_numpy()))
        union_ms = float((ue - us).sum()) / 1e6
        floor = max(self.wall_ms - union_ms, self.sm_ms, floor_ms)
        gtid = waited.idxmax()
        tid = int(calls.loc[calls["global_tid"] == gtid, "tid"].iloc[0])
        return (self.wall_ms / floor if floor > 0 else math.inf), float(waited.max()), tid

    def bound(self, change: pd.DataFrame | None = None, *, drop=()) -> float:
        """Speed-up from adding ``change`` (rows tid, ms) to the threads' stage time and removing
        the stages in ``drop``: the larger of the busiest thread's ratio (as many cores as threads)
        and the total's (cores saturated); no faster than the SMs' own work."""
        if self.load.empty:
            return 1.0
        now = self.load.groupby("tid")["ms"].sum()
        after = self.load[~self.load["stage"].isin(list(drop))]
        if change is not None and len(change):
            after = pd.concat([after[["tid", "ms"]], change[["tid", "ms"]]], ignore_index=True)
        per = after.groupby("tid")["ms"].sum().clip(lower=0.0)
        ratios = [now.max() / per.max() if len(per) and per.max() > 0 else math.inf,
                  now.sum() / per.sum() if per.sum() > 0 else math.inf]
        b = float(max(ratios))
        removed = float(now.sum() - per.sum())
        if removed > 0 and self.wall_ms > 0:  # the run shortens by at most the stage time removed
            b = min(b, self.wall_ms / max(self.wall_ms - removed, 1e-9))
        if self.sm_ms > 0:
            b = min(b, self.wall_ms / self.sm_ms)
        return b

    def share(self, stage: str) -> tuple[float, float]:
        """(ms, share of all stage time) of one stage."""
        ms = float(self.load.loc[self.load["stage"] == stage, "ms"].sum())
        total = float(self.load["ms"].sum())
        return ms, (ms / total if total else 0.0)
