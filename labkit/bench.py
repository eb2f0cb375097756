"""Benchmark the application: repeated runs as subprocesses, medians and spread, ledger rows.

    from labkit import bench
    cmd = [sys.executable, "source_code/detect_video.py", "--input", "data/clip.mp4", "--device", "cpu"]
    r = bench.run(cmd, step="baseline", repeats=3, ledger="reports/ledger.jsonl")
    r.fps, r.spread, r.repeats

labkit knows the application only through its command line and its results file: each run
gets ``--results PATH`` (a JSON file the application writes) and ``--warmup N`` unless the
command already has one; the application itself leaves warm-up frames out of its figures.
Every run's results JSON and output log are kept under ``results_dir``.

Results file fields read (top level; ``"status"`` must be ``"ok"``), see :data:`RESULT_FIELDS`:
``fps``, ``latency_ms.p50``/``latency_ms.p99`` (or ``latency_p50_ms``/``latency_p99_ms``),
``frames``, ``stage_ms`` (``{stage: ms per frame}``) and accuracy ``map50``, ``mota``,
``idf1``, ``hota`` (top level or under ``accuracy``). Missing fields are NaN.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from labkit.env import reports_dir
from labkit.errors import LabkitError, output_tail
from labkit.ledger import Ledger

__all__ = ["run", "sweep", "run_parallel", "Result", "BenchError", "BenchWarning", "read_results",
           "spread", "RESULT_FIELDS", "HEADLINE"]

RESULT_FIELDS: dict[str, tuple[str, ...]] = {
    "fps": ("fps", "throughput_fps", "metrics.fps"),
    "latency_p50_ms": ("latency_ms.p50", "latency_p50_ms", "metrics.latency_p50_ms"),
    "latency_p99_ms": ("latency_ms.p99", "latency_p99_ms", "metrics.latency_p99_ms"),
    "frames": ("frames", "measured_frames", "metrics.frames"),
    "map50": ("map50", "accuracy.map50", "metrics.map50"),
    "mota": ("mota", "accuracy.mota", "metrics.mota"),
    "idf1": ("idf1", "accuracy.idf1", "metrics.idf1"),
    "hota": ("hota", "accuracy.hota", "metrics.hota"),
}
"""Metric name -> dotted paths tried in order in the results JSON."""

STAGE_FIELDS = ("stages", "stage_ms", "metrics.stage_ms")
"""Where per-stage milliseconds per frame (``{stage: ms}``) are looked for."""

HEADLINE = ("fps", "latency_p50_ms", "latency_p99_ms")
"""Metrics whose spread across repeats is reported."""



def _reports(sub: str, given) -> Path:
    return Path(given) if given is not None else reports_dir() / sub


class BenchError(LabkitError):
    """A benchmark run failed: the message carries the application's stderr tail."""


def error_line(exc: BaseException) -> str:
    """The line of a BenchError (or any error) that says what went wrong: the last one that
    mentions an error (the application's ``detect_video: error: ...``), else the last line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else repr(exc))


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
    """The figures of one results JSON under labkit's names (see :data:`RESULT_FIELDS`).

    Returns:
        dict with ``status`` (str), ``fps``, ``latency_p50_ms``, ``latency_p99_ms``, ``frames``,
        ``map50``, ``mota``, ``idf1``, ``hota`` (float, NaN where absent) and ``stage_ms.<stage>``
        (ms per frame) for each stage reported.
    Raises:
        BenchError: the file is missing or not a JSON object.
    """
    import json

    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: the application wrote no results file; does it accept --results PATH?") from None
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path}: results file is not valid JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise BenchError(f"{path}: results file holds a JSON {type(data).__name__}, not an object")
    out: dict[str, Any] = {"status": str(data.get("status", "missing"))}
    for name, paths in RESULT_FIELDS.items():
        value = next((v for v in (_dig(data, p) for p in paths) if v is not None), None)
        try:
            out[name] = float(value) if value is not None else math.nan
        except (TypeError, ValueError):
            out[name] = math.nan
    stages = next((s for s in (_dig(data, p) for p in STAGE_FIELDS) if isinstance(s, Mapping)), {})
    for stage, ms in stages.items():
        if isinstance(ms, Mapping):  # {"decode": {"ms_per_frame": 1.2, ...}}
            ms = next((ms[k] for k in ("ms_per_frame", "mean_ms", "ms") if k in ms), None)
        try:
            out[f"stage_ms.{stage}"] = float(ms)
        except (TypeError, ValueError):
            continue
    return out


def config_of(command: Sequence[str]) -> dict:
    """The ``--flag value`` options of a command as a dict (``--batch-size 4`` -> ``batch_size: 4``).

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

    ``True`` means a bare switch (``--no-osd``).
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
    from tqdm import tqdm  # plain text bar: tqdm.auto needs ipywidgets in notebooks

    return tqdm(total=total, desc=desc, unit="run", disable=not enabled, file=sys.stderr, leave=False)


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
        config: its options (see :func:`config_of`), plus ``processes`` for parallel runs.
        repeats: one row per run: ``repeat``, ``profiled`` (bool), ``status``, ``wall_s``,
            ``fps``, ``latency_p50_ms``, ``latency_p99_ms`` (ms), ``frames``, accuracy
            (``map50``, ``mota``, ``idf1``, ``hota``), ``stage_ms.<stage>`` (ms per frame),
            ``results`` and ``log`` paths.
        metrics: medians over the measured runs (the profiled run is left out) plus
            ``spread`` (of fps) and ``spread_latency_p50_ms``/``spread_latency_p99_ms``;
            for parallel runs ``fps`` is the summed throughput (see :func:`run_parallel`).
        profile: the ``.nsys-rep`` of the profiled run, or None.
        flags: problems found (non-ok status, missing figures); empty when all is well.
    """

    step: str
    name: str
    command: tuple[str, ...]
    config: dict
    repeats: pd.DataFrame = field(repr=False)
    metrics: dict
    profile: Path | None = None
    flags: tuple[str, ...] = ()

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
        if col in {"repeat", "profiled", "status", "results", "log", "wall_s"}:
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
    return flags


def _warn_flags(step: str, flags: list[str]) -> None:
    if flags:
        warnings.warn(f"benchmark {step!r} is flagged: " + "; ".join(flags), BenchWarning, stacklevel=3)


def _append(ledger, result: Result) -> None:
    if ledger is not None:
        (ledger if isinstance(ledger, Ledger) else Ledger(ledger)).append(result.record())


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


def _check_exit(proc_rc: int, argv: list[str], log: Path, step: str, what: str, output: str,
                stream: str = "stderr") -> None:
    if proc_rc != 0:
        raise BenchError(f"benchmark {step!r}, {what}: the application exited with status {proc_rc}.\n"
                         f"command: {shlex.join(argv)}\nlast lines of its {stream} (full output: {log}):\n"
                         f"{output_tail(output, 30) or '(empty)'}")


def _row(repeat: int, profiled: bool, results: Path, log: Path, wall_s: float) -> dict:
    return {"repeat": repeat, "profiled": profiled, **read_results(results), "wall_s": wall_s,
            "results": str(results), "log": str(log)}


def _run_once(argv: list[str], *, log: Path, env, timeout, step: str, what: str) -> float:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stderr or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        log.write_text(f"# {shlex.join(argv)}\n# timed out after {timeout} s\n{out}")
        raise BenchError(f"benchmark {step!r}, {what}: still running after timeout={timeout} s and was killed; "
                         f"pass a larger timeout= or fewer frames. Last lines of its stderr:\n{output_tail(out, 30)}") from None
    except OSError as exc:
        raise BenchError(f"benchmark {step!r}: cannot start {argv[0]!r} ({exc})") from None
    wall = time.perf_counter() - t0
    log.write_text(f"# {shlex.join(argv)}\n# exit {proc.returncode} after {wall:.2f} s\n"
                   f"## stdout\n{proc.stdout}\n## stderr\n{proc.stderr}")
    _check_exit(proc.returncode, argv, log, step, what, proc.stderr)
    return wall


def _env(env: Mapping[str, str] | None) -> dict | None:
    if not env:
        return None
    merged = dict(os.environ)
    merged.update({k: str(v) for k, v in env.items()})
    return merged


def _run_profiled(cmd: list[str], *, name: str, step: str, results_dir: Path, profile_dir: Path, env,
                  progress: bool, capture_range: str | None = None) -> tuple[Path, dict]:
    """The extra run under nsys; returns the .nsys-rep path and the run's row."""
    from labkit import nsys  # lazy: only profiling needs it (and nsys installed)

    results = results_dir / f"{name}.profiled.json"
    t0 = time.perf_counter()
    try:
        # nsys passes the application's exit status through, so a failing app lands here
        report = nsys.profile(cmd + ["--results", str(results)], name=name, outdir=profile_dir,
                              env=dict(env or {}), progress=progress, capture_range=capture_range)
    except nsys.NsysNotFoundError:
        raise
    except nsys.NsysError as exc:
        raise BenchError(f"benchmark {step!r}, profiled run: {exc}") from None
    log = Path(report.log_path) if report.log_path else profile_dir / f"{name}.log"
    return profile_dir / f"{name}.nsys-rep", _row(0, True, results, log, time.perf_counter() - t0)


def run(command, *, step: str, repeats: int = 3, warmup: int | None = 5, profile: bool = False,
        ledger=None, results_dir: str | os.PathLike | None = None,
        profile_dir: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = None, name: str | None = None, progress: bool = True,
        capture_range: str | None = None) -> Result:
    """Run the application ``repeats`` times and summarize (medians, spread).

    Args:
        command: the application's argv (list, or a string split like a shell), without
            ``--results``; e.g. ``[sys.executable, "source_code/detect_video.py", "--input", clip]``.
        step: the lab step this measures (the ledger's ``step``).
        repeats: measured runs; median and spread are over these.
        warmup: warm-up frames, passed as ``--warmup N`` unless the command has ``--warmup``;
            None passes nothing.
        profile: also run once under Nsight Systems first (``labkit.nsys.profile``), writing
            ``profile_dir/<name>.nsys-rep``; that run is kept in ``repeats`` with
            ``profiled=True`` but left out of the medians (tracing costs time).
        ledger: a :class:`~labkit.ledger.Ledger` or path to append the result's row to.
        results_dir: where each run's ``<name>.rN.json`` and ``<name>.rN.log`` go (default
            ``$LABKIT_REPORTS/results``, ``$LABKIT_REPORTS`` defaulting to ``reports``).
        profile_dir: where the profiled run's report goes (default ``$LABKIT_REPORTS/profiles``).
        env: extra environment variables for the application.
        timeout: seconds allowed per run.
        name: file-name stem (default ``<step>-<YYYYmmdd-HHMMSS>``, so nothing is overwritten).
        progress: show a tqdm bar on stderr.
        capture_range: for the profiled run, what nsys records (``labkit.nsys.profile``): None
            (the whole run), ``"cudaProfilerApi"`` (from the program's cudaProfilerStart to its
            cudaProfilerStop: keeps engine builds and other set-up out), or an NVTX range name.
    Returns:
        :class:`Result`. A results file whose ``status`` is not ``"ok"`` (or has no fps) flags the
        result: :attr:`Result.flags` says why, a :class:`BenchWarning` is issued, and the ledger
        row has ``status: "flagged"``.
    Raises:
        BenchError: the application failed (non-zero exit, timeout, no results file); the
        message carries its stderr tail and the path of the full log.
    """
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    cmd = _prepare(command, warmup)
    name = _safe(name or f"{step}-{_stamp()}")
    results_dir = _reports("results", results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    run_env = _env(env)
    rows = []
    profile_path = None
    total = repeats + (1 if profile else 0)
    with _progress(total, f"bench {step}", progress) as bar:
        if profile:
            profile_path, row = _run_profiled(cmd, name=name, step=step, results_dir=results_dir,
                                              profile_dir=_reports("profiles", profile_dir), env=env, progress=progress,
                                              capture_range=capture_range)
            rows.append(row)
            bar.update()
        for i in range(1, repeats + 1):
            results, log = results_dir / f"{name}.r{i}.json", results_dir / f"{name}.r{i}.log"
            argv = cmd + ["--results", str(results)]
            wall = _run_once(argv, log=log, env=run_env, timeout=timeout, step=step,
                             what=f"run {i} of {repeats}")
            rows.append(_row(i, False, results, log, wall))
            bar.set_postfix_str(f"{rows[-1]['fps']:.1f} fps")
            bar.update()
    frame = pd.DataFrame(rows)
    flags = _flags(frame)
    _warn_flags(step, flags)
    result = Result(step=step, name=name, command=tuple(_argv(command)), config=config_of(cmd), repeats=frame,
                    metrics=_summarize(frame), profile=profile_path, flags=tuple(flags))
    _append(ledger, result)
    return result


def sweep(base_command, param: str, values: Sequence, *, step: str, progress: bool = True,
          on_error: str = "record", **kw) -> pd.DataFrame:
    """:func:`run` once per value of one option (``--batch-size``, ``--streams``, ...).

    Args:
        base_command: the command; ``param`` is replaced or added (``True`` adds a bare switch,
            ``False``/``None`` removes it).
        param: the option, e.g. ``"--batch-size"``.
        values: its values, in order.
        step: the ledger step; ``"{value}"`` in it is replaced (``step="batch{value}"``).
        on_error: ``"record"`` (default): a value whose run fails (say, out of memory at the
            largest batch) becomes a row with ``ok`` False and the application's last error line
            in ``error``, with a :class:`BenchWarning`, and the sweep goes on; ``"raise"``: the
            :class:`BenchError` stops the sweep.
        **kw: passed to :func:`run` (repeats, warmup, ledger, results_dir, ...).
    Returns:
        DataFrame, one row per value: the option (snake_case, e.g. ``batch_size``), ``step``,
        ``name``, ``ok``, ``error`` (None when the run succeeded), and the
        :attr:`Result.metrics` (``fps``, ``latency_p50_ms``, ``latency_p99_ms``, ``spread``,
        ``stage_ms.<stage>``, accuracy, ...; NaN for a failed value).
    """
    if on_error not in ("record", "raise"):
        raise ValueError(f"on_error={on_error!r}: use 'record' or 'raise'")
    col = param.lstrip("-").replace("-", "_")
    name = kw.pop("name", None)
    rows = []
    for value in _iter(values, f"sweep {param}", progress):
        s = step.format(value=value) if "{value}" in step else step
        try:
            r = run(with_flag(base_command, param, value), step=s, progress=False,
                    name=f"{name}-{col}{value}" if name else None, **kw)
        except BenchError as e:
            if on_error == "raise":
                raise
            error = error_line(e)
            warnings.warn(f"sweep {param} {value}: {error}", BenchWarning, stacklevel=2)
            rows.append({col: value, "step": s, "name": None, "ok": False, "error": error, "fps": float("nan")})
            continue
        rows.append({col: value, "step": r.step, "name": r.name, "ok": r.ok, "error": None, **r.metrics})
    return pd.DataFrame(rows)


def _iter(values, desc, enabled):
    from tqdm import tqdm  # plain text bar: tqdm.auto needs ipywidgets in notebooks

    return tqdm(list(values), desc=desc, disable=not enabled, file=sys.stderr, leave=False)


def run_parallel(command, *, processes: int, step: str, warmup: int | None = 5, ledger=None,
                 results_dir: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
                 timeout: float | None = None, name: str | None = None, progress: bool = True) -> Result:
    """Run ``processes`` copies of the application at once and aggregate their throughput.

    Like CV-CUDA's ``benchmark.py -np N``: every process gets its own ``--results`` file; all
    start together and the wall time runs until the last one exits.

    Returns:
        :class:`Result` with one ``repeats`` row per process and metrics: ``fps`` = sum of the
        processes' fps (aggregate throughput while all run), ``fps_wall`` = total frames / wall
        time (start-up and warm-up included, so lower), ``latency_p50_ms`` the median of the
        processes' p50, ``latency_p99_ms`` the worst p99, ``spread`` of the per-process fps,
        ``processes``, ``frames`` (total), ``wall_s``. ``config.processes`` is set.
    Raises:
        BenchError: any process failed (its stderr tail is shown; the others are stopped).
    """
    if processes < 1:
        raise ValueError("processes must be at least 1")
    cmd = _prepare(command, warmup)
    name = _safe(name or f"{step}-np{processes}-{_stamp()}")
    results_dir = _reports("results", results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    run_env = _env(env)
    procs = []
    t0 = time.perf_counter()
    try:
        for i in range(1, processes + 1):
            results, log = results_dir / f"{name}.p{i}.json", results_dir / f"{name}.p{i}.log"
            argv = cmd + ["--results", str(results)]
            logf = open(log, "w")
            logf.write(f"# {shlex.join(argv)}\n")
            logf.flush()
            procs.append((argv, results, log, logf, subprocess.Popen(
                argv, stdout=logf, stderr=subprocess.STDOUT, env=run_env, stdin=subprocess.DEVNULL)))
        walls = {}
        with _progress(processes, f"bench {step} x{processes}", progress) as bar:
            while len(walls) < processes:
                for i, (argv, _, log, _, p) in enumerate(procs, start=1):
                    if i in walls or p.poll() is None:
                        continue
                    walls[i] = time.perf_counter() - t0
                    bar.update()
                    if p.returncode != 0:
                        _check_exit(p.returncode, argv, log, step, f"process {i} of {processes}",
                                    log.read_text(errors="replace"), stream="output")
                if timeout is not None and time.perf_counter() - t0 > timeout:
                    raise BenchError(f"benchmark {step!r}: {processes - len(walls)} of {processes} processes still "
                                     f"running after timeout={timeout} s and were killed; pass a larger timeout=")
                time.sleep(0.05)
    finally:
        for _, _, _, logf, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            logf.close()
    wall = max(walls.values())  # until the last process exited
    frame = pd.DataFrame([_row(i, False, res, log, walls[i]) for i, (_, res, log, _, _) in enumerate(procs, 1)])
    flags = _flags(frame)
    _warn_flags(step, flags)
    metrics = _summarize(frame)
    metrics.update({
        "fps": float(frame["fps"].sum(min_count=1)),
        "fps_wall": float(frame["frames"].sum(min_count=1) / wall) if wall else math.nan,
        "latency_p99_ms": float(frame["latency_p99_ms"].max()),
        "frames": float(frame["frames"].sum(min_count=1)),
        "processes": processes,
        "wall_s": wall,
    })
    metrics.pop("repeats", None)
    config = {**config_of(cmd), "processes": processes}
    result = Result(step=step, name=name, command=tuple(_argv(command)), config=config, repeats=frame,
                    metrics=metrics, flags=tuple(flags))
    _append(ledger, result)
    return result
