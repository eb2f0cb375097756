"""What every benchmark run shares: the results-file reader, the Result, errors, one run of the
application as a subprocess, and the summary (medians, spread) of its repeats.

``labkit.bench`` is the public face (``run``, ``sweep``, ``run_parallel``); this module holds the
parts they share, so that each runner stays short.

Results files follow the versioned schema of ``labkit.annotate`` (``write_results`` /
``read_results``); :data:`RESULT_FIELDS` says which of their fields a run's figures come from.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from labkit.env import reports_dir
from labkit.errors import check_writable, output_error, output_tail
from labkit.paths import atomic_write
from labkit.bench.ledger import Ledger
from labkit.record.proc import child_setup, exit_reason, process_reason, signals_as_interrupt
from labkit.bench.results import BenchError, RESULT_FIELDS, config_of, read_results


def _reports(sub: str, given) -> Path:
    return Path(given) if given is not None else reports_dir() / sub


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
    """A run name as a file-name stem: other characters as ``_``, no leading dot (``..``, a hidden
    file), at most 180 bytes (its files add ``.r12.json`` and the like; NAME_MAX is 255)."""
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", str(name)).strip("_.")[:180] or "run"


def _append(ledger, row: Mapping) -> None:
    if ledger is not None:
        (ledger if isinstance(ledger, Ledger) else Ledger(ledger)).append(row)


def _check_ledger(ledger) -> None:
    """Pre-flight: the ledger's folder is writable (before any run, so no result is lost at the end)."""
    if ledger is not None:  # not a folder, nor a file we cannot read and append to; room beside it
        (led := ledger if isinstance(ledger, Ledger) else Ledger(ledger)).check()
        check_writable(led.path.parent, need_bytes=1 << 20, what="append to a ledger in")


def _repeat_record(step: str, name: str, row: Mapping, labels: Mapping | None) -> dict:
    """The ledger row of one finished repeat (status ``repeat``; see :mod:`labkit.bench.ledger`)."""
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
        with signals_as_interrupt():  # SIGTERM, SIGHUP: as Ctrl-C (the run is killed, finished runs are kept)
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                                  stdin=subprocess.DEVNULL, preexec_fn=child_setup(signal.SIGKILL))
    except subprocess.TimeoutExpired as exc:
        out = (exc.stderr or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        atomic_write(log, f"# {shlex.join(argv)}\n# timed out after {timeout} s\n{out}", overwrite=True, what="log")
        raise BenchError(f"benchmark {step!r}, {what}: still running after timeout={timeout} s and was killed; "
                         f"pass a larger timeout= or fewer frames. Last lines of its stderr:\n{output_tail(out, 30)}",
                         reason=f"the application ran past timeout={timeout} s and was killed") from None
    except OSError as exc:
        raise BenchError(f"benchmark {step!r}: cannot start {argv[0]!r} ({exc})") from None
    wall = time.perf_counter() - t0
    text = f"# {shlex.join(argv)}\n# exit {proc.returncode} after {wall:.2f} s\n## stdout\n{proc.stdout}\n## stderr\n{proc.stderr}"
    try:
        atomic_write(log, text, overwrite=True, what="log")
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
    from labkit.record import export
    from labkit.record import nsys
    from labkit.record import tool  # lazy: only profiling needs it (and nsys installed)

    results = results_dir / f"{name}.profiled.json"
    t0 = time.perf_counter()
    try:
        if nproc:
            from labkit.ranks.profile import RankFailedError, profile_ranks

            try:
                profile_ranks(cmd + ["--results", str(results)], nproc=nproc, name=name, outdir=profile_dir,
                              env=dict(env or {}), timeout_s=timeout)
            except RankFailedError as exc:
                raise BenchError(f"benchmark {step!r}, profiled run: {exc}") from None
            return profile_dir / f"{name}_0.nsys-rep", _row(0, True, results, profile_dir / f"{name}.log",
                                                            time.perf_counter() - t0)
        # nsys passes the application's exit status through, so a failing app lands here
        rec = nsys.record(cmd + ["--results", str(results)], name=name, outdir=profile_dir,
                          env=dict(env or {}), progress=progress, capture_range=capture_range, timeout_s=timeout)
        export.export_sqlite(rec.nsys_rep, nsys=rec.nsys, progress=progress)  # analyses read the export
    except tool.NsysNotFoundError:
        raise
    except tool.NsysError as exc:
        raise BenchError(f"benchmark {step!r}, profiled run: {exc}", reason=getattr(exc, "reason", None)) from None
    return Path(rec.nsys_rep), _row(0, True, results, Path(rec.log), time.perf_counter() - t0)


