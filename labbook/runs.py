"""Running lab steps: one benchmarked and profiled step, or a sweep of one option, each leaving
ledger rows that say what the step is (kind, builds_on) and how it went (status)."""
from __future__ import annotations

import time
from typing import Mapping

from labkit import bench
from labkit.errors import LabkitError
from labkit.ledger import Ledger, not_run

from labbook.app import app_argv, app_options, capture_range, unavailable
from labbook.outcome import Outcome
from labbook.predict import prediction
from labbook.text import Status
from labbook.settings import LEDGER, MODE, PROFILES, RESULTS, settings, strict
from labbook.steps import flags as step_flags
from labbook.steps import step_of


def _labels(step, predicted_speedup, finding, *, mode: str = MODE, flags: dict | None = None) -> dict:
    """The step's ledger labels, with the prediction it runs under: the caller's, else
    :func:`labbook.predict.prediction` from the profile of the step it builds on."""
    extra = {"predicted_speedup": predicted_speedup, "finding": finding}
    if predicted_speedup is None and finding is None:
        try:
            extra = prediction(step.name, mode, flags=flags, builds_on=step.builds_on)
        except LabkitError as e:  # an unreadable profile: the row says so, the step still runs
            extra = {"predicted_speedup": None, "finding": f"none: {str(e).splitlines()[0]}"}
    return {**step.labels(), **{k: v for k, v in extra.items() if v is not None}}


def run_step(name: str, *, profile: bool = True, mode: str = MODE, kind: str | None = None,
             builds_on: str | None = None, env: Mapping[str, str] | None = None,
             predicted_speedup: float | None = None, finding: str | None = None, **flags) -> Outcome:
    """Benchmark one lab step: a profiled run under nsys, then the mode's measured repeats.

    ``flags`` are ``detect_video.py`` options (snake case). ``kind`` and ``builds_on`` default
    to the catalogue's (a step it lacks is an ``exercise``, kept out of the lab's table);
    ``env``: extra environment variables for the application (an exercise's, say).
    Appends one ledger row to ``LEDGER`` in every case and returns an :class:`Outcome`: ok,
    skipped (the flags need what this machine lacks; nothing runs) or failed (the run failed;
    under ``LABKIT_STRICT`` the error is raised instead).
    """
    step = step_of(name, kind=kind, builds_on=builds_on, mode=mode)
    labels = _labels(step, predicted_speedup, finding, mode=mode, flags=flags)
    led = Ledger(LEDGER)
    reason = unavailable(**flags)
    if reason:
        led.append(not_run(name, status="skipped", reason=reason, config=flags, labels=labels))
        return Outcome(name, "skipped", reason, kind=step.kind, builds_on=step.builds_on)
    s, options = settings(mode), app_options(flags, mode=mode)
    line = Status(f"`{name}`: {'one run under nsys, then ' if profile else ''}{s.repeats} measured run(s) of "
                  f"{s.frames} frames, running...")
    t0 = time.monotonic()
    try:
        result = bench.run(app_argv(options), step=name, repeats=s.repeats, warmup=None, profile=profile,
                           ledger=led, results_dir=RESULTS, profile_dir=PROFILES, env=env, progress=False,
                           capture_range=capture_range(flags), config=options, labels=labels)
    except bench.BenchError as e:
        line.update(f"`{name}`: failed after {time.monotonic() - t0:.0f} s.")
        if strict():
            raise
        led.append(not_run(name, status="failed", reason=bench.error_line(e), config=options, labels=labels))
        return Outcome(name, "failed", bench.error_line(e), kind=step.kind, builds_on=step.builds_on)
    line.update(f"`{name}`: done in {time.monotonic() - t0:.0f} s.")
    return Outcome(name, "ok", result=result, kind=step.kind, builds_on=step.builds_on)


def sweep(builds_on: str, option: str, values, *, step: str, mode: str = MODE, flags: dict | None = None):
    """``labkit.bench.sweep`` of one option over ``values`` on top of the step ``builds_on``
    (its flags, or ``flags`` when given): no profiles, one ledger row per value, each of kind
    ``sweep`` (or the catalogue's) built on ``builds_on``. Returns the sweep's frame, or a
    skipped :class:`Outcome` (with a skipped row per value) when the flags need what this machine
    lacks. A value whose run fails is a frame row with its ``error`` and a failed ledger row."""
    base = dict(step_flags(builds_on, mode) if flags is None else flags)
    names = [step.format(value=v) for v in values]
    reason = unavailable(**base)
    if reason:
        for name, value in zip(names, values):
            st = step_of(name, builds_on=builds_on, mode=mode, default_kind="sweep")
            Ledger(LEDGER).append(not_run(name, status="skipped", reason=reason, config={**base, option: value},
                                          labels=st.labels()))
        return Outcome(step, "skipped", reason, kind="sweep", builds_on=builds_on)
    s = settings(mode)
    line = Status(f"sweep of `{option}` over {list(values)}: {len(names) * s.repeats} run(s) of {s.frames} frames, "
                  "running...")
    first = step_of(names[0] if names else step, builds_on=builds_on, mode=mode, default_kind="sweep")
    labels = _labels(first, None, None, mode=mode, flags={**base, option: values[0]} if names else base)
    options = app_options(base, mode=mode)
    t0 = time.monotonic()
    out = bench.sweep(lambda v: app_argv({**options, option: v}), option, list(values), step=step,
                      config=options, repeats=s.repeats, warmup=None, ledger=LEDGER, results_dir=RESULTS,
                      progress=False, on_error="raise" if strict() else "record", labels=labels)
    line.update(f"sweep of `{option}` over {list(values)}: done in {time.monotonic() - t0:.0f} s.")
    return out
