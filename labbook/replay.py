"""Replaying a recorded lab: each step's ledger row, profile and platform taken from a recording
(``reports/reference/<machine>``) instead of running it, so that every sentence the lab prints on
that machine is printed, and tested, here (``scripts/run_lab.py --replay``).

``LABKIT_REPLAY`` (``labbook.settings.REPLAY``) names the recording. The lab's run functions
(``labbook.runs``) ask :func:`replay_step` first: a step the recording has is its recorded row,
copied into this ledger as it was (its ``env`` is the recording machine's, so every platform fact
the notebooks read comes from there), with the recording's export ``<step>.sqlite`` as its profile
where one was kept (else none: the cells that need a profile say so); a step it lacks (an
exercise, a by-hand run) is a skipped row saying so. Nothing is run.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from labkit.bench.ledger import Ledger, not_run
from labkit.bench.results import Result
from labkit.errors import LabkitError

from labbook.outcome import Outcome
from labbook.recording import (LEDGER_NAMES, ReplayError, profile_of, recorded_env,  # noqa: F401
                               recorded_gpu, recorded_mode, recorded_rows, recording_ledger)
from labbook.settings import LEDGER, REPLAY

def replay_step(name: str, *, kind: str | None = None, builds_on: str | None = None, guess: float | None = None,
                folder: Path | None = None, ledger: Path | None = None, predicted_speedup: float | None = None,
                finding: str | None = None) -> Outcome:
    """Step ``name`` as the recording in ``folder`` (default ``REPLAY``) has it: its recorded row
    appended to ``ledger`` (default ``LEDGER``) with its recorded ``env``, ``guess`` (the learner's,
    given here) added, and its profile the recording's export (or none); returns its Outcome. A step
    the recording lacks is a skipped row and Outcome saying it was not recorded.

    ``predicted_speedup``/``finding``: the estimate the notebook computed now, from the replayed rows
    with this code (``optimized``'s, say), as ``run_step`` takes them live: it replaces the recorded
    one, which the code of the recording's day computed, so the replay prints what a live run would."""
    folder, led = Path(folder or REPLAY), Ledger(ledger or LEDGER)
    row = recorded_rows(folder).get(name)
    done = dict(kind=kind, builds_on=builds_on)
    if row is None:
        why = f"the recording {folder.name} has no `{name}` row (a replay runs nothing)"
        labels = {"kind": kind or "exercise", "builds_on": builds_on}
        led.append(not_run(name, status="skipped", reason=why, labels=labels))
        return Outcome(name, "skipped", why, **done)
    record = {k: v for k, v in row.items() if k != "time"}  # written now: the latest row of its step here
    done = dict(kind=row.get("kind", kind), builds_on=row.get("builds_on", builds_on))
    if guess is not None:
        record["guess"] = float(guess)
    if predicted_speedup is not None or finding is not None:  # as labbook.plan.resolve takes a caller's
        record.update(predicted_speedup=predicted_speedup, finding=finding, basis="estimate", assumptions=None, lever=None)
    else:
        record.update(_current(record, name, folder))
    if row.get("status", "ok") != "ok":
        led.append(record)
        return Outcome(name, row["status"], str(row.get("reason", "")), **done)
    profile = profile_of(folder, name)
    record["paths"] = {"profile": str(profile) if profile else None, "results": [], "logs": []}
    led.append(record)
    return Outcome(name, "ok", result=result_of(record, profile), **done)


def _current(row: dict, name: str, folder: Path) -> dict:
    """The prediction this code makes for the replayed step, where it can make one here, in place of the
    one the recording's code made ({} where the recorded one stands):

    - a change that only alters how the detector computes (``labbook.stage_factor``) is predicted from
      its factor measured on the stage alone, which only the recording machine can measure: a recording
      made before that carries the bound of the stage costing nothing in its place, which no such change
      reaches, so the replay says why there is none; one made since keeps its own;
    - any other change is predicted again, as a live run predicts it (``labbook.predict.predict_for``),
      from the profile of the step it builds on, where the recording kept that profile and the replay has
      replayed that step: what the lab would say on that machine today;
    - where the recording kept no such profile, its prediction stands (made there, from a profile only
      that machine had)."""
    from labbook import stage_factor
    from labbook.predict import change, latest_profile, predict_for
    from labbook.steps import step_of

    mode = recorded_mode(folder)
    try:
        changed = change(name, mode, builds_on=row.get("builds_on"))
    except (KeyError, ValueError, ReplayError):
        return {}
    if stage_factor.applies({k: v for k, v in changed.items() if k != "device"}):
        if row.get("predicted_speedup") is None or str(row.get("finding", "")).startswith(
                f"'{stage_factor.STAGE}' measured alone"):
            return {}
        return {"predicted_speedup": None, "basis": None, "assumptions": None,
                "finding": f"none: the recording {folder.name} predates measuring this change on '{stage_factor.STAGE}' "
                           f"alone, and its figure ({float(row['predicted_speedup']):.2f}x) was the bound of "
                           f"'{stage_factor.STAGE}' costing nothing, which no such change reaches"}
    base = row.get("builds_on")
    if not base or latest_profile(base)[0] is None:
        return {}
    try:
        st = step_of(name, kind=row.get("kind"), builds_on=base, mode=mode)
        now = predict_for(st, dict(row.get("flags") or st.flags), mode)
    except (LabkitError, KeyError, ValueError, ReplayError):
        return {}
    return {k: now.get(k) for k in ("predicted_speedup", "basis", "assumptions", "lever", "finding")}


def result_of(row: dict, profile: Path | None) -> Result:
    """The ``labkit.bench.Result`` a recorded row stands for: its metrics (stage times as
    ``stage_ms.<stage>``), config and flags, one measured run per recorded repeat figure."""
    metrics = {k: v for k, v in (row.get("metrics") or {}).items() if k != "stage_ms"}
    metrics.update({f"stage_ms.{k}": v for k, v in ((row.get("metrics") or {}).get("stage_ms") or {}).items()})
    metrics = {k: (math.nan if v is None else v) for k, v in metrics.items()}
    cols = ("fps", "latency_p50_ms", "latency_p99_ms", "frames", "map50", "mota", "idf1", "hota")
    repeats = pd.DataFrame([{"repeat": 1, "profiled": False, "status": "ok", "wall_s": math.nan,
                             **{c: metrics.get(c, math.nan) for c in cols}, "results": None, "log": None}])
    labels = {k: row[k] for k in ("kind", "builds_on", "predicted_speedup", "basis", "finding", "guess") if k in row}
    return Result(step=row["step"], name=row.get("name", row["step"]), command=tuple(row.get("command") or ()),
                  config=dict(row.get("config") or {}), repeats=repeats, metrics=metrics, profile=profile,
                  flags=tuple(row.get("flags") or ()), labels=labels)
