"""Benchmark the application: repeated runs as subprocesses, medians and spread, ledger rows.

    from labkit import bench
    cmd = [sys.executable, "my_program.py", "data/clip.mp4"]
    r = bench.run(cmd, step="baseline", repeats=3, ledger="reports/ledger.jsonl", config={"device": "cpu"})
    r.fps, r.spread, r.repeats

labkit knows the application only through its command line and its results file: each run
gets ``--results PATH`` (a JSON file the application writes) and ``--warmup N`` unless the
command already has one; the application itself leaves warm-up frames out of its figures.
Every run's results JSON and output log are kept under ``results_dir``. The results file and
the pieces every runner shares live in :mod:`labkit.bench.runner`; :func:`run_parallel` in
:mod:`labkit.bench.parallel`.
"""
from __future__ import annotations

import os
import warnings
from typing import Mapping, Sequence

import pandas as pd

from labkit.bench.results import (HEADLINE, RESULT_FIELDS, BenchError, BenchWarning, Result, _flags, _summarize,
                                  _warn_flags, config_of, error_line, read_results, spread)
from labkit.bench.runner import (_append, _argv, _config, _env, _progress, _reports, _row, _run_once, _run_profiled,
                                 _stamp, _start, launch, with_flag)
from labkit.bench.runner import _check_ledger, _repeat_record
from labkit.bench.parallel import run_parallel
from labkit.bench.truth import CEILING, check_ceiling, ledger_ceiling, measured_figures, provenance
from labkit.bench.ledger import not_run

__all__ = ["run", "sweep", "run_parallel", "Result", "BenchError", "BenchWarning", "read_results",
           "spread", "error_line", "config_of", "with_flag", "RESULT_FIELDS", "HEADLINE"]


def run(command, *, step: str, repeats: int = 3, warmup: int | None = 5, profile: bool = False,
        ledger=None, results_dir: str | os.PathLike | None = None,
        profile_dir: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = None, name: str | None = None, progress: bool = True,
        capture_range: str | None = None, config: Mapping | None = None,
        labels: Mapping | None = None, launcher: str | None = None, nproc: int | None = None,
        mode: str | None = None) -> Result:
    """Run the application ``repeats`` times and summarize (medians, spread).

    Args:
        command: the application's argv (list, or a string split like a shell), without
            ``--results``; e.g. ``[sys.executable, "my_program.py", clip]``.
        step: the lab step this measures (the ledger's ``step``).
        repeats: measured runs; median and spread are over these.
        warmup: warm-up frames, passed as ``--warmup N`` unless the command has ``--warmup``;
            None passes nothing.
        profile: also run once under Nsight Systems first (``labkit.record.nsys.profile``), writing
            ``profile_dir/<name>.nsys-rep``; that run is kept in ``repeats`` with
            ``profiled=True`` but left out of the medians (tracing costs time).
        ledger: a :class:`~labkit.bench.ledger.Ledger` or path to append the result's row to.
        results_dir: where each run's ``<name>.rN.json`` and ``<name>.rN.log`` go (default
            ``$LABKIT_REPORTS/results``, ``$LABKIT_REPORTS`` defaulting to ``reports``).
        profile_dir: where the profiled run's report goes (default ``$LABKIT_REPORTS/profiles``).
        env: extra environment variables for the application.
        timeout: seconds allowed per run, the profiled one too (nsys stops that one as Ctrl-C does).
        name: file-name stem (default ``<step>-<YYYYmmdd-HHMMSS>``, so nothing is overwritten).
        progress: show progress where it renders (``labkit.progress``: a widget in Jupyter, a line
            on a terminal, nothing in a log).
        capture_range: for the profiled run, what nsys records (``labkit.record.nsys.profile``): None
            (the whole run), ``"cudaProfilerApi"`` (from the program's cudaProfilerStart to its
            cudaProfilerStop: keeps engine builds and other set-up out), or an NVTX range name.
        config: the options the command was built from (e.g. the flags dict the argv came
            from), recorded as the ledger's ``config`` (plus ``warmup`` when bench adds it);
            None parses them back from the argv (:func:`config_of`), for a command of your own.
        labels: extra top-level ledger fields (``kind``, ``builds_on``, ``predicted_speedup``,
            ``finding``; see :mod:`labkit.bench.ledger`).
        launcher, nproc: ``launcher="torchrun", nproc=N`` runs every repeat as N ranks under
            PyTorch's launcher (:func:`labkit.bench.runner.launch`); rank 0's one results file
            gives the aggregate fps, and ``config`` records ``ranks: N``. The profiled run is
            then one nsys report per rank (:func:`labkit.ranks.profile.profile_ranks`).
        mode: the run mode recorded in the row's ``provenance.mode`` (default ``$LABKIT_MODE``).
            Every row also records ``provenance.commit``/``dirty``/``labkit``, the interval
            ``fps_ci_low``/``fps_ci_high`` (``fps_ci_over``), ``too_short``, and, once a
            ``labels={"ceiling": "decode"}`` row of this host and mode is in the ledger, the
            decode ceiling check (:mod:`labkit.bench.truth`).
    Returns:
        :class:`Result`. A results file whose ``status`` is not ``"ok"`` (or has no fps) flags the
        result: :attr:`Result.flags` says why, a :class:`BenchWarning` is issued, and the ledger
        row has ``status: "flagged"``.
    Raises:
        BenchError: the application failed (non-zero exit, timeout, no results file); the
        message carries its stderr tail and the path of the full log. Each finished repeat is
        already in the ledger then (a ``status: "repeat"`` row, appended as it completed).
        OutputError: the ledger's or results' folder is not writable, or its disk is full.
    """
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    _check_ledger(ledger)
    cmd, name, results_dir = _start(command, warmup, name or f"{step}-{_stamp()}", results_dir)
    launched = launch(cmd, launcher, nproc)
    run_env = _env(env)
    rows = []
    profile_path = None
    total = repeats + (1 if profile else 0)
    with _progress(total, f"bench {step}", progress) as bar:
        if profile:
            profile_path, row = _run_profiled(cmd, name=name, step=step, results_dir=results_dir,
                                              profile_dir=_reports("profiles", profile_dir), env=env, progress=progress,
                                              capture_range=capture_range, nproc=nproc if launcher else None,
                                              timeout=timeout)
            rows.append(row)
            bar.update()
        for i in range(1, repeats + 1):
            results, log = results_dir / f"{name}.r{i}.json", results_dir / f"{name}.r{i}.log"
            argv = launched + ["--results", str(results)]
            wall = _run_once(argv, log=log, env=run_env, timeout=timeout, step=step,
                             what=f"run {i} of {repeats}")
            rows.append(_row(i, False, results, log, wall))
            _append(ledger, _repeat_record(step, name, rows[-1], labels))  # kept if a later run fails
            bar.set_postfix_str(f"{rows[-1]['fps']:.1f} fps")
            bar.update()
    frame = pd.DataFrame(rows)
    flags = _flags(frame)
    metrics = {**_summarize(frame), **measured_figures(frame, {})}
    ranks = {"ranks": nproc, "launcher": launcher} if launcher else {}
    config = {**_config(config, cmd, warmup), **ranks}
    prov = provenance(cmd, mode)
    draft = {**dict(labels or {}), "provenance": prov, "flags": flags, "metrics": metrics}
    ceiling = ledger_ceiling(ledger, prov["mode"]) if (labels or {}).get("ceiling") != CEILING else None
    checked = check_ceiling(draft, ceiling)
    metrics, flags = checked["metrics"], checked["flags"]
    _warn_flags(step, flags)
    result = Result(step=step, name=name, command=tuple(_argv(command)), config=config, repeats=frame,
                    metrics=metrics, profile=profile_path, flags=tuple(flags), labels=dict(labels or {}))
    _append(ledger, {**result.record(), "provenance": prov})
    return result


def sweep(command, param: str, values: Sequence, *, step: str, progress: bool = True,
          on_error: str = "record", config: Mapping | None = None, **kw) -> pd.DataFrame:
    """:func:`run` once per value of one option (``batch_size``, ``streams``, ...).

    Args:
        command: a function ``value -> argv`` (build each command from your own options, as the
            lab does), or an argv in which ``param`` is set per value with :func:`with_flag`
            (``True`` adds a bare switch, ``False``/``None`` removes it).
        param: the option, e.g. ``"--chunk"`` or ``"chunk"`` (a program's own option).
        values: its values, in order.
        step: the ledger step; ``"{value}"`` in it is replaced (``step="batch{value}"``).
        on_error: ``"record"`` (default): a value whose run fails (say, out of memory at the
            largest batch) becomes a row with ``ok`` False and the application's last error line
            in ``error``, with a :class:`BenchWarning`, and a ``status: "failed"`` ledger row
            (when ``ledger`` is given); the sweep goes on. ``"raise"``: the
            :class:`BenchError` stops the sweep.
        config: the options the command is built from; each value's run records
            ``{**config, <param>: value}`` (see :func:`run`); or a function of the value giving
            that value's whole options (a command whose other options follow the value, as the
            lab's frames follow the queues a batch size fills).
        **kw: passed to :func:`run` (repeats, warmup, ledger, results_dir, labels, ...); ``labels``
            may be a function of the value (each value's own prediction, made once the values
            before it have run).
    Returns:
        DataFrame, one row per value: the option (snake_case, e.g. ``batch_size``), ``step``,
        ``name``, ``ok``, ``error`` (None when the run succeeded), and the
        :attr:`Result.metrics` (``fps``, ``latency_p50_ms``, ``latency_p99_ms``, ``spread``,
        ``stage_ms.<stage>``, accuracy, ...; NaN for a failed value).
    """
    if on_error not in ("record", "raise"):
        raise ValueError(f"on_error={on_error!r}: use 'record' or 'raise'")
    col = param.lstrip("-").replace("-", "_")
    flag = "--" + col.replace("_", "-")
    name = kw.pop("name", None)
    rows = []
    for value in _iter(values, f"sweep {param}", progress):
        s = step.format(value=value) if "{value}" in step else step
        argv = command(value) if callable(command) else with_flag(command, flag, value)
        cfg = dict(config(value)) if callable(config) else None if config is None else {**config, col: value}
        each = {**kw, "labels": kw["labels"](value)} if callable(kw.get("labels")) else kw
        try:
            r = run(argv, step=s, progress=False, name=f"{name}-{col}{value}" if name else None, config=cfg, **each)
        except BenchError as e:
            if on_error == "raise":
                raise
            error = error_line(e)
            warnings.warn(f"sweep {param} {value}: {error}", BenchWarning, stacklevel=2)
            _append(kw.get("ledger"), not_run(s, status="failed", reason=error,
                                              config=cfg if cfg is not None else config_of(argv),
                                              labels=each.get("labels")))
            rows.append({col: value, "step": s, "name": None, "ok": False, "error": error, "fps": float("nan")})
            continue
        rows.append({col: value, "step": r.step, "name": r.name, "ok": r.ok, "error": None, **r.metrics})
    return pd.DataFrame(rows)


def _iter(values, desc, enabled):
    from labkit.progress import bar

    return bar(desc, enabled=enabled, iterable=list(values))
