"""Findings from a report's evidence: what bounds the run, which lever addresses it, and the most
that lever can gain (an upper bound), one row per finding.

The model behind every bound: in steady state a run takes at least as long as its busiest thread
(stage time: self time of its NVTX ranges past the warm-up, from
:func:`labkit.analysis.bottleneck`) and, when its threads share too few cores, as its total stage
time over the cores; and no less than the GPU's own work. A lever changes some stages' time; the
predicted speed-up is the larger of the busiest thread's time before over after and the total's
(Amdahl: with all stages on one thread both are total over total minus the time saved). Stage
times are measured under the run's own contention, so a bound is not a promise: it says which
gains are impossible.

The application's NVTX contract relied on (``source_code/README.md``, "Stages and NVTX ranges";
labkit never imports the application, so stage names are parameters with these defaults):

- one push/pop range per stage call, named after the stage (the lab application's are decode, preprocess, infer, postprocess,
  track, display); its payload is the
  batch index and an ``items`` mark inside it carries the frames it handled (:mod:`labkit.annotate`);
- a plain run calls every stage on one thread; ``--queues`` gives each stage its own thread
  (named after the stage), and decoder threads ``decode-K`` emit one ``decode`` range per frame.
  nsys 2022.4 records every Python thread under the process name, so threads are told apart by
  id, never by name;
- ``preprocess`` and ``infer`` see only the detected frames (``--interval K``): their items over
  calls times the batch size is how full the detector's batches were;
- on CUDA without ``--queues``, ``preprocess`` and ``infer`` wait for their own GPU work, so their
  ranges cover it; with ``--queues`` the ``infer`` range is the launch and ``postprocess`` waits for
  the forward pass (the results' ``stage_detail.<stage>.cuda_ms`` has the GPU times).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from labkit import analysis
from labkit.errors import LabkitError

__all__ = ["advise", "next_lever", "AdviseError", "STAGE_LEVERS", "ADVICE_COLUMNS", "annotated_stages"]

"""The application's stage range names, in pipeline order."""
ADVICE_COLUMNS = ["finding", "evidence", "lever", "predicted_speedup", "rule"]

STAGE_LEVERS = {
    "decode": "--streams N (one decoder thread per source) or a hardware decoder; compare with --decode-only",
    "preprocess": "--gpu-preprocess (resize and normalize on the GPU, upload through pinned buffers)",
    "infer": "--batch-size, --fp16, --cuda-graphs, --compile or another --backend; --interval K runs it "
             "on 1 frame in K",
    "postprocess": "--batch-size (one postprocess call per batch)",
    "track": "--queues (the tracker overlaps inference) or a cheaper tracker",
    "display": "--no-osd (no drawing, no video written)",
}
"""The lab's lever for a stage that bounds the run."""
REMOVABLE = {"display": "--no-osd"}
"""Stages a flag removes altogether: their whole time is the gain."""

# Thresholds. Each is the point past which the finding is worth a lab step.
MIN_GAIN = 1.05  # the CPU baseline's spread over 3 repeats was 3.9 % (ledger.reference.jsonl): below, noise
DOMINANT_SHARE = 0.5  # one stage over half the stage time: no lever on the others can reach 2x
LOW_GPU_BUSY = 0.5  # the GPU idles more than it works in steady state
IDLE_GAP_MS = 1.0  # gaps shorter than this are launch latency, not starvation
TINY_KERNEL_US = 20.0  # a launch call alone took 11 us on the H100 fixture: shorter kernels idle the GPU
MANY_KERNELS_PER_BATCH = 20  # with fewer launches per batch their cost is small against a stage
UNDERFILL = 0.9  # fill under 90 %: more than the last partial batch of a short clip
DECODE_BOUND = 0.8  # at 80 % of the decode-only rate the other stages have 1.25x left at most

SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaMemcpy2D", "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize")
"""CUDA API calls that block the calling thread until the GPU is done (with copies to or from
pageable memory, which the driver runs synchronously even when called ``...Async``)."""


class AdviseError(LabkitError):
    """The report holds nothing advise can reason about."""


# ----------------------------------------------------------------------------- evidence
class _Run:
    """The steady-state evidence every rule reads, computed once."""

    def __init__(self, rep, stages, warmup: int, batch_size: int | None, detector: str):
        self.rep, self.stages, self.warmup, self.detector = rep, list(stages), warmup, detector
        nv = rep.nvtx
        r = nv[(nv["kind"] == "push_pop") & nv["name"].isin(self.stages)]
        pay = r["payload"].astype("float64")
        warm = r[pay.notna() & (pay < warmup)]
        if pay.notna().any():
            r = r[pay.notna() & (pay >= warmup)]
        self.batches = int(r["payload"].nunique())
        # steady state starts when the last warm-up batch has left the pipeline, not at the first
        # steady range: queued decoders run ahead while the warm-up batches are still in inference
        start = max(int(warm["end_ns"].max()), int(r["start_ns"].min())) if len(warm) and len(r) else None
        self.window = (start or int(r["start_ns"].min()), int(r["end_ns"].max())) if len(r) else (0, 0)
        self.wall_ms = (self.window[1] - self.window[0]) / 1e6
        t = analysis.bottleneck(rep, warmup=warmup).table
        t = t[t["stage"].isin(self.stages)]
        self.load = pd.DataFrame({"tid": t["tid"].astype("int64").to_numpy(), "thread": t["thread"].to_numpy(),
                                  "stage": t["stage"].to_numpy(), "ms": t["self_ms"].to_numpy(dtype=float)})
        self.table = analysis.stage_table(rep, self.stages, warmup=warmup)
        items = self.table["items"] / self.table["instances"]
        self.batch_size = batch_size or (int(np.ceil(items.max())) if len(items) and items.max() > 0 else None)
        self.gpu_ms = 0.0
        if self.wall_ms > 0 and len(rep.gpu_ops()):
            # one bin a microsecond wider than the window: a narrower one would add a second bin
            u = analysis.gpu_utilization(rep, bin_ms=self.wall_ms + 1e-3, window=self.window)
            self.gpu_ms = float(u["busy_ns"].sum()) / 1e6

    def in_window(self, df: pd.DataFrame) -> pd.DataFrame:
        """Rows of a frame with start_ns inside the steady-state window."""
        return df[(df["start_ns"] >= self.window[0]) & (df["start_ns"] <= self.window[1])]

    def bound(self, change: pd.DataFrame | None = None, *, drop=(), gpu_cap: bool = False) -> float:
        """Upper bound of the speed-up from adding ``change`` (rows tid, ms) to the threads' stage
        time and removing the stages in ``drop``: the larger of the busiest thread's ratio (as
        many cores as threads) and the total's (cores saturated), since a run's time lies between
        max(busiest thread, total / cores) for any core count; with ``gpu_cap``, no faster than
        the GPU's own work."""
        if self.load.empty:  # no stage ranges: only the GPU's work bounds the run
            return self.wall_ms / self.gpu_ms if gpu_cap and self.gpu_ms else 1.0
        now = self.load.groupby("tid")["ms"].sum()
        after = self.load[~self.load["stage"].isin(list(drop))]
        if change is not None and len(change):
            after = pd.concat([after[["tid", "ms"]], change[["tid", "ms"]]], ignore_index=True)
        per = after.groupby("tid")["ms"].sum().clip(lower=0.0)
        ratios = [now.max() / per.max() if len(per) and per.max() > 0 else math.inf,
                  now.sum() / per.sum() if per.sum() > 0 else math.inf]
        b = float(max(ratios))
        if gpu_cap and self.gpu_ms > 0:
            b = min(b, self.wall_ms / self.gpu_ms)
        return b

    def share(self, stage: str) -> tuple[float, float]:
        """(ms, share of all stage time) of one stage in steady state."""
        ms = float(self.load.loc[self.load["stage"] == stage, "ms"].sum())
        total = float(self.load["ms"].sum())
        return ms, (ms / total if total else 0.0)


def _row(rule: str, finding: str, evidence: str, lever: str, predicted: float) -> dict:
    return {"finding": finding, "evidence": evidence, "lever": lever, "predicted_speedup": predicted, "rule": rule}


# ----------------------------------------------------------------------------- rules: stages
def _serial(run: _Run) -> list[dict]:
    """Several stages one after another on the busiest thread: overlap them."""
    if run.load.empty:
        return []
    per = run.load.groupby("tid")["ms"].sum()
    tid = per.idxmax()
    mine = run.load[run.load["tid"] == tid].groupby("stage", sort=False)["ms"].sum()
    if len(mine) < 2:
        return []
    # each stage of that thread on its own thread: the new tids are negative, never real ones
    moved = pd.DataFrame({"tid": -1 - np.arange(len(mine)), "ms": mine.to_numpy()})
    change = pd.concat([moved, pd.DataFrame({"tid": [tid], "ms": [-per[tid]]})], ignore_index=True)
    top = mine.idxmax()
    thread = run.load.loc[run.load["tid"] == tid, "thread"].iloc[0]
    ev = (f"{len(mine)} stages ({', '.join(mine.index)}) run on one thread ({thread}): {per[tid]:.0f} ms of stage "
          f"time in the {run.wall_ms:.0f} ms steady state; the largest, '{top}', is {mine[top]:.0f} ms "
          f"({mine[top] / per[tid]:.0%}), so overlapping the others gains at most {per[tid]:.0f}/{mine[top]:.0f}")
    return [_row("serial_stages", "The stages run one after another on one thread", ev,
                 "--queues (every stage in its own thread)", run.bound(change))]


def _dominant(run: _Run) -> list[dict]:
    """One stage takes most of the stage time: its own levers matter most."""
    if run.load.empty:
        return []
    per = run.load.groupby("stage")["ms"].sum()
    if len(per) < 2:  # one stage dominates nothing
        return []
    stage = per.idxmax()
    ms, share = run.share(stage)
    if share < DOMINANT_SHARE:
        return []
    ev = (f"'{stage}' is {ms:.0f} ms of {run.load['ms'].sum():.0f} ms of stage time ({share:.0%}) in the "
          f"{run.wall_ms:.0f} ms steady state; the bound is the run with '{stage}' taking no time at all")
    return [_row("dominant_stage", f"One stage, '{stage}', dominates", ev,
                 STAGE_LEVERS.get(stage, f"make '{stage}' cheaper"), run.bound(drop=[stage]))]


def _removable(run: _Run) -> list[dict]:
    """A stage a flag removes (drawing and writing the video)."""
    out = []
    top = run.load.groupby("stage")["ms"].sum().idxmax() if len(run.load) else None
    for stage, flag in REMOVABLE.items():
        ms, share = run.share(stage)
        if ms <= 0 or stage == top:  # the dominant-stage finding already names it
            continue
        ev = f"'{stage}' takes {ms:.0f} ms ({share:.0%} of stage time); {flag} removes it"
        out.append(_row("removable_stage", f"Stage '{stage}' can be switched off", ev, flag,
                        run.bound(drop=[stage])))
    return out


def _underfilled(run: _Run) -> list[dict]:
    """The detector's batches carry fewer frames than the batch size."""
    t = run.table[run.table["stage"] == run.detector]
    if t.empty or not run.batch_size or t["instances"].iloc[0] == 0:
        return []
    calls, items = int(t["instances"].iloc[0]), int(t["items"].iloc[0])
    fill = items / (calls * run.batch_size)
    if fill >= UNDERFILL:
        return []
    ms, _ = run.share(run.detector)
    # upper bound: a call costs the same whatever it carries (true where partial batches are padded)
    saved = run.load[run.load["stage"] == run.detector].assign(ms=lambda d: -d["ms"] * (1 - fill))
    ev = (f"'{run.detector}' ran {calls} calls on {items} frames at batch size {run.batch_size}: {fill:.0%} full "
          f"({items / calls:.1f} frames a call); with --cuda-graphs or --compile a partial batch is padded to "
          f"{run.batch_size} frames, so the detector does the full batch's work")
    return [_row("underfilled_batches", "The detector's batches are mostly empty", ev,
                 f"--batch-size near {max(1, round(items / calls))} (what a call carries), or gather detected "
                 "frames into full batches", run.bound(saved))]


# ----------------------------------------------------------------------------- rules: GPU
def _gpu_starved(run: _Run) -> list[dict]:
    """The GPU waits for the CPU most of the steady state."""
    if run.wall_ms <= 0 or run.gpu_ms <= 0:
        return []
    busy = run.gpu_ms / run.wall_ms
    if busy >= LOW_GPU_BUSY:
        return []
    gaps = run.in_window(analysis.gpu_idle_gaps(run.rep, min_gap_ms=IDLE_GAP_MS))
    ev = f"GPU busy {busy:.1%} of the {run.wall_ms:.0f} ms steady state ({run.gpu_ms:.1f} ms of GPU work)"
    if len(gaps):
        g = gaps.iloc[0]
        ev += (f"; {len(gaps)} idle gaps of {IDLE_GAP_MS:g} ms or more, {gaps['duration_ns'].sum() / 1e6:.0f} ms "
               f"in all, the longest {g['duration_ns'] / 1e6:.1f} ms (after {g['before']})")
    return [_row("gpu_starved", "The GPU is idle most of the time: the CPU does not feed it", ev,
                 "--queues, --batch-size, --gpu-preprocess or --streams (keep the GPU fed)", 1.0 / busy)]


def _launch_bound(run: _Run) -> list[dict]:
    """Many tiny kernels: the CPU's launches, not the GPU, set the pace."""
    rep = run.rep
    k = run.in_window(rep.kernels)
    if k.empty or run.batches == 0:
        return []
    med_us = float(k["duration_ns"].median()) / 1e3
    per_batch = len(k) / run.batches
    if med_us >= TINY_KERNEL_US or per_batch < MANY_KERNELS_PER_BATCH:
        return []
    api = run.in_window(rep.cuda_api)
    launches = api[api["name"].str.contains("Launch", regex=False)]
    j = k.merge(launches[["pid", "correlation_id", "tid"]], on=["pid", "correlation_id"], how="inner")
    kern = j.groupby("tid")["duration_ns"].sum() / 1e6
    # a launching thread's GPU-side stages could shrink to the kernels they launch, no further
    gpu_stages = set(run.table.loc[run.table["gpu_ms"] > 0, "stage"])
    mine = run.load[run.load["tid"].isin(kern.index) & run.load["stage"].isin(gpu_stages)]
    change = pd.concat([mine[["tid"]].assign(ms=-mine["ms"]),
                        pd.DataFrame({"tid": kern.index.to_numpy(), "ms": kern.to_numpy()})], ignore_index=True)
    ev = (f"{len(k)} kernels in the {run.wall_ms:.0f} ms steady state ({per_batch:.0f} a batch), median "
          f"{med_us:.1f} us; {len(launches)} launch calls took {launches['duration_ns'].sum() / 1e6:.1f} ms of "
          f"CPU time; the kernels ran {kern.sum():.1f} ms")
    return [_row("launch_bound", "Many tiny kernels: the run is launch-bound", ev,
                 "--cuda-graphs (one launch per batch), --batch-size (fewer, larger kernels), --compile",
                 run.bound(change, gpu_cap=True))]


def _pageable(run: _Run) -> list[dict]:
    """Copies to or from pageable host memory: synchronous, they cannot overlap."""
    ct = analysis.copy_table(run.rep, warmup=run.warmup)
    pg = ct[ct["host"] == "Pageable"]
    if pg.empty or run.wall_ms <= 0:
        return []
    ms = float(pg["ms"].sum())
    share = min(ms / run.wall_ms, 0.999)  # bounded: a copy cannot take longer than the run
    kinds = ", ".join(f"{int(r.copies)} {r.kind} ({r.mb:.1f} MB)" for r in pg.itertuples())
    ev = (f"{kinds} from or to pageable host memory in the loop: {ms:.1f} ms of copy time, {share:.0%} of the "
          f"{run.wall_ms:.0f} ms steady state, none of it overlapping other work")
    return [_row("pageable_copies", "Copies use pageable host memory", ev,
                 "pinned memory (tensor.pin_memory(), non_blocking copies; --gpu-preprocess uploads through "
                 "pinned buffers)", 1.0 / (1.0 - share))]


def _sync_calls(run: _Run) -> list[dict]:
    """CUDA calls that block the loop until the GPU is done."""
    rep = run.rep
    api = run.in_window(rep.cuda_api)
    if api.empty:
        return []
    blocking = api["name"].isin(SYNC_CALLS)
    m = rep.memcpy
    if len(m):
        pg = m[m["pageable"]][["pid", "correlation_id"]].assign(_pg=True)
        blocking |= api.merge(pg, on=["pid", "correlation_id"], how="left")["_pg"].fillna(False).to_numpy(bool)
    calls = api[blocking]
    if calls.empty:
        return []
    blocked = calls.groupby("tid")["duration_ns"].sum() / 1e6
    change = pd.DataFrame({"tid": blocked.index.to_numpy(), "ms": -blocked.to_numpy()})
    names = ", ".join(f"{n} x{c}" for n, c in calls["name"].astype(str).value_counts().items())
    tid = blocked.idxmax()
    ev = (f"{len(calls)} blocking calls in the {run.wall_ms:.0f} ms steady state "
          f"({len(calls) / max(run.batches, 1):.1f} a batch: {names}); thread {tid} waited in them "
          f"{blocked[tid]:.1f} ms; the bound also keeps the GPU's own {run.gpu_ms:.0f} ms of work")
    return [_row("sync_in_loop", "Synchronizing CUDA calls in the loop", ev,
                 "keep results on the GPU until a batch is done (no per-frame .item()/.cpu()), pinned "
                 "non_blocking copies, --queues so other stages run meanwhile, --cuda-graphs",
                 run.bound(change, gpu_cap=True))]


RULES = (_serial, _dominant, _removable, _underfilled, _gpu_starved, _launch_bound, _pageable, _sync_calls)
"""Every rule: a function of the evidence returning finding rows (none when it does not apply)."""


# ----------------------------------------------------------------------------- entry points
def _steady_fps(run: _Run) -> float | None:
    """Frames per second of the steady state: items of the last stage present over the window."""
    t = run.table.set_index("stage")
    last = [s for s in run.stages if s in t.index and t.loc[s, "items"] > 0]
    return float(t.loc[last[-1], "items"] / (run.wall_ms / 1e3)) if last and run.wall_ms > 0 else None


def _decode_bound(run: _Run, ceiling: float, fps: float) -> dict | None:
    """Near the rate at which the same sources decode with nothing else running."""
    ratio = fps / ceiling
    if ratio < DECODE_BOUND:
        return None
    ev = (f"{fps:.1f} frames/s against a decode-only ceiling of {ceiling:.1f} frames/s ({ratio:.0%}): no "
          "other stage's lever can take the run past the decoder")
    return _row("decode_bound", "The run is decode-bound", ev, STAGE_LEVERS["decode"], max(ceiling / fps, 1.0))


def annotated_stages(report) -> tuple[str, ...]:
    """Names of the ranges that carry an ``items`` mark (every ``labkit.annotate.range`` emits
    one): a program's stages, without labkit knowing the program."""
    t = analysis.stage_table(report)
    return tuple(t.loc[t["items"] > 0, "stage"])


def advise(report, *, stages=None, warmup: int = 0, decode_ceiling_fps: float | None = None,
           fps: float | None = None, batch_size: int | None = None, detector_stage: str = "infer",
           min_gain: float = MIN_GAIN) -> pd.DataFrame:
    """Findings about what bounds a profiled run, each with its evidence, lever and bound.

    Args:
        report: a :class:`labkit.report.Report` of a run annotated with stage ranges.
        stages: the stage range names (default: :func:`annotated_stages`, the ranges that carry an
            ``items`` mark, as every ``labkit.annotate.range`` does).
        warmup: batches (payload below this) left out as warm-up.
        decode_ceiling_fps: frames/s of the same sources decoded alone (``--decode-only``); caps
            every bound and enables the decode-bound rule.
        fps: the run's frames/s (its results file); default: frames of the last stage over the
            steady-state window.
        batch_size: the run's batch size; default: the most items a stage call carried.
        detector_stage: the stage whose batch fill is checked.
        min_gain: findings whose bound is below this are left out (decode-bound always shown).
    Returns: finding, evidence (numbers from the report, in words), lever (flag or lab step),
        predicted_speedup (upper bound, x), rule (id); largest bound first; empty (with these
        columns) when nothing holds the run back.
    Raises: AdviseError when the report has no stage ranges past the warm-up and no GPU work.
    """
    run = _Run(report, annotated_stages(report) if stages is None else tuple(stages), warmup, batch_size,
               detector_stage)
    if run.load.empty and run.gpu_ms == 0:
        raise AdviseError(f"no NVTX ranges named {', '.join(run.stages)} past warm-up batch {warmup} and no GPU "
                          "work in this report: annotate the stages with labkit.annotate.range, or pass stages=[...] "
                          "and a smaller warmup")
    rows = [r for rule in RULES for r in rule(run)]
    decode = None
    if decode_ceiling_fps:
        fps = fps or _steady_fps(run)
        decode = _decode_bound(run, decode_ceiling_fps, fps) if fps else None
        cap = max(decode_ceiling_fps / fps, 1.0) if fps else math.inf
        for r in rows:  # nothing downstream can make the run outpace its decoder
            if r["predicted_speedup"] > cap:
                r["predicted_speedup"] = cap
                r["evidence"] += f"; capped at the decode-only ceiling ({cap:.2f}x)"
    rows = [r for r in rows if r["predicted_speedup"] >= min_gain] + ([decode] if decode else [])
    out = pd.DataFrame(rows, columns=ADVICE_COLUMNS).astype({"predicted_speedup": "float64"})
    return out.sort_values("predicted_speedup", ascending=False, kind="stable", ignore_index=True)


def next_lever(report, **kwargs) -> str:
    """One sentence naming the lever of the top finding of :func:`advise` (same arguments)."""
    a = advise(report, **kwargs)
    if a.empty:
        return "No rule found a lever worth a step: every bound is under the noise of a measurement."
    top = a.iloc[0]
    return (f"Next lever: {top['lever']}. {top['finding']} ({top['evidence']}); it can gain at most "
            f"{top['predicted_speedup']:.2f}x.")
