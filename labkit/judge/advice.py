"""Findings from a report's evidence, for any program: what holds the run back, which lever
addresses it (in general words: :data:`LEVERS`), and what that lever can gain, one row per finding.

Stages are the NVTX ranges the program has (:func:`labkit.stats.stages.choose_stages`: labkit's
``items`` marks, else the ranges nested in the outermost repeated range, else the top-level ones;
NVTX domains kept apart as ``domain:name``). The CUDA rules need no annotation at all: they read
the CUDA API calls and GPU activity as ``nsys analyze`` does. The model behind each prediction and
when it is a true bound: :mod:`labkit.judge.evidence`; the rules: :mod:`labkit.judge.rules`.

labkit knows no program: it never names a program's flags. A program's own mapping from lever
ids to its switches lives with that program (the lab's is in ``labbook``).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from labkit.errors import LabkitError
from labkit.judge import rules as advice_rules
from labkit.judge.accounting import account, chosen_window
from labkit.judge.batch_rules import fitted_batch, per_call, underfilled
from labkit.judge.gpu_rules import (gpu_bound, launch_bound, low_utilization, pageable, starvation, sync_apis,
                                    sync_copies)
from labkit.judge.evidence import ADVICE_COLUMNS, DECODE_BOUND, LEVERS, MIN_GAIN, SKIP_EVERY, Evidence, row
from labkit.judge import serialized
from labkit.report.window import windowed
from labkit.stats import idle
from labkit.stats import stages as analysis

__all__ = ["RULES", "advise", "next_lever", "finding_sentence", "AdviseError", "ADVICE_COLUMNS", "LEVERS",
           "annotated_stages", "MIN_GAIN"]

RULES = (advice_rules.serial, advice_rules.latency, advice_rules.dominant, advice_rules.outside_ranges,
         advice_rules.on_path, advice_rules.taking_turns,
         advice_rules.one_at_a_time, advice_rules.chain, per_call, fitted_batch, underfilled, sync_apis, sync_copies,
         pageable, starvation, low_utilization, launch_bound, gpu_bound)
"""Every rule but ``removable`` (which needs the caller's list): a function of the evidence."""


class AdviseError(LabkitError):
    """The report cannot be read as a report."""


def annotated_stages(report) -> tuple[str, ...]:
    """Names of the ranges that carry an ``items`` mark (every ``labkit.annotate.range`` emits
    one): a program's stages, without labkit knowing the program."""
    t = analysis.stage_table(report)
    return tuple(t.loc[t["items"] > 0, "stage"])


def _steady_fps(ev: Evidence) -> float | None:
    """Items per second of the window: items of the last stage (in the given order) that has any."""
    t = ev.table
    last = [s for s in ev.stages if (t["stage"] == s).any() and t.loc[t["stage"] == s, "items"].iloc[0] > 0]
    if not last or ev.wall_ms <= 0:
        return None
    return float(t.loc[t["stage"] == last[-1], "items"].iloc[0] / (ev.wall_ms / 1e3))


def _input_bound(ceiling: float, fps: float) -> dict | None:
    """Near the rate at which the same inputs are read and decoded with nothing else running."""
    ratio = fps / ceiling
    if ratio < DECODE_BOUND:
        return None
    text = (f"{fps:.1f} items/s against an input-only ceiling of {ceiling:.1f} items/s ({ratio:.0%}): no other "
            "stage's lever can take the run past its input")
    return row("decode_bound", "The run is bound by reading its input", text, "parallel_input",
               max(ceiling / fps, 1.0), "estimate", "the input-only run was measured apart, under other contention")


def advise(report, *, window=None, within=None, steady: bool = True, **kwargs) -> pd.DataFrame:
    """Findings about what holds a profiled run back (:func:`_advise` has the arguments and columns).

    The window: ``window=(start_ns, end_ns)`` or ``within="range"`` as given; otherwise, with
    ``steady=True`` (the default) and no ``warmup``, the steady window past start-up
    (:func:`labkit.judge.accounting.steady_window_of`: the first instances of the repeated range, or
    everything before the first kernel launch, left out); ``steady=False`` keeps the whole trace.
    ``attrs["note"]`` says which window was used and why.
    """
    if not hasattr(report, "nvtx") or not hasattr(report, "cuda_api"):
        raise AdviseError(f"advise needs a report loaded with labkit.load_report(path), not a "
                          f"{type(report).__name__}")
    window, why = chosen_window(report, window=window, within=within, steady=steady, warmup=kwargs.get("warmup"))
    return _advise(report, window=window, within=within, _where=why, **kwargs)


@windowed
def _advise(report, *, stages=None, warmup: int = 0, decode_ceiling_fps: float | None = None,
           fps: float | None = None, batch_size: int | None = None, removable=(), skip_with=(),
           skip_every: int | None = None, call_cost: dict | None = None, batch_to: int | None = None,
           min_gain: float = MIN_GAIN, _where: str | None = None) -> pd.DataFrame:
    """Findings about what holds a profiled run back, each with its evidence, lever and prediction.

    Args:
        report: a :class:`labkit.report.Report` (any program: NVTX ranges, or none at all).
        stages: the stage range names or ``domain:name`` labels (default:
            :func:`labkit.stats.stages.choose_stages`).
        warmup: batches (range payload below this) left out as warm-up, where ranges carry one.
        decode_ceiling_fps: items/s of the same inputs read alone; caps every prediction and
            enables the input-bound rule.
        fps: the run's items/s (default: items of the last stage over the window).
        batch_size: the batch size (default: the most items a stage call carried).
        removable: stages the output does not need (a ``remove_stage`` finding each).
        skip_with: stages that run on fewer items together (the skip-work lever changes all of
            them when the dominant stage is one; default: the dominant stage alone).
        skip_every: the K of the skip-work estimate (1 item in K; default 3). Given, the caller says
            the stage may skip items: its skip-work finding stands for it, not the cheaper-stage limit.
        call_cost: stage -> the fixed cost of one of its calls in ms, whatever it carries (fitted by
            the caller over runs at two or more batch sizes); with ``batch_to`` (the batch size to
            predict for) it makes a batching estimate (rule ``fitted_batch``).
        min_gain: findings predicting less are left out (the input-bound one and the stages named
            ``removable`` always shown).
    Returns: ``ADVICE_COLUMNS``: finding, evidence (numbers from the report, in words), lever (an
        id of :data:`LEVERS`), lever_text (its words), predicted_speedup (x), basis ("bound": a
        true upper bound under the assumptions; "estimate" otherwise), assumptions (one
        sentence), rule (id), stage (the stage a finding is about, else None); largest first.
        ``attrs``: ``stages``, ``note`` (how stages were chosen, which window, why empty),
        ``window`` (ns). A report with nothing to find gives an empty frame with its note.
    Raises: AdviseError when ``report`` is not a loaded report.
    """
    if not hasattr(report, "nvtx") or not hasattr(report, "cuda_api"):
        raise AdviseError(f"advise needs a report loaded with labkit.load_report(path), not a "
                          f"{type(report).__name__}")
    how = "stages: as given"
    if stages is None:
        stages, how = analysis.choose_stages(report)
    ev = Evidence(report, stages, how, warmup, batch_size)
    if _where:  # the steady window advise chose (the report is restricted to it)
        ev.where = _where
    ev.skip_with, ev.skip_every = tuple(skip_with), int(skip_every or SKIP_EVERY)
    ev.skip_given, ev.removable = skip_every is not None, tuple(removable)
    ev.call_cost, ev.batch_to = dict(call_cost or {}), (int(batch_to) if batch_to else None)
    ev.acc = account(report, window=ev.window)
    rows = [r for rule in RULES for r in rule(ev)] + advice_rules.removable(ev, removable)
    for r in rows:
        _amdahl(r, ev)
    decode = None
    if decode_ceiling_fps:
        fps = fps or _steady_fps(ev)
        decode = _input_bound(decode_ceiling_fps, fps) if fps else None
        cap = max(decode_ceiling_fps / fps, 1.0) if fps else math.inf
        for r in rows:  # nothing downstream can make the run outpace its input
            if r["predicted_speedup"] > cap:
                r["predicted_speedup"] = cap
                r["evidence"] += f"; capped at the input-only ceiling ({cap:.2f}x)"
    held = serialized.held_stage(ev)
    for r in rows:  # no change to the other stages outpaces a stage run one at a time under a lock
        serialized.cap(r, ev, held)
    # a lever the caller named (removable=) is always answered, even when it predicts nothing
    rows = [r for r in rows if r["predicted_speedup"] >= min_gain or r["rule"] == "removable_stage"] + (
        [decode] if decode else [])
    for r in rows:  # what each prediction removes from the window, after every cap
        p = float(r["predicted_speedup"])
        r["window_ms"] = float(ev.wall_ms)
        r["saves_ms"] = ev.wall_ms - ev.wall_ms / p if p > 0 and math.isfinite(p) else float(ev.wall_ms)
        _short_of_cores(r, ev)
    out = pd.DataFrame(rows, columns=ADVICE_COLUMNS).astype({"predicted_speedup": "float64"})
    out = out.sort_values("predicted_speedup", ascending=False, kind="stable", ignore_index=True)
    out["stage"] = out["stage"].astype(object).where(out["stage"].notna(), None)
    found = (f"{len(out)} finding(s)" if len(out) else
             f"nothing to find: no rule predicts {min_gain:g}x or more (no stage dominates, no measured wait, "
             "copy or idle GPU time worth a step)")
    out.attrs.update(stages=tuple(ev.stages), window=ev.window,
                     note=f"{found}; {how or 'no stages'}; over {ev.where} ({ev.wall_ms:.0f} ms)")
    return out


GPU_LEVERS = ("reduce_precision", "compile", "cuda_graphs")
"""Levers that shorten the GPU's own work: the SMs' busy time is no floor for them."""
LAUNCH_RULES = ("gpu_low_utilization", "launch_bound")
"""Findings whose lever (batching, graphs) removes launch calls: they save at most the busiest
thread's time in them and in the stages that issue them (:func:`_launch_work_ms`)."""


def _launch_work_ms(ev: Evidence, busiest) -> float:
    """What fewer launches can remove from the busiest thread: its launch calls and, where its stages'
    ranges hold them, those stages' time (the framework's work around each launch goes with it: on an
    H200, batching 500 one-kernel adds into one measured 242-382x in four calls where the launch calls
    alone promised 1.74x)."""
    launches = ev.in_window(idle.launch_calls(ev.rep))
    mine = launches[launches["global_tid"] == busiest["global_tid"]] if len(launches) else launches
    calls_ms = float(mine["duration_ns"].sum()) / 1e6
    nv = ev.rep.nvtx
    if not len(mine) or not len(nv) or ev.load.empty:
        return calls_ms
    ranges = ev.in_window(nv[(nv["global_tid"] == busiest["global_tid"]) & (nv["kind"] != "mark")
                             & nv["name"].isin(ev.stages)])
    starts = np.sort(mine["start_ns"].to_numpy())
    launching = {name for name, s, e in zip(ranges["name"], ranges["start_ns"], ranges["end_ns"])
                 if np.searchsorted(starts, e) > np.searchsorted(starts, s)}
    load = ev.load[(ev.load["tid"] == int(busiest["tid"])) & ev.load["stage"].isin(launching)]
    return max(calls_ms, float(load["ms"].sum()))


def _amdahl(r: dict, ev: Evidence) -> None:
    """Cap a finding at what its lever can remove, and say so: ``window_ms`` is the window,
    ``saves_ms`` the time the prediction removes from it. The lever touches at most the finding's
    stage (its work time in the window), the busiest thread's launch calls for a launch finding
    (:data:`LAUNCH_RULES`) or, for any other finding, everything but the busiest resource it leaves
    alone (another thread, less the helper time that goes with the finding's stage, or the SMs for a
    host-side lever); the prediction never exceeds
    ``window_ms / (window_ms - saves_ms)``."""
    w = float(ev.wall_ms)
    r["window_ms"] = w
    acc = ev.acc
    b = acc.busiest
    gpu_after = r.pop("gpu_ms", None)  # the rule's own model of the SMs after the change
    other = acc.floor_ms(without_thread=int(b["global_tid"]) if b is not None else None,
                         gpu=r["lever"] not in GPU_LEVERS and gpu_after is None, less=r.pop("helpers_ms", None))
    if gpu_after is not None:
        other = max(other, float(gpu_after))
    if r["lever"] in GPU_LEVERS and acc.limiter == "gpu" and b is not None:
        other = max(other, float(b["busy_ms"]))  # faster kernels leave every thread's own work
    touch = w - other
    if "touch_ms" in r:  # the rule says what its change removes (the what-if model's own time)
        touch = min(touch, float(r.pop("touch_ms")))
    elif r["rule"] in LAUNCH_RULES and b is not None:  # fewer launches save the launch calls and the host
        touch = min(touch, _launch_work_ms(ev, b))      # work around each (the stages that launch them)
    elif r.get("stage") is not None and not ev.model.stages.empty:  # the stage's own time, latency included
        stage_ms = float(ev.model.stages.loc[ev.model.stages["stage"] == r["stage"], "own_ms"].sum())
        if stage_ms > 0:
            touch = min(touch, stage_ms)
    touch = min(max(touch, 0.0), w)
    limit = w / (w - touch) if w - touch > 0 else math.inf
    p = float(r["predicted_speedup"])
    if p > limit * (1 + 1e-6):  # not where the prediction is its own cap, to rounding
        r["predicted_speedup"] = p = limit
        r["evidence"] += f"; capped at {limit:.2f}x: the lever removes at most {touch:.0f} of {w:.0f} ms"
    r["saves_ms"] = w - w / p if p > 0 and math.isfinite(p) else touch


def _short_of_cores(r: dict, ev: Evidence) -> None:
    """A bound read from times measured while threads waited for a core is none: a change that frees a
    core takes those waits away as well (with four threads started per batch on two cores, the main
    thread's thread starts are slowed by the running workers: a 2.06x 'bound' against 2.26x measured). The bound stands while the run's time with more
    threads ready than cores (:attr:`~labkit.judge.accounting.Accounting.oversubscribed_ms`), were all
    of it gone from the run after the change, could not move it past the noise (:data:`MIN_GAIN`);
    beyond that the finding is an estimate and its assumptions say why."""
    acc = ev.acc
    over = float(acc.oversubscribed_ms)
    if r["basis"] != "bound" or over <= 0:
        return
    p = float(r["predicted_speedup"])
    after = ev.wall_ms / p if p > 0 and math.isfinite(p) else 0.0
    if over <= (1 - 1 / MIN_GAIN) * after:
        return
    r["basis"] = "estimate"
    cores = f"{acc.cores} core{'s' if acc.cores != 1 else ''}"
    r["assumptions"] += (f"; for {over:.0f} of the window's {ev.wall_ms:.0f} ms more threads were ready to run than "
                         f"the {cores} the profiled run had, so measured times include waits for a core "
                         "that a change freeing one takes away too: an estimate, not a bound")


def finding_sentence(row) -> str:
    """A row of :func:`advise` in words: its finding, evidence and prediction with its basis."""
    return (f"{row['finding']} ({row['evidence']}); predicted {row['predicted_speedup']:.2f}x, an "
            f"{'upper bound' if row['basis'] == 'bound' else 'estimate'} assuming {row['assumptions']}.")


def next_lever(report, **kwargs) -> str:
    """One sentence naming the lever of the top finding of :func:`advise` (same arguments), in words."""
    a = advise(report, **kwargs)
    if a.empty:
        return f"No lever worth a step: {a.attrs['note']}."
    top = a.iloc[0]
    return f"Next lever: {top['lever_text']} ({top['lever']}). {finding_sentence(top)}"
