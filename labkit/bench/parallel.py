"""Several copies of the application at once, their throughput summed (``labkit.bench.run_parallel``)."""
from __future__ import annotations

import math
import os
import shlex
import subprocess
import time
from typing import Mapping

import pandas as pd

from labkit.bench.truth import parallel_figures, provenance
from labkit.bench.results import BenchError, Result, _flags, _summarize, _warn_flags
from labkit.bench.runner import _append, _argv, _check_exit, _config, _env, _progress, _row, _stamp, _start

__all__ = ["run_parallel"]


def run_parallel(command, *, processes: int, step: str, warmup: int | None = 5, ledger=None,
                 results_dir: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
                 timeout: float | None = None, name: str | None = None, progress: bool = True,
                 config: Mapping | None = None, labels: Mapping | None = None, mode: str | None = None) -> Result:
    """Run ``processes`` copies of the application at once and aggregate their throughput.

    Like CV-CUDA's ``benchmark.py -np N``: every process gets its own ``--results`` file; all
    start together and the wall time runs until the last one exits.

    ``config``, ``labels`` and ``mode`` (the row's ``provenance``) are recorded as in
    :func:`labkit.bench.run`. The aggregate's interval is the sum of the processes' own
    (``fps_ci_low``/``fps_ci_high``, :func:`labkit.bench.truth.parallel_figures`); there is no
    decode-ceiling check: each process decodes its own input, so N of them may pass one decoder's.

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
    cmd, name, results_dir = _start(command, warmup, name or f"{step}-np{processes}-{_stamp()}", results_dir)
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
    metrics.update(parallel_figures(frame))
    result = Result(step=step, name=name, command=tuple(_argv(command)), repeats=frame, metrics=metrics,
                    config={**_config(config, cmd, warmup), "processes": processes}, flags=tuple(flags),
                    labels=dict(labels or {}))
    _append(ledger, {**result.record(), "provenance": provenance(cmd, mode)})
    return result
