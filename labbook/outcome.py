"""The one outcome type of a lab step: ok, skipped or failed, with the reason and the result."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from labbook.settings import REFERENCE
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


def skip_note(*outcomes: Outcome, what: str):
    """None when every one of ``outcomes`` ran (status ok: its result, profile and ledger row are
    there); else the sentence a cell that needs them shows instead of its work (``say``): the first
    step that did not run, its reason, ``what`` the cell therefore lacks, and that it is skipped.
    A cell computes it first and ends with ``skip or <its value>``, so the lab goes on past a
    failed or skipped step (``labbook.runs.run_step``) and the cell says why it shows nothing."""
    o = next((o for o in outcomes if o.status != "ok"), None)
    if o is None:
        return None
    if o.status == "failed":
        return say(f"`{o.step}` failed ({o.reason}): {what}, so this cell is skipped; fix it and run the step again.")
    return say(f"`{o.step}` was not run here ({o.reason}): {what}, so this cell is skipped.")
