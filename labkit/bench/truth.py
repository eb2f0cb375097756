"""What makes a benchmark row defensible: its spread, its provenance and its physical ceiling.

Every row :func:`labkit.bench.run` appends carries (fields of the ledger's ``metrics`` unless
said otherwise; the table and chart columns have the same names, see :func:`labkit.bench.ledger.flatten`):

- **Spread**: ``fps_ci_low`` / ``fps_ci_high``, a bootstrap 95 % confidence interval of the
  frames per second (``scipy.stats.bootstrap``, percentile method): over the repeats when there
  are at least :data:`MIN_REPEATS_FOR_CI`, otherwise over the timed batches of the runs (the
  application's ``fps_ci95``); ``fps_ci_over`` says which (``"repeats"`` or ``"batches"``).
- **Length**: ``too_short`` (True when a run's queues could hold more than 10 % of its timed
  frames: Little's law, see ``labkit.annotate.RESULTS_FIELDS``), ``capacity_frames``,
  ``timed_frames``; accuracy's ``detected_frames`` and ``map50_detected`` beside ``map50``.
- **Provenance** (top level, ``provenance.*``): ``commit``, ``dirty`` (uncommitted changes to
  tracked files), ``mode`` (``LABKIT_MODE`` or the caller's), ``labkit`` (version). The
  library versions are in the row's ``env`` (``env.torch``, ``env.onnxruntime``...).
- **Ceiling**: a row labelled ``ceiling="decode"`` measures how fast the sources decode alone
  (the application with nothing after decode). Every later row on the same host and mode gets
  ``decode_ceiling_fps`` and, when its interval lies wholly above the ceiling's
  (``fps_ci_low > ceiling's fps_ci_high``), ``above_decode_ceiling`` True, status ``flagged`` and
  a flag saying why: such a figure counts work done outside the measured window; it is never a
  speed-up.
"""
from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from labkit import annotate

MIN_REPEATS_FOR_CI = 3
"""Repeats needed before the interval is taken over repeats rather than over batches."""
CEILING = "decode"
"""Value of a ledger row's ``ceiling`` label that marks the decode-only measurement."""


def bootstrap_ci(values: Sequence[float], *, confidence: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``values`` (scipy.stats.bootstrap); None for
    fewer than 2 finite values; (v, v) when they are all equal."""
    vals = np.array([float(v) for v in values if v is not None and math.isfinite(float(v))])
    if len(vals) < 2:
        return None
    if np.all(vals == vals[0]):
        return float(vals[0]), float(vals[0])
    from scipy.stats import bootstrap

    res = bootstrap((vals,), np.mean, confidence_level=confidence, n_resamples=5000, method="percentile",
                    random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _results(paths: Sequence[str]) -> list[dict]:
    docs = []
    for p in paths:
        try:
            docs.append(annotate.read_results(p))
        except annotate.ResultsError:
            continue
    return docs


def measured_figures(repeats, metrics: Mapping[str, Any]) -> dict:
    """The spread and length fields of a benchmark (see the module doc) from its measured repeats
    (the ``Result.repeats`` frame: ``profiled``, ``fps``, ``results``)."""
    measured = repeats[~repeats["profiled"]] if (~repeats["profiled"]).any() else repeats
    docs = _results(list(measured["results"]))
    out: dict[str, Any] = {}
    fps = [float(v) for v in measured["fps"] if v is not None and math.isfinite(float(v))]
    ci = bootstrap_ci(fps) if len(fps) >= MIN_REPEATS_FOR_CI else None
    if ci is not None:
        out.update(fps_ci_low=ci[0], fps_ci_high=ci[1], fps_ci_over="repeats")
    else:
        lows = [d["fps_ci95"][0] for d in docs if isinstance(d.get("fps_ci95"), list)] + fps
        highs = [d["fps_ci95"][1] for d in docs if isinstance(d.get("fps_ci95"), list)] + fps
        if any(isinstance(d.get("fps_ci95"), list) for d in docs):
            out.update(fps_ci_low=min(lows), fps_ci_high=max(highs), fps_ci_over="batches")
    if docs:
        out["too_short"] = any(bool(d.get("too_short")) for d in docs)
        caps = [d.get("capacity_frames") for d in docs if isinstance(d.get("capacity_frames"), int)]
        if caps:
            out["capacity_frames"] = max(caps)
        out["timed_frames"] = min(int(d.get("timed_frames") or 0) for d in docs)
        acc = [d.get("accuracy") or {} for d in docs]
        for k in ("detected_frames", "map50_detected"):
            vals = [a[k] for a in acc if isinstance(a.get(k), (int, float))]
            if vals:
                out[k] = float(np.median(vals)) if k == "map50_detected" else int(np.median(vals))
    return out


def parallel_figures(processes) -> dict:
    """The spread and length fields of processes run side by side (``run_parallel``'s frame, one row
    per process): their aggregate fps lies between the sum of each process's own interval low and
    the sum of its highs (over its batches: every bound holds together only at worst, so the
    interval is conservative); ``too_short`` when any process was."""
    docs = _results(list(processes["results"]))
    out: dict[str, Any] = {}
    if docs and all(isinstance(d.get("fps_ci95"), list) for d in docs):
        out.update(fps_ci_low=float(sum(d["fps_ci95"][0] for d in docs)),
                   fps_ci_high=float(sum(d["fps_ci95"][1] for d in docs)), fps_ci_over="processes' batches")
    if docs:
        out["too_short"] = any(bool(d.get("too_short")) for d in docs)
    return out


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _where(command: Sequence[str]) -> Path:
    """The folder whose repository the command's code lives in: its first existing file argument's, else cwd."""
    for a in command:
        p = Path(str(a))
        if p.suffix == ".py" and p.is_file():
            return p.resolve().parent
    return Path.cwd()


def provenance(command: Sequence[str], mode: str | None = None) -> dict:
    """``commit`` (None outside git), ``dirty`` (tracked files changed), ``mode``, ``labkit``."""
    from importlib import metadata

    cwd = _where(command)
    commit = _git(["rev-parse", "HEAD"], cwd)
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd) if commit else None
    try:
        version = metadata.version("labkit")
    except metadata.PackageNotFoundError:
        version = None
    return {"commit": commit, "dirty": bool(status) if status is not None else None,
            "mode": mode if mode is not None else (os.environ.get("LABKIT_MODE") or None), "labkit": version}


def find_ceiling(rows: Sequence[Mapping], *, host: str | None, mode: str | None) -> Mapping | None:
    """The latest ``ceiling="decode"`` row of ``host`` and ``mode`` (rows in file order), or None."""
    found = None
    for r in rows:
        if r.get("ceiling") != CEILING or r.get("status") not in (None, "ok"):
            continue
        if (r.get("env") or {}).get("host") != host or (r.get("provenance") or {}).get("mode") != mode:
            continue
        found = r
    return found


def ledger_ceiling(ledger, mode: str | None) -> Mapping | None:
    """The latest decode-ceiling row of this host and ``mode`` in ``ledger`` (a
    :class:`~labkit.bench.ledger.Ledger` or a path; a missing file has none), or None."""
    if ledger is None:
        return None
    import socket

    from labkit.bench.ledger import Ledger

    rows = (ledger if isinstance(ledger, Ledger) else Ledger(ledger)).rows()
    return find_ceiling(rows, host=socket.gethostname(), mode=mode)


def check_ceiling(record: dict, ceiling: Mapping | None) -> dict:
    """``record`` (a ledger row) with ``decode_ceiling_fps`` and, when its interval lies wholly
    above the ceiling's, ``above_decode_ceiling``, status ``flagged`` and a flag."""
    if ceiling is None or record.get("ceiling") == CEILING:
        return record
    cm, m = ceiling.get("metrics") or {}, record.get("metrics") or {}
    c_fps, fps = cm.get("fps"), m.get("fps")
    if not _num(c_fps) or not _num(fps):
        return record
    c_high = cm.get("fps_ci_high") if _num(cm.get("fps_ci_high")) else c_fps
    low = m.get("fps_ci_low") if _num(m.get("fps_ci_low")) else fps
    above = low > c_high
    out = {**record, "metrics": {**m, "decode_ceiling_fps": c_fps, "decode_ceiling_fps_ci_high": c_high,
                                 "above_decode_ceiling": bool(above)}}
    if above:
        out["status"] = "flagged"
        out["flags"] = [*record.get("flags", []),
                        f"above the decode-only ceiling: {fps:.1f} frames/s (interval from {low:.1f}) against "
                        f"{c_fps:.1f} (up to {c_high:.1f}) for decoding alone on this machine; the figure counts "
                        "work done outside its timed window, not a speed-up"]
    return out


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
