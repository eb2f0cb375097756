"""Running lab steps: one benchmarked and profiled step, or a sweep of one option, each leaving
ledger rows that say what the step is (kind, builds_on) and how it went (status)."""
from __future__ import annotations

import time

import pandas as pd
from typing import Mapping

from labkit import bench
from labkit.bench.truth import ledger_ceiling
from labkit.errors import LabkitError
from labkit.bench.ledger import Ledger, not_run

from labbook.app import app_argv, app_options, capture_range, unavailable
from labbook.outcome import Outcome
from labbook.plan import Plan, check_guess, resolve
from labbook.text import Status
from labbook.replay import replay_step
from labbook.settings import LEDGER, MODE, PROFILES, REPLAY, RESULTS, settings, strict
from labbook.steps import Step, step_of
from labbook.steps import flags as step_flags


def run_step(name: str, *, profile: bool = True, mode: str = MODE, kind: str | None = None,
             builds_on: str | None = None, env: Mapping[str, str] | None = None,
             predicted_speedup: float | None = None, finding: str | None = None, guess: float | None = None,
             repeats: int | None = None, **flags) -> Outcome:
    """Benchmark one lab step: a profiled run under nsys, then the mode's measured repeats.

    ``flags`` are ``detect_video.py`` options (snake case). ``kind`` and ``builds_on`` default
    to the catalogue's (a step it lacks is an ``exercise``, kept out of the lab's table);
    ``env``: extra environment variables for the application (an exercise's, say); ``guess``:
    your guess of the speed-up over ``builds_on`` (x), kept in the ledger row for the verdict;
    ``repeats``: measured runs after the profiled one (default: the mode's; an exercise's check
    reads its profile, so one is enough there).
    The step is resolved once (:func:`labbook.plan.resolve`): the run and its ledger row read
    that one value. Appends one ledger row to ``LEDGER`` in every case and returns an
    :class:`Outcome`: ok, skipped (the flags need what this machine lacks; nothing runs) or
    failed (any ``LabkitError``: the run, nsys, the report or the ledger; the row's reason is
    the error's first line; under ``LABKIT_STRICT`` the error is raised instead).
    """
    if REPLAY is not None:  # the recorded row, profile and results: nothing runs
        return replay_step(name, kind=kind, builds_on=builds_on, guess=guess, predicted_speedup=predicted_speedup,
                           finding=finding)
    plan = resolve(name, mode=mode, kind=kind, builds_on=builds_on, flags=flags, guess=guess,
                   predicted_speedup=predicted_speedup, finding=finding)
    return run_plan(plan, profile=profile, env=env, repeats=repeats)


def run_plan(plan: Plan, *, profile: bool = True, env: Mapping[str, str] | None = None,
             extra_labels: Mapping | None = None, repeats: int | None = None) -> Outcome:
    """Run a resolved step (see :func:`run_step`); the first step of a machine and mode measures
    the decode-only ceiling first (:func:`decode_ceiling`)."""
    labels, led, s = {**plan.labels(), **dict(extra_labels or {})}, Ledger(LEDGER), plan.settings
    flags = dict(plan.flags)
    done = dict(kind=plan.kind, builds_on=plan.builds_on)
    reason = unavailable(**flags)
    if reason:
        led.append(not_run(plan.name, status="skipped", reason=reason, config=flags, labels=labels))
        return Outcome(plan.name, "skipped", reason, **done)
    if not extra_labels:
        decode_ceiling(plan.mode)
    options = app_options(flags, mode=plan.mode)
    repeats = s.repeats if repeats is None else int(repeats)
    line = Status(f"`{plan.name}`: {'one run under nsys, then ' if profile else ''}{repeats} measured run(s) of "
                  f"{options['frames']} frames, running...")
    t0 = time.monotonic()
    try:
        result = bench.run(app_argv(options), step=plan.name, repeats=repeats, warmup=None, profile=profile,
                           ledger=led, results_dir=RESULTS, profile_dir=PROFILES, env=env, progress=True,
                           capture_range=capture_range(flags), config=options, labels=labels, mode=plan.mode)
    except LabkitError as e:
        line.update(f"`{plan.name}`: failed after {time.monotonic() - t0:.0f} s.")
        if strict():
            raise
        why = failure_line(e)
        try:
            led.append(not_run(plan.name, status="failed", reason=why, config=options, labels=labels))
        except LabkitError as e2:  # the ledger itself is the fault: say both in the outcome
            why = f"{why} (and no ledger row: {failure_line(e2)})"
        return Outcome(plan.name, "failed", why, **done)
    line.update(f"`{plan.name}`: done in {time.monotonic() - t0:.0f} s.")
    return Outcome(plan.name, "ok", result=result, **done)


def run_scaled(step: Step, *, mode: str = MODE, guess: float | None = None) -> Outcome:
    """Run one of notebook 08's steps (``labbook.steps.scale_out``): ``processes<n>``, n copies side
    by side (``labkit.bench.run_parallel``), or ``ranks<n>`` under its launcher (``labkit.bench.run``
    with the step's ``launch``). No profile: 08 profiles the ranks itself. A step this machine cannot
    run is a skipped row, a run that fails a failed row (the application's or torchrun's error
    line; raised under ``LABKIT_STRICT``), and the lab goes on either way. ``guess``: the learner's
    guess of the speed-up over the step it builds on, kept in its ledger row."""
    if REPLAY is not None:
        return replay_step(step.name, kind=step.kind, builds_on=step.builds_on, guess=guess)
    flags, led, labels = dict(step.flags), Ledger(LEDGER), step.labels()
    if check_guess(guess) is not None:
        labels["guess"] = float(guess)
    done = dict(kind=step.kind, builds_on=step.builds_on)
    why = unavailable(**flags)
    if why:
        led.append(not_run(step.name, status="skipped", reason=why, config=flags, labels=labels))
        return Outcome(step.name, "skipped", why, **done)
    common = dict(step=step.name, warmup=None, config=flags, labels=labels, ledger=led, results_dir=RESULTS,
                  progress=True, mode=mode)
    try:
        if "processes" in step.launch:
            result = bench.run_parallel(app_argv(flags), processes=step.launch["processes"], **common)
        else:
            result = bench.run(app_argv(flags), repeats=settings(mode).repeats, **common, **step.launch)
    except LabkitError as e:
        if strict():
            raise
        why = failure_line(e)
        led.append(not_run(step.name, status="failed", reason=why, config=flags, labels=labels))
        return Outcome(step.name, "failed", why, **done)
    return Outcome(step.name, "ok", result=result, **done)


CEILING_STEP = "decode_ceiling"
CEILING_FLAGS = {"decode_only": True, "queues": True}
"""The decode-only run of the lab's source (a decoder thread, as the queued steps have): how fast
this machine decodes the clip with nothing after it, the ceiling no step can truly pass."""


def decode_ceiling(mode: str = MODE, *, profile: bool = False) -> Outcome | None:
    """Measure the decode-only rate of the lab's source once per machine and mode: a ledger row
    labelled ``ceiling: "decode"`` (``labkit.bench`` then flags every later row of this host and
    mode whose frames/s is above it beyond the spread). Returns the run's outcome, or None when
    the ledger already has an ok one for this host and mode."""
    if REPLAY is not None:
        return replay_step(CEILING_STEP, kind="exercise")
    if ledger_ceiling(LEDGER, mode) is not None:
        return None  # the row labkit.bench itself checks later rows against
    plan = resolve(CEILING_STEP, mode=mode, kind="exercise", flags=CEILING_FLAGS,
                   finding="none: the decode-only ceiling is a measurement, not a change")
    return run_plan(plan, profile=profile, extra_labels={"ceiling": "decode", "mode": mode})


def failure_line(e: BaseException) -> str:
    """One line for a failed step's ledger row: the application's error line for a
    ``BenchError``, else the error's own first line."""
    if isinstance(e, bench.BenchError):
        return bench.error_line(e)
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def ensure(*steps: str, profile: bool = True, mode: str = MODE) -> list[Outcome]:
    """Run each catalogue step of ``steps`` that has no ok ledger row yet (in order), so a
    notebook runs on an empty ledger or after a kernel restart; steps already run are left as
    they are. Returns the outcomes of the steps it ran."""
    from labbook.reference import ledger

    done = ledger(list(steps))
    ok = set(done.loc[done["status"].fillna("ok") == "ok", "step"]) if len(done) and "status" in done else \
        set(done["step"]) if len(done) else set()
    if profile and REPLAY is None and len(done) and "paths.profile" in done:  # a replay has the profiles it has
        ok &= set(done.loc[done["paths.profile"].notna(), "step"])
    return [run_step(st, profile=profile, mode=mode) for st in steps if st not in ok]


def sweep(builds_on: str, option: str, values, *, step: str, mode: str = MODE, flags: dict | None = None):
    """``labkit.bench.sweep`` of one option over ``values`` on top of the step ``builds_on``
    (its flags, or ``flags`` when given): no profiles, one ledger row per value, each of kind
    ``sweep`` (or the catalogue's) built on ``builds_on``. Returns the sweep's frame, or a
    skipped :class:`Outcome` (with a skipped row per value) when the flags need what this machine
    lacks. A value whose run fails is a frame row with its ``error`` and a failed ledger row."""
    base = dict(step_flags(builds_on, mode) if flags is None else flags)
    names = [step.format(value=v) for v in values]
    if REPLAY is not None:
        return replay_sweep(option, values, names, builds_on)
    reason = unavailable(**base)
    if reason:
        for name, value in zip(names, values):
            st = step_of(name, builds_on=builds_on, mode=mode, default_kind="sweep")
            Ledger(LEDGER).append(not_run(name, status="skipped", reason=reason, config={**base, option: value},
                                          labels=st.labels()))
        return Outcome(step, "skipped", reason, kind="sweep", builds_on=builds_on)
    s = settings(mode)

    each = {v: app_options({**base, option: v}, mode=mode) for v in values}  # its frames follow the queues it fills
    frames = sorted({o["frames"] for o in each.values()})
    line = Status(f"sweep of `{option}` over {list(values)}: {len(names) * s.repeats} run(s) of "
                  f"{frames[0]}{f'-{frames[-1]}' if len(frames) > 1 else ''} frames, running...")
    def labels(value) -> dict:  # each value's own prediction (its K, its batch), made when its turn comes
        return resolve(step.format(value=value), builds_on=builds_on, mode=mode, default_kind="sweep",
                       flags={**base, option: value}).labels()

    t0 = time.monotonic()
    out = bench.sweep(lambda v: app_argv(each[v]), option, list(values), step=step,
                      config=each.__getitem__, repeats=s.repeats, warmup=None, ledger=LEDGER, results_dir=RESULTS,
                      progress=True, on_error="raise" if strict() else "record", labels=labels, mode=mode)
    line.update(f"sweep of `{option}` over {list(values)}: done in {time.monotonic() - t0:.0f} s.")
    return out


def replay_sweep(option: str, values, names: list[str], builds_on: str):
    """A sweep as the recording has it (``labbook.replay``): one replayed row per value, returned as
    ``labkit.bench.sweep``'s frame (the option, step, name, ok, error and the row's metrics)."""
    rows = []
    for name, value in zip(names, values):
        o = replay_step(name, kind="sweep", builds_on=builds_on)
        if o.status == "ok":
            rows.append({option: value, "step": name, "name": o.result.name, "ok": o.ok, "error": None,
                         **o.result.metrics})
        else:
            rows.append({option: value, "step": name, "name": None, "ok": False, "error": o.reason, "fps": float("nan")})
    return pd.DataFrame(rows)
