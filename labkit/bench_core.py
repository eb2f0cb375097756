"""What every benchmark run shares: the results-file reader, the Result, errors, one run of the
application as a subprocess, and the summary (medians, spread) of its repeats.

``labkit.bench`` is the public face (``run``, ``sweep``, ``run_parallel``); this module holds the
parts they share, so that each runner stays short.

Results files follow the versioned schema of ``labkit.annotate`` (``write_results`` /
``read_results``); :data:`RESULT_FIELDS` says which of their fields a run's figures come from.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from labkit import annotate
from labkit.env import reports_dir
from labkit.errors import LabkitError, check_writable, output_error, output_tail
from labkit.ledger import Ledger
from labkit.proc import child_setup, exit_reason, process_reason

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

def _reports(sub: str, given) -> Path:
    return Path(given) if given is not None else reports_dir() / sub


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
    """(max - min) / median of the finite values; NaN for none or a zero median."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
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


def _has_flag(command: Sequence[str], flag: str) -> bool:
    return any(str(a) == flag or str(a).startswith(flag + "=") for a in command)


def with_flag(command: Sequence[str], flag: str, value=True) -> list[str]:
    """``command`` with ``flag`` set to ``value`` (replaced if present); ``False``/``None`` removes it.

    ``True`` means a bare switch (``--verbose``).
    """
    out: list[str] = []
    args = [str(a) for a in command]
    i = 0
    while i < len(args):
        a = args[i]
        if a == flag:
            # drop its value too, unless the next token is another option
            if i + 1 < len(args) and not (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
                i += 1
        elif not a.startswith(flag + "="):
            out.append(a)
        i += 1
    if value is True:
        out.append(flag)
    elif value is not None and value is not False:
        out += [flag, str(value)]
    return out


def _progress(total: int, desc: str, enabled: bool):
    from labkit.progress import bar

    return bar(desc, enabled=enabled, total=total, unit="run")


def _stamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", name).strip("_") or "run"


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
            ``predicted_speedup``, ``finding``: see :mod:`labkit.ledger`).
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
        return [Path(p) for p in self.repeats["results"]]

    def record(self) -> dict:
        """The ledger row of this result (see :mod:`labkit.ledger`)."""
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
               else f"median of {self.metrics.get('repeats')} runs")
        return (f"{self.step} ({self.name}): {self.fps:.1f} frames/s {how}, spread {self.spread:.1%}, "
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


def _append(ledger, row: Mapping) -> None:
    if ledger is not None:
        (ledger if isinstance(ledger, Ledger) else Ledger(ledger)).append(row)


def _check_ledger(ledger) -> None:
    """Pre-flight: the ledger's folder is writable (before any run, so no result is lost at the end)."""
    if ledger is not None:  # not a folder, nor a file we cannot read and append to; room beside it
        (led := ledger if isinstance(ledger, Ledger) else Ledger(ledger)).check()
        check_writable(led.path.parent, need_bytes=1 << 20, what="append to a ledger in")


def _repeat_record(step: str, name: str, row: Mapping, labels: Mapping | None) -> dict:
    """The ledger row of one finished repeat (status ``repeat``; see :mod:`labkit.ledger`)."""
    metrics = {k: v for k, v in row.items() if k in RESULT_FIELDS and v is not None and not pd.isna(v)}
    return {**(labels or {}), "step": step, "name": name, "status": "repeat", "repeat": int(row["repeat"]),
            "metrics": metrics, "paths": {"results": row["results"], "log": row["log"]}}


def _config(config: Mapping | None, cmd: list[str], warmup) -> dict:
    """The run's options: the caller's ``config`` (with the warm-up bench added), else parsed from argv."""
    if config is None:
        return config_of(cmd)
    return {**config, **({"warmup": int(warmup)} if warmup is not None and "warmup" not in config else {})}


# ----------------------------------------------------------------------------- runs
def _argv(command) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def _prepare(command, warmup) -> list[str]:
    cmd = _argv(command)
    if not cmd:
        raise BenchError("empty command: pass the application's argv, e.g. [sys.executable, 'app.py', ...]")
    if _has_flag(cmd, "--results"):
        raise BenchError("the command already has --results: leave it out, bench adds one per run")
    if warmup is not None and not _has_flag(cmd, "--warmup"):
        cmd += ["--warmup", str(int(warmup))]
    return cmd


def _start(command, warmup, name: str, results_dir) -> tuple[list[str], str, Path]:
    """What every runner does first: the argv (see :func:`_prepare`), a file-safe run name, and
    the results folder, created."""
    cmd = _prepare(command, warmup)
    results_dir = check_writable(_reports("results", results_dir), need_bytes=1 << 20, what="write results into")
    return cmd, _claim(results_dir, _safe(name)), results_dir


def _claim(results_dir: Path, name: str) -> str:
    """Reserve a run name for this run alone (an empty ``.<name>.claim``, ``O_EXCL``): two processes
    starting a step in the same second get ``name`` and ``name-2``, never one results file."""
    for i in range(1, 1000):
        cand, path = (name if i == 1 else f"{name}-{i}"), results_dir / f".{name if i == 1 else f'{name}-{i}'}.claim"
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            return cand
        except FileExistsError:
            continue
        except OSError as exc:
            raise output_error(path, exc, need_bytes=1 << 20) from None
    raise BenchError(f"999 runs named {name!r} already in {results_dir}: choose another name or folder")


def _check_exit(proc_rc: int, argv: list[str], log: Path, step: str, what: str, output: str,
                stream: str = "stderr") -> None:
    if proc_rc != 0:
        raise BenchError(f"benchmark {step!r}, {what}: the application {exit_reason(proc_rc)}.\n"
                         f"command: {shlex.join(argv)}\nlast lines of its {stream} (full output: {log}):\n"
                         f"{output_tail(output, 30) or '(empty)'}", reason=process_reason(proc_rc, output))


def _row(repeat: int, profiled: bool, results: Path, log: Path, wall_s: float) -> dict:
    return {"repeat": repeat, "profiled": profiled, **read_results(results), "wall_s": wall_s,
            "results": str(results), "log": str(log)}


LAUNCHERS = (None, "torchrun")
"""How :func:`labkit.bench.run` starts the application: itself, or under PyTorch's torchrun."""


def _is_python(exe: str) -> bool:
    return os.path.basename(exe).startswith("python") or exe == sys.executable


def launch(cmd: list[str], launcher: str | None, nproc: int | None) -> list[str]:
    """The argv that starts ``cmd`` through ``launcher``: ``cmd`` itself, or under torchrun
    ``python -m torch.distributed.run --standalone --nproc-per-node N SCRIPT ARGS`` (the
    command's own interpreter; ``python -m module`` and other programs too).

    Raises:
        BenchError: an unknown launcher, or ``nproc`` without one (or below 1).
    """
    if launcher not in LAUNCHERS:
        raise BenchError(f"launcher={launcher!r}: choose None (the command itself) or 'torchrun'")
    if launcher is None:
        if nproc is not None:
            raise BenchError(f"nproc={nproc} needs launcher='torchrun' (or use run_parallel for separate processes)")
        return cmd
    if nproc is None or nproc < 1:
        raise BenchError(f"nproc={nproc}: give the number of ranks to start on this machine (1 or more)")
    head = [sys.executable if not _is_python(cmd[0]) else cmd[0], "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}"]
    if not _is_python(cmd[0]):
        return head + ["--no-python", *cmd]
    return head + cmd[1:]  # "script.py args" and "-m module args" read the same to torchrun


def _run_once(argv: list[str], *, log: Path, env, timeout, step: str, what: str) -> float:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL, preexec_fn=child_setup(signal.SIGKILL))
    except subprocess.TimeoutExpired as exc:
        out = (exc.stderr or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        log.write_text(f"# {shlex.join(argv)}\n# timed out after {timeout} s\n{out}")
        raise BenchError(f"benchmark {step!r}, {what}: still running after timeout={timeout} s and was killed; "
                         f"pass a larger timeout= or fewer frames. Last lines of its stderr:\n{output_tail(out, 30)}",
                         reason=f"the application ran past timeout={timeout} s and was killed") from None
    except OSError as exc:
        raise BenchError(f"benchmark {step!r}: cannot start {argv[0]!r} ({exc})") from None
    wall = time.perf_counter() - t0
    text = f"# {shlex.join(argv)}\n# exit {proc.returncode} after {wall:.2f} s\n## stdout\n{proc.stdout}\n## stderr\n{proc.stderr}"
    try:
        log.write_text(text)
    except OSError as exc:
        raise output_error(log, exc, need_bytes=len(text)) from None
    _check_exit(proc.returncode, argv, log, step, what, proc.stderr)
    return wall


def _env(env: Mapping[str, str] | None) -> dict | None:
    if not env:
        return None
    merged = dict(os.environ)
    merged.update({k: str(v) for k, v in env.items()})
    return merged


def _run_profiled(cmd: list[str], *, name: str, step: str, results_dir: Path, profile_dir: Path, env,
                  progress: bool, capture_range: str | None = None, nproc: int | None = None,
                  timeout: float | None = None) -> tuple[Path, dict]:
    """The extra run under nsys; returns the .nsys-rep path (rank 0's under torchrun, ``nproc``
    ranks, one report each: ``<name>_<rank>.nsys-rep``) and the run's row."""
    from labkit import nsys  # lazy: only profiling needs it (and nsys installed)

    results = results_dir / f"{name}.profiled.json"
    t0 = time.perf_counter()
    try:
        if nproc:
            from labkit.ranks_profile import RankFailedError, profile_ranks

            try:
                profile_ranks(cmd + ["--results", str(results)], nproc=nproc, name=name, outdir=profile_dir,
                              env=dict(env or {}), timeout_s=timeout)
            except RankFailedError as exc:
                raise BenchError(f"benchmark {step!r}, profiled run: {exc}") from None
            return profile_dir / f"{name}_0.nsys-rep", _row(0, True, results, profile_dir / f"{name}.log",
                                                            time.perf_counter() - t0)
        # nsys passes the application's exit status through, so a failing app lands here
        rec = nsys.record(cmd + ["--results", str(results)], name=name, outdir=profile_dir,
                          env=dict(env or {}), progress=progress, capture_range=capture_range)
        nsys.export_sqlite(rec.nsys_rep, nsys=rec.nsys, progress=progress)  # analyses read the export
    except nsys.NsysNotFoundError:
        raise
    except nsys.NsysError as exc:
        raise BenchError(f"benchmark {step!r}, profiled run: {exc}", reason=getattr(exc, "reason", None)) from None
    return Path(rec.nsys_rep), _row(0, True, results, Path(rec.log), time.perf_counter() - t0)


