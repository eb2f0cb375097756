"""The hands-on exercises' check cells: each reads the learner's *own* profile (or op profile) and
says, in one computed sentence, whether the change they made did what it should, with the numbers
that show it. A check never passes on a missing run: no profile, or a value not typed yet, is a
sentence that says what to do.

Each check returns ``(ok, sentence)`` through :func:`_verdict`: ``ok`` is True, False, or None
(nothing to check yet); the sentence is what the notebook shows (``labbook.text.say``).
"""
from __future__ import annotations

import math
from pathlib import Path

import labkit

from labbook.display import overlap as stage_overlap
from labbook.display import report, warmup_batches
from labbook.outcome import log_tail
from labbook.text import say

OVERLAP_MIN = 0.10
"""Share of the stages' busy time that must run beside another stage to call the stages overlapped."""
PIXEL_SLACK = 0.15
"""How far (as a share) ``infer``'s time per frame may sit from the change in pixels and still count
as following it (the convolutions scale with pixels; the rest of ``infer`` does not)."""
SHARE_SLACK = 0.25
"""How far (as a share of 1/K) the detected share of frames may sit from 1/K (a run's first and last
frames and its warm-up make the share of a short run inexact)."""


class Check:
    """A check's answer: ``ok`` (True, False, or None: nothing to check yet) and its sentence;
    shown in a notebook as that sentence."""

    def __init__(self, ok: bool | None, text: str):
        self.ok, self.text = ok, text

    def _repr_markdown_(self) -> str:
        return say(self.text).data

    def __repr__(self) -> str:
        return self.text


def _verdict(ok: bool, yes: str, no: str) -> Check:
    said = yes if ok else no
    said = said[:1].upper() + said[1:]  # a sentence of its own after the verdict
    return Check(ok, ("**Yes.** " if ok else "**Not yet.** ") + said)


def waiting(what: str) -> Check:
    """The answer before the learner typed a value: what to do, no verdict."""
    return Check(None, f"Nothing to check yet: {what}")


REPORT_SUFFIXES = (".nsys-rep", ".sqlite")
"""What a check takes as a report's path (the learner's own by-hand profile) rather than a step."""


def _ran(fn):
    """A check of a run: None (no value typed yet) is a waiting answer, and a run that was skipped or
    failed is a "not yet" with its reason, before anything is read."""
    import functools

    from labbook.outcome import Outcome

    @functools.wraps(fn)
    def check(x, *args, **kwargs):
        if x is None:
            return waiting("type your value in the parameters cell above, then run the cells below it.")
        if isinstance(x, Outcome) and (x.status != "ok" or x.profile is None):  # flagged runs have a profile
            return Check(False, f"**Not yet.** Your run `{x.step}` did not run ({x.status}: {x.reason}).")
        if isinstance(x, (str, Path)) and str(x).endswith(REPORT_SUFFIXES) and not Path(x).exists():
            return Check(False, f"**Not yet.** No report at `{x}`: the profile did not write one. {_log_tail(x)}")
        return fn(x, *args, **kwargs)

    return check


def _log_tail(report) -> str:
    """What the by-hand profile's log says last, or how to see why."""
    last = log_tail(report)
    if not last:
        return "Run the profile cell again and read what nsys printed."
    return f"Its log `{Path(report).with_suffix('.log')}` ends: `{last}`. Fix what it says and run the profile cell again."


def _report_of(x):
    """(report, warm-up batches) of an Outcome, a step name or a report path."""
    if isinstance(x, (str, bytes)) and str(x).endswith(REPORT_SUFFIXES):
        return labkit.load_report(x), 0
    return report(x), warmup_batches(x)


@_ran
def traced_waits(x) -> Check:
    """Notebook 01: did the learner's trace record OS runtime calls, so that time blocked in them
    (a read, a sleep, a wait on a queue) is kept apart from work in the stage table?"""
    rep, w = _report_of(x)
    n = len(rep.osrt)
    st = labkit.stage_table(rep, warmup=w)
    blocked = st[st["blocked_ms"] > 0]
    if n == 0:
        return _verdict(False, "", "this profile has no OS runtime calls: `osrt` is not in its `--trace` list, so "
                        "time a stage spent blocked counts as its work (its `blocked_ms` column is all 0). Add "
                        "`osrt` to `--trace` and profile again.")
    where = ", ".join(f"'{r.stage}' {r.blocked_ms:.0f} ms" for r in blocked.itertuples()) or "no stage (none blocked)"
    return _verdict(True, f"the profile holds {n:,} OS runtime calls, so blocked time is apart from work: "
                    f"blocked per stage: {where}.", "")


@_ran
def overlap(x) -> Check:
    """Notebook 02: do the stages of the learner's run overlap on different threads?"""
    rep, w = _report_of(x)
    st = labkit.stage_table(rep, warmup=w)
    ov = stage_overlap(rep, warmup=w)
    busy = {r.stage: int(r.threads) for r in st.itertuples()}
    nv = rep.nvtx
    tids = nv.loc[(nv["kind"] != "mark") & nv["name"].isin(list(busy)), "global_tid"].nunique() if len(nv) else 0
    ok = tids > 1 and ov["overlap_frac"] >= OVERLAP_MIN
    said = (f"the stages ran on {tids} thread(s), and {ov['overlap_frac']:.0%} of their busy time ran beside another "
            f"stage (concurrency {ov['concurrency']:.2f}; threads per stage: "
            + ", ".join(f"{k} {v}" for k, v in busy.items()) + ")")
    return _verdict(ok, said + ".", said + f": under {OVERLAP_MIN:.0%} (or one thread) is no overlap. Which option "
                    "gives each stage a thread of its own?")


@_ran
def batched(x, batch_size: int) -> Check:
    """Notebook 03: does the detector run at most once per ``batch_size`` frames (calls per frame at
    most 1/B, a last partial batch allowed)?"""
    rep, w = _report_of(x)
    st = labkit.stage_table(rep, warmup=w).set_index("stage")
    calls, items = int(st.loc["infer", "instances"]), int(st.loc["infer", "items"])
    allowed = math.ceil(items / batch_size) + 1  # the run's last batch may be partial
    per = calls / items if items else float("nan")
    said = (f"'infer' ran {calls} calls on {items} frames: {per:.3f} calls a frame against 1/{batch_size} = "
            f"{1 / batch_size:.3f} ({st.loc['infer', 'cpu_ms_per_instance']:.1f} ms a call, "
            f"{st.loc['infer', 'cpu_ms_per_item']:.1f} ms a frame)")
    return _verdict(calls <= allowed, said + ".", said + f": more calls than {allowed} means the batches were not "
                    "filled. Did the run get `batch_size`?")


@_ran
def input_size(x, before, input_hw: str, before_hw: str) -> Check:
    """Notebook 04: did ``infer``'s time per frame follow the change in input pixels (within
    :data:`PIXEL_SLACK`)? ``before`` is the run at ``before_hw``."""
    def infer_ms(y):
        rep, w = _report_of(y)
        return float(labkit.stage_table(rep, warmup=w).set_index("stage").loc["infer", "cpu_ms_per_item"])

    def pixels(hw: str) -> int:
        h, wd = (int(v) for v in str(hw).lower().split("x"))
        return h * wd

    mine, base = infer_ms(x), infer_ms(before)
    px, t = pixels(input_hw) / pixels(before_hw), mine / base
    said = (f"'infer' took {mine:.1f} ms a frame at {input_hw} against {base:.1f} ms at {before_hw}: {t:.0%} of the "
            f"time for {px:.0%} of the pixels")
    follows = abs(t - px) <= PIXEL_SLACK * max(px, 1.0) or (px < 1 and px <= t < 1) or (px > 1 and 1 < t <= px)
    return _verdict(follows and (t < 1) == (px < 1), said + ": the convolutions' cost follows the pixels; what does "
                    "not (the fixed cost of a call, layers whose cost does not scale with the image) keeps the ratio from "
                    "matching exactly.",
                    said + ": the time did not follow the pixels. Was the other run loaded, or is `infer` "
                    "bound by something besides its convolutions here?")


def int8_share(shares_mine, shares_all, level: str) -> Check:
    """Notebook 05: the INT8 model's kernel time by class (``labkit.report.ort_profile.class_shares``)
    with the learner's graph optimization ``level`` against ONNX Runtime's default ("all"): without
    the fusions, convolutions run in float between Q/DQ conversions."""
    q, qd = float(shares_mine["quantized"]), float(shares_mine["qdq"])
    q0 = float(shares_all["quantized"])
    said = (f"with graph optimizations '{level}', {q:.0%} of the INT8 model's kernel time is in quantized ops and "
            f"{qd:.0%} in Q/DQ conversions, against {q0:.0%} quantized with every optimization ('all')")
    if level == "all":
        return Check(None, said + ": the same setting as the reference; pick a lower level to see what fusion does.")
    return _verdict(q < q0, said + ": the integer kernels come from the fusion, not from the model file alone.",
                    said + ": the quantized share did not fall. Is this level one that still fuses Q/DQ groups?")


@_ran
def interval(x, k: int) -> Check:
    """Notebook 06: did the detector run on about 1/K of the frames (within :data:`SHARE_SLACK`)?"""
    from labbook.interval import detected_frames

    rep, w = _report_of(x)
    d = detected_frames(rep, warmup=w)
    ok = abs(d["share"] - 1 / k) <= SHARE_SLACK / k
    said = (f"the detector ran on {d['detected']} of {d['frames']} frames ({d['share']:.1%}) against 1/{k} = "
            f"{1 / k:.1%}, in {d['infer_calls']} calls")
    return _verdict(ok, said + ".", said + ": not about 1/K. Did the run get `interval`?")


def loop(one, mine, batch: int) -> Check:
    """Notebook 03's exercise in code: did the learner's loop (the report of its ``%%nsys`` cell, ``mine``)
    hand the detector every frame once, at most one call per ``batch`` frames (a last partial batch
    allowed), against the one-by-one loop's report ``one``? Both read from the traces' ``infer`` ranges."""
    if one is None or mine is None:
        return waiting("run both %%nsys cells in the kernel \"Python (labkit nsys)\" (Kernel > Change Kernel): "
                       "in any other kernel they run without a profile, so there is no trace to read.")
    a, b = (labkit.stage_table(r).set_index("stage").loc["infer"] for r in (one, mine))
    calls, items, frames = int(b["instances"]), int(b["items"]), int(a["items"])
    allowed = math.ceil(frames / batch)
    said = (f"your loop called `infer` {calls} times for {items} frames (B = {batch}), against {int(a['instances'])} "
            f"calls one by one; `infer` took {b['cpu_ms_per_item']:.0f} ms a frame against "
            f"{a['cpu_ms_per_item']:.0f} ms ({a['cpu_ms_per_item'] / b['cpu_ms_per_item']:.2f}x a frame, both from "
            f"the cells' traces)")
    if items != frames:
        return _verdict(False, "", said + f": the detector saw {items} frames, not the {frames} of `frames`: "
                        "hand it every frame once.")
    return _verdict(calls <= allowed, said + ".", said + f": more calls than {allowed} means some calls got fewer "
                    "than B frames. Does your loop step through the frames B at a time?")
