"""One step, resolved once: what a lab step is (flags, builds_on, kind), how big its runs are
(settings), the prediction it runs under and the learner's guess, as one value.

``labbook.runs.run_step`` resolves a step here once; the run, its ledger row (``Plan.labels``)
and the verdict (which reads that row) all read this one value, and nothing looks the step up
again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from labkit.errors import LabkitError

from labbook.settings import MODE, Settings, settings
from labbook.steps import Step, step_of


@dataclass(frozen=True)
class Plan:
    """A resolved step.

    Attributes:
        step: the :class:`labbook.steps.Step` (name, catalogue flags, builds_on, kind, launch).
        flags: the ``detect_video.py`` options it runs with (the caller's, else the catalogue's).
        settings: the mode's :class:`labbook.settings.Settings`; ``mode``: its name.
        prediction: ``predicted_speedup``, ``basis``, ``assumptions``, ``lever``, ``finding``
            (``labbook.predict.predict_for``).
        guess: the learner's guess of the speed-up over ``builds_on`` (x), recorded before the
            estimate is shown; None when none was given.
    """

    step: Step
    flags: Mapping
    settings: Settings
    mode: str
    prediction: Mapping = field(default_factory=dict)
    guess: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "flags", MappingProxyType(dict(self.flags)))
        object.__setattr__(self, "prediction", MappingProxyType(dict(self.prediction)))

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def kind(self) -> str:
        return self.step.kind

    @property
    def builds_on(self) -> str | None:
        return self.step.builds_on

    def labels(self) -> dict:
        """The ledger fields that say what the step is and what it was run under."""
        extra = {k: v for k, v in self.prediction.items() if v is not None}
        if self.guess is not None:
            extra["guess"] = float(self.guess)
        own = self.step.labels()  # a scale-out step's own prediction (n copies: n times if perfect) comes with it
        return {**extra, **own}


def check_guess(guess) -> float | None:
    """A guess is a positive number of times (2.0 = twice as fast), or None."""
    if guess is None:
        return None
    if isinstance(guess, bool) or not isinstance(guess, (int, float)) or not guess > 0:
        raise ValueError(f"guess={guess!r}: give your guess of the speed-up as a positive number, e.g. guess=1.5")
    return float(guess)


def resolve(name: str, *, mode: str = MODE, kind: str | None = None, builds_on: str | None = None,
            flags: Mapping | None = None, guess: float | None = None, predicted_speedup: float | None = None,
            finding: str | None = None, default_kind: str = "exercise", step: Step | None = None) -> Plan:
    """Resolve step ``name`` once (see :class:`Plan`): the catalogue's, with ``kind``/``builds_on``
    overriding it; ``flags``: its options (None: the catalogue's); the prediction: the
    caller's (``predicted_speedup``/``finding``), else computed from the profile of the step it
    builds on (an unreadable profile: the row says so, the step still runs)."""
    from labbook.predict import predict_for

    st = step or step_of(name, kind=kind, builds_on=builds_on, mode=mode, default_kind=default_kind)
    fl = dict(st.flags) if flags is None else dict(flags)
    if predicted_speedup is not None or finding is not None:
        pred = {"predicted_speedup": predicted_speedup, "finding": finding, "basis": "estimate"}
    else:
        try:
            pred = predict_for(st, fl, mode)
        except LabkitError as e:
            pred = {"predicted_speedup": None, "finding": f"none: {str(e).splitlines()[0]}"}
    return Plan(st, fl, settings(mode), mode, pred, check_guess(guess))
