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

from labbook.outcome import Outcome
from labbook.recording import (LEDGER_NAMES, ReplayError, profile_of, recorded_env,  # noqa: F401
                               recorded_gpu, recorded_mode, recorded_rows, recording_ledger)
from labbook.settings import LEDGER, REPLAY

def replay_step(name: str, *, kind: str | None = None, builds_on: str | None = None, guess: float | None = None,
                folder: Path | None = None, ledger: Path | None = None) -> Outcome:
    """Step ``name`` as the recording in ``folder`` (default ``REPLAY``) has it: its recorded row
    appended to ``ledger`` (default ``LEDGER``) with its recorded ``env``, ``guess`` (the learner's,
    given here) added, and its profile the recording's export (or none); returns its Outcome. A step
    the recording lacks is a skipped row and Outcome saying it was not recorded."""
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
    record.update(_current(record, name, folder))
    if row.get("status", "ok") != "ok":
        led.append(record)
        return Outcome(name, row["status"], str(row.get("reason", "")), **done)
    profile = profile_of(folder, name)
    record["paths"] = {"profile": str(profile) if profile else None, "results": [], "logs": []}
    led.append(record)
    return Outcome(name, "ok", result=result_of(record, profile), **done)


def _current(row: dict, name: str, folder: Path) -> dict:
    """A recorded prediction the lab no longer makes, replaced by why there is none: a change that
    only alters how the detector computes (``labbook.stage_factor``) is predicted from its factor
    measured on the stage alone, and a recording made before that carries the bound of the stage
    costing nothing in its place, which no such change reaches. {} where the row's prediction stands."""
    from labbook import stage_factor
    from labbook.predict import change

    if row.get("predicted_speedup") is None or str(row.get("finding", "")).startswith(f"'{stage_factor.STAGE}' measured alone"):
        return {}
    try:
        changed = change(name, recorded_mode(folder), builds_on=row.get("builds_on"))
    except (KeyError, ValueError, ReplayError):
        return {}
    if not stage_factor.applies({k: v for k, v in changed.items() if k != "device"}):
        return {}
    return {"predicted_speedup": None, "basis": None, "assumptions": None,
            "finding": f"none: the recording {folder.name} predates measuring this change on '{stage_factor.STAGE}' "
                       f"alone, and its figure ({float(row['predicted_speedup']):.2f}x) was the bound of "
                       f"'{stage_factor.STAGE}' costing nothing, which no such change reaches"}


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
