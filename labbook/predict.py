"""Predict, then measure: the advice a step is run under, the prediction its ledger row carries,
and the verdict once it has run.

A step's prediction comes from the profile of the step it builds on (``labkit.advise`` on that
step's latest profiled ledger row): the finding whose lever is the change this step makes (its
flags over its ``builds_on``'s, as ``detect_video.py`` options) and that finding's bound. The
baseline builds on nothing; a step whose change no finding names gets no bound. Either way the
row says so in its ``finding``, so every lab row carries a prediction.
"""
from __future__ import annotations

import functools
import math
import re

import labkit
from labkit.advice import MIN_GAIN

from labbook.display import report, warmup_batches
from labbook.reference import ledger
from labbook.settings import MODE
from labbook.steps import catalogue, step_of
from labbook.text import say

ALIASES = {("precision", "fp16"): "--fp16"}
"""Levers named by a flag of their own in ``labkit.advice`` beside the option's ``--name value``."""


def change(step: str, mode: str = MODE, *, flags: dict | None = None, builds_on: str | None = None) -> dict:
    """The options ``step`` sets differently from the step it builds on (snake case -> value)."""
    cat = catalogue(mode)
    st = step_of(step, builds_on=builds_on, mode=mode)
    mine = dict(st.flags if flags is None else flags)
    base = dict(cat[st.builds_on].flags) if st.builds_on in cat else {}
    return {k: v for k, v in mine.items() if base.get(k) != v} | {k: None for k in base if k not in mine}


def lever_flags(changed: dict) -> list[str]:
    """The command-line flags of a change (``--queues``, ``--no-osd``, ``--batch-size``...): what
    a finding's ``lever`` must name to be this change's."""
    from source_code.options import to_argv

    out = [t for t in to_argv({k: v for k, v in changed.items() if v is not None}) if t.startswith("--")]
    return out + [ALIASES[(k, v)] for k, v in changed.items() if isinstance(v, str) and (k, v) in ALIASES]


@functools.lru_cache(maxsize=16)
def _advise(path: str, warmup: int, min_gain: float = MIN_GAIN):
    return labkit.advise(labkit.load_report(path), warmup=warmup, min_gain=min_gain)


def _profile_of(step: str) -> tuple[str | None, str]:
    """(profile path, '') of a step's latest ledger row, or (None, why there is none)."""
    rows = ledger([step])
    if len(rows) == 0:
        return None, f"'{step}' has no ledger row yet (run it first)"
    row = rows.iloc[-1].to_dict()
    if row.get("status") in ("skipped", "failed"):
        return None, f"'{step}' did not run here ({row.get('status')}: {row.get('reason')})"
    path = row.get("paths.profile")
    return (path, "") if isinstance(path, str) else (None, f"'{step}' has no profiled run")


def advice_frame(step: str, mode: str = MODE, *, builds_on: str | None = None, min_gain: float = 1.0):
    """``labkit.advise`` on the profile of the step ``step`` builds on, or None with why not.

    Returns: (frame or None, why): the frame has finding, evidence, lever, predicted_speedup (x,
    an upper bound), rule; ``why`` is '' with a frame. ``min_gain``: findings with a smaller bound
    are left out (default 1.0: all, so that a lever whose bound is under the noise of a
    measurement still shows, with that bound).
    """
    base = step_of(step, builds_on=builds_on, mode=mode).builds_on
    if base is None:
        return None, f"'{step}' builds on no step: there is no earlier profile to predict from"
    path, why = _profile_of(base)
    if path is None:
        return None, why
    return _advise(path, warmup_batches(base, mode), min_gain), ""


def advice(step: str, mode: str = MODE, *, builds_on: str | None = None):
    """What the profile of the step ``step`` builds on says, shown before ``step`` runs: the
    advise table (finding, evidence, lever, predicted_speedup; every finding, those under the
    noise of a measurement too, as :func:`prediction` reads it) or a sentence saying why none."""
    frame, why = advice_frame(step, mode, builds_on=builds_on)
    if frame is None:
        return say(f"No advice for '{step}': {why}.")
    if frame.empty:
        return say(f"No finding in the profile of '{step_of(step, builds_on=builds_on, mode=mode).builds_on}'.")
    return frame[["finding", "evidence", "lever", "predicted_speedup"]]


def prediction(step: str, mode: str = MODE, *, flags: dict | None = None, builds_on: str | None = None) -> dict:
    """The prediction ``step`` is run under: ``predicted_speedup`` (the bound of the finding whose
    lever is this step's change, None when none applies) and ``finding`` (that finding, or why
    there is no bound). The largest bound wins when several findings name the change; findings
    under the noise count too (a bound of 1.01x is a prediction: no measurable gain)."""
    frame, why = advice_frame(step, mode, builds_on=builds_on)
    if frame is None:
        return {"predicted_speedup": None, "finding": f"none: {why}"}
    base = step_of(step, builds_on=builds_on, mode=mode).builds_on
    names = lever_flags(change(step, mode, flags=flags, builds_on=builds_on))
    for _, row in frame.iterrows():  # largest bound first
        if any(re.search(re.escape(n) + r"(?![\w-])", row["lever"]) for n in names):
            return {"predicted_speedup": round(float(row["predicted_speedup"]), 3), "finding": row["finding"]}
    said = ", ".join(names) or "nothing"
    return {"predicted_speedup": None,
            "finding": f"none: no finding in the profile of '{base}' names {said} as its lever"}


def _top_stage(step: str, mode: str) -> str:
    """'infer is 85 % of stage time' for a step's profile ('' without one)."""
    path, _ = _profile_of(step)
    if path is None:
        return ""
    t = labkit.bottleneck(labkit.load_report(path), warmup=warmup_batches(step, mode)).table
    if t.empty:
        return ""
    per = t.groupby("stage")["self_ms"].sum()
    return f"'{per.idxmax()}' is {per.max() / per.sum():.0%} of stage time"


def moved_most(before: dict, after: dict) -> str:
    """'infer' took 207.5 ms a frame in 'baseline' and 50.0 ms here': the stage whose time per
    frame (ledger ``stage_ms.*``, timed in-process) changed most between two rows; '' if none."""
    keys = [k for k in after if k.startswith("stage_ms.") and isinstance(before.get(k), float)
            and isinstance(after.get(k), float) and before[k] == before[k] and after[k] == after[k]]
    if not keys:
        return ""
    k = max(keys, key=lambda k: abs(after[k] - before[k]))
    return f"'{k[9:]}' took {before[k]:.1f} ms a frame in '{before['step']}' and {after[k]:.1f} ms here"


def _lesson(measured: float, bound: float, moved: str) -> str:
    also = f" ({moved})" if moved else ""
    if measured > bound * MIN_GAIN:
        return ("above the bound: more changed than the finding's lever could change, such as a stage the "
                f"change should not touch{also}; profile both runs and compare their stages")
    if measured > bound:
        return f"at the bound, within the {MIN_GAIN - 1:.0%} noise of a measurement: the change gained all it could"
    if measured < 1 / MIN_GAIN:
        return ("inside the bound, but slower: a bound counts only the time a change can save, not what the change "
                f"costs or what else changed between the runs{also}")
    if measured < MIN_GAIN:
        return "inside the bound, with no gain beyond the noise of a measurement: the bound is a limit, not a promise"
    saved = (1 - 1 / measured) / (1 - 1 / bound) if bound > 1 else 1.0
    return (f"inside the bound: the change saved {saved:.0%} of the time the bound allows (the bound assumes the "
            "finding's time disappears entirely)")


def verdict(step: str, mode: str = MODE):
    """After a step ran: its measured speed-up over its ``builds_on`` beside the bound its ledger
    row was run under, and what that teaches, as one computed sentence."""
    rows = ledger([step])
    if len(rows) == 0:
        return say(f"No verdict for '{step}': it has no ledger row yet (run it first).")
    row = rows.iloc[-1].to_dict()
    base = row.get("builds_on") if isinstance(row.get("builds_on"), str) else None
    if row.get("status") != "ok" or base is None:
        why = row.get("reason") if row.get("status") != "ok" else "it builds on no step"
        return say(f"No verdict for '{step}': {why}.")
    before = ledger([base])
    if len(before) == 0 or not before.iloc[-1].get("fps", math.nan) > 0:
        return say(f"No verdict for '{step}': '{base}', which it builds on, has no measured fps here.")
    measured = float(row["fps"]) / float(before.iloc[-1]["fps"])
    bound = row.get("predicted_speedup")
    head = f"{step}: measured {measured:.2f}x over '{base}'"
    if not isinstance(bound, (int, float)) or not bound == bound:
        return say(f"{head}; no bound was predicted ({row.get('finding', 'no prediction recorded')}).")
    top = _top_stage(base, mode)
    ctx = f" ({top})" if top else ""
    lesson = _lesson(measured, bound, moved_most(before.iloc[-1].to_dict(), row))
    return say(f"{head}, bound {bound:.2f}x from '{row.get('finding')}'{ctx}: {lesson}.")


def next_lever(step: str, mode: str = MODE):
    """The next lever, from the advice on ``step``'s own profile (``labkit.next_lever``)."""
    path, why = _profile_of(step)
    if path is None:
        return say(f"No next lever from '{step}': {why}.")
    return say(labkit.next_lever(labkit.load_report(path), warmup=warmup_batches(step, mode)))
