"""The one outcome type of a lab step: ok, skipped or failed, with the reason and the result."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labbook.settings import REFERENCE, strict
from labbook.text import say

STATUSES = ("ok", "skipped", "failed")


@dataclass(frozen=True)
class Outcome:
    """What became of one lab step.

    Attributes:
        step: the step's name.
        status: ``ok`` (it ran: ``result`` holds the ``labkit.bench.Result``), ``skipped`` (this
            machine lacks what it needs) or ``failed`` (its run failed); the ledger has a row
            with the same ``status`` either way.
        reason: why it was skipped, or the application's error line; '' when ok.
        result: the ``labkit.bench.Result`` (None unless ok).
        kind, builds_on: what the step is in the lab (see ``labbook.steps``).
    """

    step: str
    status: str
    reason: str = ""
    result: Any = None
    kind: str | None = None
    builds_on: str | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r}: use one of {STATUSES}")

    @property
    def ok(self) -> bool:
        """It ran, and its results are not flagged."""
        return self.status == "ok" and self.result is not None and self.result.ok

    @property
    def profile(self):
        """The profiled run's ``.nsys-rep`` (None when there is none)."""
        return self.result.profile if self.result is not None else None

    @property
    def config(self) -> dict:
        return dict(self.result.config) if self.result is not None else {}

    def row(self) -> dict:
        """The figures ``labkit.bench.tables.compare`` reads: step, status, reason, fps, spread, repeats."""
        if self.result is None:
            return {"step": self.step, "status": self.status, "reason": self.reason, "fps": math.nan}
        m = self.result.metrics
        return {"step": self.step, "status": "ok" if self.result.ok else "flagged", "reason": "; ".join(self.result.flags),
                "fps": self.result.fps, "spread": m.get("spread"), "repeats": m.get("repeats")}

    def __str__(self) -> str:
        if self.status == "ok":
            return str(self.result)
        if self.status == "failed":
            return f"Step '{self.step}' failed here: {self.reason}"
        where = " (see the reference results below)" if (REFERENCE / "ledger.jsonl").exists() else ""
        return f"Step '{self.step}' was not run here: {self.reason}{where}."

    def _repr_markdown_(self) -> str:
        head = {"ok": "", "skipped": "**Not run here.** ", "failed": "**Failed.** "}[self.status]
        from labkit.safe_text import markdown_no_html

        return head + markdown_no_html(str(self))  # the step and the reason are data


def skip_note(*outcomes, what: str, profile: bool = False, runs: bool = False):
    """None when every one of ``outcomes`` ran (status ok: its result, profile and ledger row are
    there); else the sentence a cell that needs them shows instead of its work (``say``): the first
    step that did not run, its reason, ``what`` the cell therefore lacks, and that it is skipped.
    A cell computes it first and ends with ``skip or <its value>``, so the lab goes on past a
    failed or skipped step (``labbook.runs.run_step``) and the cell says why it shows nothing.

    Args:
        outcomes: Outcomes, or step names (their latest ledger row).
        profile: the cell reads their profiles: an ok step without one (a replayed step whose
            recording kept none) is skipped too.
        runs: the cell runs something on this machine itself (nsys by hand, a model the runs cached):
            skipped while replaying a recording (``labbook.replay``), which runs nothing.
    """
    from labbook.settings import REPLAY

    if runs and REPLAY is not None:
        return say(f"Replaying the recording `{REPLAY.name}`, which runs nothing here: {what}, so this cell is skipped.")
    outcomes = tuple(_outcome_of(o) for o in outcomes)
    o = next((o for o in outcomes if o.status != "ok"), None)
    if o is None and profile:
        bare = next((o for o in outcomes if o.profile is None), None)
        if bare is not None:
            where = f"the recording `{REPLAY.name}` kept none" if REPLAY is not None else "it ran without one"
            return say(f"`{bare.step}` has no profile here ({where}): {what}, so this cell is skipped.")
    if o is None:
        return None
    if o.status == "failed":
        return say(f"`{o.step}` failed ({o.reason}): {what}, so this cell is skipped; fix it and run the step again.")
    return say(f"`{o.step}` was not run here ({o.reason}): {what}, so this cell is skipped.")


class _Profiled:
    """The part of a ledger row :func:`skip_note` reads: its profile."""

    def __init__(self, profile):
        self.profile = profile


def _outcome_of(x) -> Outcome:
    """An Outcome as it is, or a step name's latest ledger row as one (status, reason, profile)."""
    if isinstance(x, Outcome):
        return x
    from labbook.reference import ledger

    rows = ledger([x])
    if len(rows) == 0:
        return Outcome(str(x), "skipped", "it has no ledger row yet: run its notebook first")
    row = rows.iloc[-1]
    status = str(row.get("status") if isinstance(row.get("status"), str) else "ok")
    if status != "ok":
        return Outcome(str(x), status if status in STATUSES else "failed", str(row.get("reason", "")))
    path = row.get("paths.profile")
    return Outcome(str(x), "ok", result=_Profiled(path if isinstance(path, str) else None))


def log_tail(report, lines: int = 1) -> str:
    """The last ``lines`` non-blank lines of the log beside a by-hand profile (``<report>.log``, as the
    notebooks write it), each cut at 300 characters; '' when there is no log to read."""
    try:
        text = Path(report).with_suffix(".log").read_text(errors="replace")
    except OSError:
        return ""
    kept = [ln.strip()[:300] for ln in text.splitlines() if ln.strip()]
    return "\n".join(kept[-lines:]) if kept else "(empty)"


def missing_report_note(report, *, what: str, written: bool | None = None):
    """None when the by-hand profile wrote ``report``; else the one line a cell shows instead of its
    work: no report, what the profile's log says last, the fix, and that the cells reading it (``what``)
    are skipped. ``written``: whether this run wrote it (default: whether it exists; a report an
    earlier run left is not this run's). Under ``LABKIT_STRICT`` (the tests) the log's last lines are
    raised instead, so the test says why nsys wrote nothing."""
    if Path(report).exists() if written is None else written:
        return None
    log = Path(report).with_suffix(".log")
    if strict():
        raise RuntimeError(f"the by-hand profile wrote no {report}; the end of {log}:\n{log_tail(report, 20)}")
    said = f"its log `{log}` ends: `{log_tail(report)}`" if log.exists() else "it wrote no log"
    return say(f"The profile wrote no report at `{report}` this time ({said}): {what}, so they are skipped; "
               "fix what the log says and run the profile cell again.")
