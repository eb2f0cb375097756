"""Predict, then measure: the advice a step is run under, the prediction its ledger row carries,
and the verdict once it has run.

A step's prediction comes from the profile of the step it builds on (``labkit.advise`` on that
step's latest profiled ledger row): the finding whose lever id is one the change this step makes
pulls (its options over its ``builds_on``'s, mapped to lever ids by ``labbook.levers``), with
that finding's figure. The figure is an *estimate* with its assumptions, unless labkit's row
says its ``basis`` is "bound". The baseline builds on nothing; a step whose change no finding
names gets no estimate. Either way the row says so in its ``finding``, so every lab row carries
a prediction; the learner's ``guess`` (recorded before the estimate is shown) sits beside it.
"""
from __future__ import annotations

import functools
import math
import re

import labkit
from labkit.judge.advice import MIN_GAIN, finding_sentence

from labbook import stage_factor
from labbook.display import warmup_batches
from labbook.levers import ADVISE, OPTIONS_OF, flags_of, lever_text, levers_of
from source_code.stages import DETECTOR_STAGES
from labbook.reference import ledger
from labbook.settings import MODE
from labbook.steps import catalogue, step_of
from labbook.text import folded, folded_frame, say

ALIASES = {("precision", "fp16"): "--fp16"}
"""Flags older ``labkit.judge.advice`` tables named beside the option's ``--name value`` (read only by
the fallback for a ``lever`` that is not a lever id)."""

NONE = {"predicted_speedup": None, "basis": None, "assumptions": None, "lever": None}


def change_of(flags, base_flags) -> dict:
    """The options ``flags`` sets differently from ``base_flags`` (snake case -> value; an option
    the base set and ``flags`` drops maps to None)."""
    mine, base = dict(flags), dict(base_flags)
    return {k: v for k, v in mine.items() if base.get(k) != v} | {k: None for k in base if k not in mine}


def change(step: str, mode: str = MODE, *, flags: dict | None = None, builds_on: str | None = None) -> dict:
    """The options ``step`` sets differently from the step it builds on (snake case -> value)."""
    st = step_of(step, builds_on=builds_on, mode=mode)
    return change_of(st.flags if flags is None else flags, _base_flags(st.builds_on, mode))


def _base_flags(base: str | None, mode: str) -> dict:
    cat = catalogue(mode)
    return dict(cat[base].flags) if base in cat else {}


def lever_flags(changed: dict) -> list[str]:
    """The command-line flags of a change (``--queues``, ``--no-osd``, ``--batch-size``...)."""
    from source_code.options import to_argv

    out = [t for t in to_argv({k: v for k, v in changed.items() if v is not None}) if t.startswith("--")]
    return out + [ALIASES[(k, v)] for k, v in changed.items() if isinstance(v, str) and (k, v) in ALIASES]


@functools.lru_cache(maxsize=16)
def _advise(path: str, warmup: int, min_gain: float = MIN_GAIN, ceiling: float | None = None, params: tuple = ()):
    kw = dict(params)
    if "call_cost" in kw:
        kw["call_cost"] = dict(kw["call_cost"])
    return labkit.advise(labkit.load_report(path), warmup=warmup, min_gain=min_gain, decode_ceiling_fps=ceiling,
                         **ADVISE, **kw)


def call_cost(builds_on: str, batch_size: int | None, mode: str = MODE) -> tuple[dict, str]:
    """The fixed cost of one call of each detector stage (ms, whatever the call carries), fitted
    over this machine's ledger rows of the steps whose flags differ from ``builds_on``'s in their
    batch size only (``builds_on`` itself and the sweep's values; ``batch_size``, the size to
    predict, left out; None: none left out): a frame's time in a stage at batch b is
    fixed / b + per item (least squares over 1 / b). Returns ({stage: ms}, the batch sizes it was
    fitted over as words), or ({}, why not) with fewer than two batch sizes."""
    import numpy as np

    cat = catalogue(mode)
    base = _base_flags(builds_on, mode)
    same = [n for n, stp in cat.items() if n == builds_on or set(change_of(stp.flags, base)) == {"batch_size"}]
    rows = ledger(same)
    if len(rows) == 0:
        return {}, "no run to fit a call's cost from"
    if "status" in rows:
        rows = rows[rows["status"].fillna("ok").eq("ok")]
    b = rows["config.batch_size"].fillna(1).astype(int) if "config.batch_size" in rows else None
    if b is None or b[b != batch_size].nunique() < 2:
        other = f" other than {batch_size}" if batch_size else ""
        return {}, f"a call's fixed cost needs runs at two batch sizes{other} (run the sweep first)"
    keep = (b != batch_size).to_numpy()
    out = {}
    for stage in DETECTOR_STAGES:
        col = f"stage_ms.{stage}"
        if col not in rows:
            continue
        t = rows.loc[keep, col].astype(float)
        x = 1.0 / b[keep].astype(float)
        ok = t.notna()
        if x[ok].nunique() < 2:
            continue
        fixed, _ = np.polyfit(x[ok].to_numpy(), t[ok].to_numpy(), 1)
        if fixed > 0:
            out[stage] = round(float(fixed), 3)
    sizes = ", ".join(map(str, sorted(set(b[keep]))))
    return out, f"batch sizes {sizes}"


def _params(builds_on: str | None, flags, mode: str) -> tuple:
    """advise's arguments for a step's own parameters: its interval K (``skip_every``) and, for a
    larger batch than its base's, the fitted cost of a call (``call_cost``, ``batch_to``)."""
    flags, out = dict(flags or {}), {}
    k = flags.get("interval")
    b, b0 = flags.get("batch_size"), _base_flags(builds_on, mode).get("batch_size", 1) if builds_on else 1
    if isinstance(k, int) and k > 1:
        out["skip_every"] = k
        cost, _ = call_cost(builds_on, None, mode) if builds_on else ({}, "")
        if cost:  # fewer detected frames per call: its fixed cost is paid by fewer frames
            out["call_cost"] = tuple(sorted(cost.items()))
    if isinstance(b, int) and b > (b0 or 1) and builds_on:
        cost, _ = call_cost(builds_on, b, mode)
        if cost:
            out["call_cost"], out["batch_to"] = tuple(sorted(cost.items())), b
    return tuple(sorted(out.items()))


def decode_ceiling_fps(mode: str = MODE) -> float | None:
    """Frames/s of the ledger's decode-only run of this machine and mode (``labbook.runs``), or None."""
    from labkit.bench.truth import ledger_ceiling

    from labbook import reference  # its LEDGER: the one ledger every labbook reader reads

    fps = ((ledger_ceiling(reference.LEDGER, mode) or {}).get("metrics") or {}).get("fps")
    return float(fps) if fps else None


def latest_profile(step: str) -> tuple[str | None, str]:
    """(profile path, '') of a step's latest ledger row, or (None, why there is none)."""
    rows = ledger([step])
    if len(rows) == 0:
        return None, f"'{step}' has no ledger row yet (run it first)"
    row = rows.iloc[-1].to_dict()
    if row.get("status") in ("skipped", "failed"):
        return None, f"'{step}' did not run here ({row.get('status')}: {row.get('reason')})"
    path = row.get("paths.profile")
    return (path, "") if isinstance(path, str) else (None, f"'{step}' has no profiled run")


def _advice_on(base: str | None, step: str, mode: str, min_gain: float = 1.0, flags=None):
    """(``labkit.advise`` frame on the profile of ``base``, '') or (None, why not); ``flags``: the
    step's own, whose parameters (K, the batch size) the estimates take (:func:`_params`)."""
    if base is None:
        return None, f"'{step}' builds on no step: there is no earlier profile to predict from"
    path, why = latest_profile(base)
    if path is None:
        return None, why
    return _advise(path, warmup_batches(base, mode), min_gain, decode_ceiling_fps(mode),
                   _params(base, flags, mode)), ""


def advice_frame(step: str, mode: str = MODE, *, builds_on: str | None = None, min_gain: float = 1.0,
                 flags: dict | None = None):
    """``labkit.advise`` on the profile of the step ``step`` builds on, or None with why not.

    Returns: (frame or None, why): the frame has finding, evidence, lever (a lever id of
    ``labkit.judge.advice``), predicted_speedup (x: an estimate, or an upper bound where its ``basis``
    says "bound"), rule; ``why`` is '' with a frame. ``min_gain``: findings with a smaller figure
    are left out (default 1.0: all of them).
    """
    st = step_of(step, builds_on=builds_on, mode=mode)
    return _advice_on(st.builds_on, step, mode, min_gain, st.flags if flags is None else flags)


def advice(step: str, mode: str = MODE, *, builds_on: str | None = None, flags: dict | None = None):
    """What the profile of the step ``step`` builds on says, shown before ``step`` runs: the
    advise table, each lever named with this application's flags (``labbook.levers``), or a
    sentence saying why there is none. ``flags``: the step's own where the catalogue lacks it (an
    interval or a batch size of your own): its estimates take its K and batch size."""
    frame, why = advice_frame(step, mode, builds_on=builds_on, flags=flags)
    if frame is None:
        return say(f"No advice for '{step}': {why}.")
    if frame.empty:
        return say(f"No finding in the profile of '{step_of(step, builds_on=builds_on, mode=mode).builds_on}'.")
    st = step_of(step, builds_on=builds_on, mode=mode)
    fl = dict(st.flags if flags is None else flags)
    changed = _effective(change_of(fl, _base_flags(st.builds_on, mode)), fl, st.builds_on, mode)
    if stage_factor.applies(changed):  # what the step will be predicted with comes first
        import pandas as pd

        own = _stage_alone(st, fl, frame, (levers_of(changed) or [None])[0], mode)
        head = {**own, "rule": "stage_alone", "evidence": "the detector stage alone, timed under this step's options "
                "and under its base's in interleaved pairs (source_code/stage_alone.py)"}
        frame = pd.concat([pd.DataFrame([head]), frame], ignore_index=True)
    out = frame.assign(lever=[lever_text(v) if v in OPTIONS_OF else v for v in frame["lever"]])
    cols = [c for c in ("finding", "evidence", "lever", "predicted_speedup", "basis", "assumptions") if c in out]
    return folded_frame(out[cols].reset_index(drop=True), shown=("finding", "lever", "predicted_speedup", "basis"),
                        folded=("evidence", "assumptions"), summary="Evidence and assumptions, per finding")


def _matches(row, levers: list[str], names: list[str]) -> bool:
    lever = row.get("lever")
    if lever in OPTIONS_OF:  # a lever id: the change pulls it
        return lever in levers
    return any(re.search(re.escape(n) + r"(?![\w-])", str(lever)) for n in names)  # an older table's text


def predict_for(st, flags, mode: str = MODE) -> dict:
    """The prediction a resolved step (``labbook.steps.Step`` and the flags it runs with) is run
    under: ``predicted_speedup``, ``basis`` ("bound" only where labkit's row says so, else
    "estimate"), ``assumptions``, ``lever`` and ``finding`` (or why there is none)."""
    frame, why = _advice_on(st.builds_on, st.name, mode, flags=flags)
    if frame is None:
        return {**NONE, "finding": f"none: {why}"}
    changed = _effective(change_of(flags, _base_flags(st.builds_on, mode)), flags, st.builds_on, mode)
    levers, names = levers_of(changed), lever_flags(changed)
    if stage_factor.applies(changed):  # a factor on the detector the profile cannot know: measured alone
        return _stage_alone(st, flags, frame, levers[0] if levers else None, mode)
    for _, row in frame.iterrows():  # largest figure first
        row = row.to_dict()
        if _matches(row, levers, names):
            basis = row.get("basis") if row.get("basis") in ("bound", "estimate") else "estimate"
            lever = row["lever"] if row.get("lever") in OPTIONS_OF else (levers[0] if levers else None)
            return {"predicted_speedup": round(float(row["predicted_speedup"]), 3), "finding": row["finding"],
                    "basis": basis, "lever": lever, "assumptions": _text(row.get("assumptions"))}
    said = ", ".join(lever_text(v) for v in levers) or ", ".join(names) or "nothing"
    return {**NONE, "lever": levers[0] if levers else None,
            "finding": f"none: no finding in the profile of '{st.builds_on}' names {said} as its lever"}


def _effective(changed: dict, flags, base: str | None, mode: str) -> dict:
    """``changed`` less a device it names that is the one the base ran on anyway (``cpu`` over
    ``auto`` on a machine without a GPU)."""
    from labbook.app import device_of

    if "device" in changed and device_of(dict(flags)) == device_of(_base_flags(base, mode)):
        return {k: v for k, v in changed.items() if k != "device"}
    return changed


def _stage_alone(st, flags, frame, lever: str | None, mode: str) -> dict:
    """The prediction of a change that only changes how the detector computes: its factor on the
    stage alone (:mod:`labbook.stage_factor`), replayed in the base's profile (``labkit.what_if``)."""
    from labbook.app import app_options

    doc, why = stage_factor.measure(app_options(_base_flags(st.builds_on, mode), mode=mode),
                                    app_options(dict(flags), mode=mode))
    if doc is None:
        return {**NONE, "lever": lever, "finding": f"none: this change makes '{stage_factor.STAGE}' faster or slower "
                f"by a factor no profile shows, and it could not be measured alone here: {why}"}
    path, _ = latest_profile(st.builds_on)
    p = labkit.what_if(labkit.load_report(path), (stage_factor.STAGE,), float(doc["factor"]),
                       factor_range=(float(doc["low"]), float(doc["high"])), window=frame.attrs.get("window"))
    return {"predicted_speedup": round(p.speedup, 3), "basis": "estimate", "lever": lever,
            "finding": f"'{stage_factor.STAGE}' measured alone under this change ({doc['factor']:.2f}x its time), "
                       f"replayed in the profile of '{st.builds_on}'",
            "assumptions": f"{stage_factor.words(doc)}; the replay's range {p.low:.2f}-{p.high:.2f}x"}


def _text(value) -> str | None:
    if isinstance(value, (list, tuple)):
        return "; ".join(map(str, value)) or None
    return value if isinstance(value, str) and value else None


def prediction(step: str, mode: str = MODE, *, flags: dict | None = None, builds_on: str | None = None) -> dict:
    """The prediction ``step`` would run under (see :func:`predict_for`)."""
    st = step_of(step, builds_on=builds_on, mode=mode)
    return predict_for(st, st.flags if flags is None else flags, mode)


def _top_stage(step: str, mode: str) -> str:
    """'infer is 85 % of stage time' for a step's profile ('' without one)."""
    path, _ = latest_profile(step)
    if path is None:
        return ""
    t = labkit.bottleneck(labkit.load_report(path), warmup=warmup_batches(step, mode)).table
    if t.empty:
        return ""
    per = t.groupby("stage")["self_ms"].sum()
    return f"'{per.idxmax()}' is {per.max() / per.sum():.0%} of stage time"


def moved_most(before: dict, after: dict) -> str:
    """"'infer' 207.5 → 50.0 ms a frame": the stage whose time per frame (ledger ``stage_ms.*``,
    timed in-process) changed most between two rows; '' if none."""
    keys = [k for k in after if k.startswith("stage_ms.") and isinstance(before.get(k), float)
            and isinstance(after.get(k), float) and before[k] == before[k] and after[k] == after[k]]
    if not keys:
        return ""
    k = max(keys, key=lambda k: abs(after[k] - before[k]))
    return f"'{k[9:]}' {before[k]:.1f} → {after[k]:.1f} ms a frame"


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value == value else None


def ratio_interval(row: dict, before: dict) -> tuple[float, float] | None:
    """The 95 % interval of ``row``'s speed-up over ``before`` from both rows' fps intervals
    (``fps_ci_low``/``fps_ci_high``, labkit.bench): (low / other's high, high / other's low), or
    None where either row has no interval."""
    lo, hi = _num(row.get("fps_ci_low")), _num(row.get("fps_ci_high"))
    blo, bhi = _num(before.get("fps_ci_low")), _num(before.get("fps_ci_high"))
    if None in (lo, hi, blo, bhi) or not blo > 0:
        return None
    return lo / bhi, hi / blo


def _lesson(measured: float, figure: float, basis: str, ci: tuple[float, float] | None) -> tuple[str, str]:
    """Where the measurement fell against the estimate or bound, by its interval: (a few words for
    the verdict's line, the explanation for its fold)."""
    lo, hi = ci if ci else (measured / MIN_GAIN, measured * MIN_GAIN)  # no interval: the usual noise
    noise = "its 95 % interval" if ci else f"the {MIN_GAIN - 1:.0%} noise of a measurement"
    if lo <= 1.0 <= hi:
        return "within noise of no change", f"{noise} covers 1.0x: this step did not measurably pay here."
    if lo <= figure <= hi:
        return f"within noise of the {basis}", f"{noise} covers the {basis}'s {figure:.2f}x."
    if basis == "bound" and lo > figure:
        return "above the bound", ("beyond the noise: more changed than the finding's lever could change, such as "
                                   "a stage the change should not touch; profile both runs and compare their stages.")
    if hi < 1.0:
        return "slower", f"beyond the noise: the {basis} counts only the time a change can save, not what it costs."
    if basis == "bound":
        saved = (1 - 1 / measured) / (1 - 1 / figure) if figure > 1 else 1.0
        return f"inside the bound ({saved:.0%} of what it allows)", (
            f"the change saved {saved:.0%} of the time the bound allows: a bound is what the lever could do at most.")
    side = "over" if measured < figure else "under"
    return f"the estimate was {side} by {max(measured, figure) / min(measured, figure):.1f}x", (
        "an estimate rests on its assumptions, and the measurement is what this machine did.")


def _guess_text(guess, measured: float, ci) -> str:
    g = _num(guess)
    if g is None:
        return ""
    lo, hi = ci if ci else (measured / MIN_GAIN, measured * MIN_GAIN)
    where = "within noise of the measurement" if lo <= g <= hi else ("above" if g > hi else "below") + " it"
    return f"; your guess {g:.2f}x ({where})"


def verdict(step: str, mode: str = MODE):
    """After a step ran, one line: its measured speed-up over its ``builds_on`` (with its 95 %
    interval where the rows have one), the learner's guess, the estimate (or bound) its ledger row
    was run under and where the measurement fell against it, and the stage whose time moved most;
    under a fold, why (the finding the figure came from, what it assumes, the base's top stage, what
    the outcome teaches). Reads only the two ledger rows (and the base's profile for context): the
    step is not looked up again."""
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
    b = before.iloc[-1].to_dict()
    measured = float(row["fps"]) / float(b["fps"])
    ci = ratio_interval(row, b)
    span = f" (95 % interval {ci[0]:.2f}-{ci[1]:.2f}x)" if ci else " (one measurement: no interval)"
    head = f"{step}: measured {measured:.2f}x over '{base}'{span}{_guess_text(row.get('guess'), measured, ci)}"
    moved = moved_most(b, row)
    tail = f"; {moved}." if moved else "."
    if row.get("above_decode_ceiling") is True:
        return folded(f"{head}; faster than decoding its own input alone: no speed-up{tail}",
                      "No pipeline can run faster than decoding its own input alone: this row is a run too short "
                      "or a clock that counts work done before it (see the row's flags).")
    figure = _num(row.get("predicted_speedup"))
    if figure is None:
        return folded(f"{head}; no estimate{tail}", f"No estimate was computed: {row.get('finding', 'no prediction recorded')}.")
    basis = row.get("basis") if row.get("basis") in ("bound", "estimate") else "estimate"
    assumes = row.get("assumptions") if isinstance(row.get("assumptions"), str) else ""
    top = _top_stage(base, mode)
    short, why = _lesson(measured, figure, basis, ci)
    ctx = "; ".join(x for x in (f"in '{base}', {top}" if top else "", f"it assumes {assumes}" if assumes else "") if x)
    return folded(f"{head}; {basis} {figure:.2f}x: {short}{tail}",
                  f"The {basis} {figure:.2f}x came from the finding \"{row.get('finding')}\""
                  + (f" ({ctx})" if ctx else "") + f". Measured {measured:.2f}x: {why}")


def next_lever(step: str, mode: str = MODE):
    """The next lever, from the advice on ``step``'s own profile (``labkit.next_lever``)."""
    path, why = latest_profile(step)
    if path is None:
        return say(f"No next lever from '{step}': {why}.")
    a = _advise(path, warmup_batches(step, mode), MIN_GAIN, decode_ceiling_fps(mode))
    if a.empty:
        return say(f"No lever worth a step after '{step}': {a.attrs['note']}.")
    top = a.iloc[0]
    here = lever_text(top["lever"]) if flags_of(top["lever"]) else f"{top['lever']} (no one flag of this application)"
    kind = "an upper bound" if top.get("basis") == "bound" else "an estimate"
    return folded(f"Next lever after '{step}': {top['lever_text']}, in this application {here}: "
                  f"{top['finding']}, {float(top['predicted_speedup']):.2f}x ({kind}).", finding_sentence(top),
                  summary="Evidence and assumptions")
