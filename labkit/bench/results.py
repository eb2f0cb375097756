"""A benchmark run's results: the results-file reader, the Result of a step's repeats, their medians and spread.

Results files follow the versioned schema of ``labkit.annotate`` (``write_results`` /
``read_results``); :data:`RESULT_FIELDS` says which of their fields a run's figures come from.
"""
from __future__ import annotations

import math
import os
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from labkit import annotate
from labkit.errors import LabkitError


RESULT_FIELDS: dict[str, str] = {
    "fps": "fps",
    "latency_p50_ms": "latency_ms.p50",
    "latency_p99_ms": "latency_ms.p99",
    "frames": "frames",
    "map50": "accuracy.map50",
    "mota": "accuracy.mota",
    "idf1": "accuracy.idf1",
    "hota": "accuracy.hota",
}
"""Metric name -> its dotted path in the results file (schema: ``labkit.annotate.RESULTS_FIELDS``)."""


HEADLINE = ("fps", "latency_p50_ms", "latency_p99_ms")
"""Metrics whose spread across repeats is reported."""


class BenchError(LabkitError):
    """A benchmark run failed: the message carries the application's stderr tail; ``reason``, its
    one-line cause (how the process ended and its own last error)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason


def error_line(exc: BaseException) -> str:
    """One line saying what went wrong, for a ledger row: the error's ``reason`` (how the process
    ended, its own last error) when it has one, else its first line (the problem and the fix)."""
    if getattr(exc, "reason", None):
        return exc.reason
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else repr(exc)


class BenchWarning(UserWarning):
    """A run finished but its results are suspect (status not "ok", missing figures)."""


# ----------------------------------------------------------------------------- helpers
def spread(values: Sequence[float]) -> float:
    """(max - min) / median of the finite values; NaN for fewer than two (one run has no spread:
    its interval, where it has one, comes from its batches) or a zero median."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if len(vals) < 2:
        return math.nan
    med = statistics.median(vals)
    return (max(vals) - min(vals)) / med if med else math.nan


def _median(values) -> float:
    vals = [float(v) for v in values if v is not None and not pd.isna(v)]
    return statistics.median(vals) if vals else math.nan


def _dig(data: Mapping, dotted: str):
    cur: Any = data
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def read_results(path: str | os.PathLike) -> dict:
    """The figures of one results file (validated by ``labkit.annotate.read_results``) under
    labkit's names (see :data:`RESULT_FIELDS`).

    Returns:
        dict with ``status`` (str), ``fps``, ``latency_p50_ms``, ``latency_p99_ms``, ``frames``,
        ``map50``, ``mota``, ``idf1``, ``hota`` (float, NaN where absent or null) and
        ``stage_ms.<stage>`` (ms per frame) for each stage reported.
    Raises:
        BenchError: the file is missing or not a results file of a known schema version.
    """
    try:
        data = annotate.read_results(path)
    except annotate.ResultsError as exc:
        raise BenchError(str(exc)) from None
    out: dict[str, Any] = {"status": str(data["status"]),
                           "warnings": tuple(str(w) for w in data.get("warnings") or ())}
    for name, dotted in RESULT_FIELDS.items():
        value = _dig(data, dotted)
        out[name] = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    for stage, ms in (data.get("stages") or {}).items():
        if isinstance(ms, (int, float)) and not isinstance(ms, bool):
            out[f"stage_ms.{stage}"] = float(ms)
    return out


def config_of(command: Sequence[str]) -> dict:
    """The ``--flag value`` options of a command as a dict (``--batch 4`` -> ``batch: 4``).

    A flag followed by another flag (or nothing) is ``True``; numbers become int/float. The
    ``--results`` path is left out (it differs per run).
    """
    cfg: dict[str, Any] = {}
    args = [str(a) for a in command]
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and len(a) > 2:
            key, eq, val = a[2:].partition("=")
            if not eq:
                if i + 1 < len(args) and not (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
                    val, i = args[i + 1], i + 1
                else:
                    val = True
            if key != "results":
                cfg[key.replace("-", "_")] = _number(val)
        i += 1
    return cfg


def _number(val):
    if not isinstance(val, str):
        return val
    for conv in (int, float):
        try:
            return conv(val)
        except ValueError:
            pass
    return val


# ----------------------------------------------------------------------------- result
@dataclass(frozen=True)
class Result:
    """One benchmarked configuration.

    Attributes:
        step, name: the lab step and this run's name (file names start with it).
        command: the command as given (without ``--results``).
        config: the options it ran with: the ``config`` the caller gave, else parsed from the
            command (:func:`config_of`); plus ``processes`` for parallel runs.
        repeats: one row per run: ``repeat``, ``profiled`` (bool), ``status``, ``wall_s``,
            ``fps``, ``latency_p50_ms``, ``latency_p99_ms`` (ms), ``frames``, accuracy
            (``map50``, ``mota``, ``idf1``, ``hota``), ``stage_ms.<stage>`` (ms per frame),
            ``results`` and ``log`` paths.
        metrics: medians over the measured runs (the profiled run is left out) plus
            ``spread`` (of fps) and ``spread_latency_p50_ms``/``spread_latency_p99_ms``;
            for parallel runs ``fps`` is the summed throughput (see :func:`run_parallel`).
        profile: the ``.nsys-rep`` of the profiled run, or None.
        flags: problems found (non-ok status, missing figures); empty when all is well.
        labels: extra top-level ledger fields the caller attached (``kind``, ``builds_on``,
            ``predicted_speedup``, ``finding``: see :mod:`labkit.bench.ledger`).
    """

    step: str
    name: str
    command: tuple[str, ...]
    config: dict
    repeats: pd.DataFrame = field(repr=False)
    metrics: dict
    profile: Path | None = None
    flags: tuple[str, ...] = ()
    labels: dict = field(default_factory=dict)

    @property
    def fps(self) -> float:
        return self.metrics.get("fps", math.nan)

    @property
    def spread(self) -> float:
        return self.metrics.get("spread", math.nan)

    @property
    def latency_p50_ms(self) -> float:
        return self.metrics.get("latency_p50_ms", math.nan)

    @property
    def latency_p99_ms(self) -> float:
        return self.metrics.get("latency_p99_ms", math.nan)

    @property
    def ok(self) -> bool:
        return not self.flags

    @property
    def results_paths(self) -> list[Path]:
        return [Path(p) for p in self.repeats["results"] if p]  # a replayed row (labbook.replay) has none

    def record(self) -> dict:
        """The ledger row of this result (see :mod:`labkit.bench.ledger`)."""
        metrics: dict[str, Any] = {}
        stages: dict[str, float] = {}
        for k, v in self.metrics.items():
            if k.startswith("stage_ms."):
                stages[k.split(".", 1)[1]] = v
            else:
                metrics[k] = v
        if stages:
            metrics["stage_ms"] = stages
        return {
            **self.labels,
            "step": self.step,
            "name": self.name,
            "status": "ok" if self.ok else "flagged",
            "flags": list(self.flags),
            "command": list(self.command),
            "config": dict(self.config),
            "metrics": metrics,
            "paths": {"profile": str(self.profile) if self.profile else None,
                      "results": [str(p) for p in self.results_paths],
                      "logs": [str(p) for p in self.repeats["log"]]},
        }

    def __str__(self) -> str:
        flag = "" if self.ok else f"  FLAGGED: {'; '.join(self.flags)}"
        how = (f"summed over {self.metrics['processes']} processes" if "processes" in self.metrics
               else "one measured run" if self.metrics.get("repeats") == 1
               else f"median of {self.metrics.get('repeats')} runs")
        lo, hi = self.metrics.get("fps_ci_low"), self.metrics.get("fps_ci_high")
        if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
            over = " over its batches" if self.metrics.get("fps_ci_over") == "batches" else ""
            noise = f"95 % interval{over} {lo:.1f}-{hi:.1f} frames/s"  # the interval, not a spread of one run
        elif (self.metrics.get("repeats") or 0) < 2 and "processes" not in self.metrics:
            noise = "one measured run: no spread"
        else:
            noise = f"spread {self.spread:.1%}"
        return (f"{self.step} ({self.name}): {self.fps:.1f} frames/s {how}, {noise}, "
                f"latency p50 {self.latency_p50_ms:.1f} ms, p99 {self.latency_p99_ms:.1f} ms{flag}")


def _summarize(rows: pd.DataFrame) -> dict:
    measured = rows[~rows["profiled"]] if (~rows["profiled"]).any() else rows
    metrics: dict[str, Any] = {}
    for col in measured.columns:
        if col in {"repeat", "profiled", "status", "results", "log", "wall_s", "warnings"}:
            continue
        if pd.api.types.is_numeric_dtype(measured[col]):
            metrics[col] = _median(measured[col])
    metrics["spread"] = spread(measured["fps"])
    for m in HEADLINE[1:]:
        metrics[f"spread_{m}"] = spread(measured[m])
    metrics["repeats"] = int(len(measured))
    return metrics


def _flags(rows: pd.DataFrame) -> list[str]:
    flags = []
    for _, r in rows.iterrows():
        if r["status"] != "ok":
            flags.append(f"run {r['repeat']}: status {r['status']!r} in {r['results']}")
        elif pd.isna(r["fps"]):
            flags.append(f"run {r['repeat']}: no fps in {r['results']}")
    seen: set = set()
    for _, r in rows.iterrows():  # the application's own doubts about its figures (warm-up, ...)
        for w in r.get("warnings") or ():
            if w not in seen:
                seen.add(w)
                flags.append(f"run {r['repeat']}: {w}")
    return flags


def _warn_flags(step: str, flags: list[str]) -> None:
    if flags:
        warnings.warn(f"benchmark {step!r} is flagged: " + "; ".join(flags), BenchWarning, stacklevel=3)
