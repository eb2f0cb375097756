"""Programs whose limiter is known by construction, and the check of labkit's judgement on them.

Each program in ``tests/programs/known/`` has its limiter built in and a ``--fix`` variant that
applies one lever to the full (so the speed-up the fix measures is what a right prediction of that
lever says); each prints one JSON line ``{"wall_s": steady-loop wall time, "items": n}`` at exit.

Used by ``tests/test_known_answers.py`` (asserts) and ``benchmarks/known_answers.py`` (the table):

- :data:`PROGRAMS`: name -> :class:`Program` (argv, expected levers and stage, GPU or not, what a
  user would tell ``advise``);
- :func:`profile`: the slow variant under nsys (``cuda,nvtx,osrt``), loaded;
- :func:`measure`: both variants as plain subprocesses, interleaved, median of ``repeats``;
- :func:`judge`: ``labkit.advise``'s findings and ``labkit.bottleneck`` on the profile;
- :func:`verdict`: one table row (expected, found, predicted x, measured x, pass and why);
- :func:`amdahl_violations`: findings predicting more than ``window / (window - saves)``;
- :func:`check`: all of it for one program, profiled again where its first profile fails.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KNOWN = Path(__file__).resolve().parent / "programs" / "known"
SWITCHES_RECORDED = Path(__file__).resolve().parent / "fixtures" / "known_switches"
"""The programs profiled with context switches, as recorded here (tests/fixtures/README.md)."""

TOLERANCE = 0.25
"""A prediction passes within 25 % of the measured speed-up (|predicted / measured - 1| <= 0.25),
widened by the measurement's own noise (see :func:`measure`) where the machine was loaded, by
:data:`NOISE_WIDENING` at most."""
NOISE_WIDENING = 0.10
"""The most the measurement's noise widens :data:`TOLERANCE` (10 points): a noise of 0.34 on a loaded
machine would otherwise let a prediction 59 % off pass."""
OVER_PROMISE = 1.3
"""No finding of the fix's lever promises more than this times what the fix measured, whatever the
noise: a user acts on the larger figure."""
BOUND_SLACK = 1.05
"""A bound passes while measured <= bound x 1.05 (the CPU baseline's spread over 3 repeats: 3.9 %)."""
PROFILES = 3
"""Profiles of a program whose first verdict failed (:func:`check`): on the loaded 2-core CI VM one
profile of poll_consumer left 195 of its 723 ms once 'produce' cost nothing (the consumer's 36 items
of 5 ms: 181-187 ms in profiles here), and the producer's bound read 3.70x against 3.89x measured;
with four busy loops beside it here, four profiles gave 3.56x-4.00x, their 'consume' ranges 5.0-5.6
ms on average (2026-11-30)."""
PROFILE_LIMIT_S = 60
"""Seconds a profile may take (about 10 s each on the 2-core VM, the longest known-answer test 26 s
with its three profiles and six plain runs) before it is stopped and taken again: nsys 2022.4 now and
then hangs at its program's exit, and each hang cost the whole limit (the fresh-clone CI run of
2026-12-03 at 180 s: loader_process 227 s and pipe_consumer 219 s, the others at most 26 s)."""
NOISE = 1.05
"""The control program passes when no finding predicts more than this (labkit's MIN_GAIN)."""


@dataclass(frozen=True)
class Program:
    """One known-answer program.

    ``levers``: lever ids of ``labkit.judge.evidence.LEVERS``, any of which is the fix's lever
    (empty: nothing to find). ``stage``: the stage (range name) the fix's finding must name, or None.
    ``limiter``: the stages of the limiting thread, by construction: the top finding must be about
    one of them (default: ``stage``). The top finding is the largest potential, which need not be
    the fix's lever (a stage that could be made cheaper may promise more than overlapping it); the
    fix's own finding must predict what the fix measured. ``switches``: profiled with context switches
    (``--cpuctxsw=process-tree``), which nsys 2022.4 now and then hangs on: recorded once, and the
    suite judges its recorded profile (:data:`SWITCHES_RECORDED`). ``advise``: keyword arguments a user would give ``labkit.advise`` (what the
    profile cannot say: a removable stage, the K of skip-work). ``blocked``: the run's time is
    mostly blocked (sleeps, reads), and the bottleneck sentence must say so. ``expected_x``: the
    speed-up of the fix by construction, on two free cores (for the reader; the test uses the
    measured one). ``not_rules``: rules whose explanation is false of the program by construction
    (workers that run at once do not take turns): the top finding must not be one of them. ``rule``:
    where no stage can name the limit (work outside every range), the rule the top finding and the
    fix's finding must both come from. ``pending``: what the judgement does not model yet that the
    program needs (it is in the table, :func:`check` judges it, but CI's pass count leaves it out
    until the judgement has it).
    """

    name: str
    script: str
    levers: tuple[str, ...]
    stage: str | None
    expected_x: float
    gpu: bool = False
    advise: dict = field(default_factory=dict)
    blocked: bool = False
    limiter: tuple[str, ...] = ()
    switches: bool = False
    not_rules: tuple[str, ...] = ()
    rule: str | None = None
    pending: str = ""

    @property
    def argv(self) -> list[str]:
        return [sys.executable, str(KNOWN / self.script)]

    @property
    def fix_argv(self) -> list[str]:
        return self.argv + ["--fix"]

    def as_dict(self) -> dict:
        return {"name": self.name, "argv": self.argv, "fix_argv": self.fix_argv, "levers": self.levers,
                "stage": self.stage, "gpu": self.gpu, "advise": dict(self.advise), "blocked": self.blocked,
                "expected_x": self.expected_x}


_ALL = [
    Program("slow_stage", "slow_stage.py", ("cheaper_stage",), "transform", 2.7,
            limiter=("decode", "transform", "write")),
    Program("starved_consumer", "starved_consumer.py", ("parallel_input", "overlap_stages"), "load_batch", 3.0),
    Program("inline_io", "inline_io.py", ("overlap_stages",), "read", 1.6, limiter=("read", "compute")),
    Program("serial_stages", "serial_stages.py", ("overlap_stages",), None, 1.6, limiter=("features", "classify")),
    Program("removable_stage", "removable_stage.py", ("remove_stage",), "display", 3.0,
            advise={"removable": ("display",)}),
    Program("per_call_overhead", "per_call_overhead.py", ("batch",), "infer", 3.4),
    Program("every_item", "every_item.py", ("skip_work",), "detect", 3.1, advise={"skip_every": 4}),
    Program("batched_every_item", "batched_every_item.py", ("skip_work",), "detect", 1.39,
            advise={"skip_every": 4}),
    Program("no_nvtx_blocked", "no_nvtx_blocked.py", ("parallel_input", "overlap_stages"), None, 6.0,
            blocked=True),
    Program("worker_pool", "worker_pool.py", ("cheaper_stage",), "infer", 3.0),
    Program("handoff", "handoff.py", ("cheaper_stage",), "infer", 4.0, limiter=("prepare", "infer")),
    Program("taking_turns", "taking_turns.py", ("cheaper_stage",), "commit", 4.0, limiter=("prepare", "commit")),
    Program("unannotated_input", "unannotated_input.py", ("parallel_input",), None, 3.0),
    Program("lock_over_io", "lock_over_io.py", ("release_lock",), "write", 1.7, limiter=("write",)),
    Program("gil_turns", "gil_turns.py", ("release_lock",), None, 2.0),
    Program("child_per_item", "child_per_item.py", ("in_flight",), None, 2.0),
    Program("map_then_reduce", "map_then_reduce.py", ("overlap_stages",), "reduce", 1.45, limiter=("map", "reduce")),
    Program("ask_then_finish", "ask_then_finish.py", ("overlap_stages",), "finish", 1.5, limiter=("ask", "finish")),
    Program("async_awaits", "async_awaits.py", ("parallel_input",), "fetch", 3.7, limiter=("fetch", "compute")),
    Program("futures_one_by_one", "futures_one_by_one.py", ("parallel_input", "in_flight"), "request", 3.7,
            limiter=("request", "compute")),
    Program("poll_consumer", "poll_consumer.py", ("cheaper_stage",), "produce", 4.0),
    Program("pipe_consumer", "pipe_consumer.py", ("cheaper_stage",), "produce", 4.0),
    Program("slow_writer", "slow_writer.py", ("cheaper_stage",), "write", 3.0),
    Program("slow_writer_pipe", "slow_writer_pipe.py", ("cheaper_stage",), "encode", 3.0),
    Program("timed_wait", "timed_wait.py", ("cheaper_stage",), "produce", 3.0, switches=True),
    Program("timed_wait_untraced", "timed_wait.py", ("cheaper_stage",), "produce", 3.0),
    Program("fed_pool", "fed_pool.py", ("cheaper_stage",), "produce", 2.0),
    Program("pool_limits", "pool_limits.py", ("cheaper_stage",), "work", 2.5, not_rules=("taking_turns",)),
    Program("unannotated_feeder", "unannotated_feeder.py", ("cheaper_stage",), None, 3.6, rule="outside_ranges"),
    Program("unannotated_process", "unannotated_process.py", ("cheaper_stage",), None, 3.6, rule="outside_ranges"),
    Program("unannotated_work", "unannotated_work.py", ("cheaper_stage",), None, 4.5, rule="outside_ranges"),
    Program("moving_limit", "moving_limit.py", ("cheaper_stage",), "load", 1.4, limiter=("load", "compute")),
    Program("same_name", "same_name.py", ("cheaper_stage",), "work", 3.75, not_rules=("taking_turns",)),
    Program("thread_per_item", "thread_per_item.py", ("cheaper_stage",), "infer", 3.0, not_rules=("taking_turns",)),
    Program("checkpoint", "checkpoint.py", ("cheaper_stage",), "checkpoint", 2.5),
    Program("threads_over_cores", "threads_over_cores.py", ("cheaper_stage",), "infer", 2.0,
            limiter=("prepare", "infer")),
    Program("loader_process", "loader_process.py", ("cheaper_stage",), "forward", 1.25,
            limiter=("forward", "backward")),
    Program("lone_stage", "lone_stage.py", ("cheaper_stage",), "consume", 1.5),
    Program("lock_behind_fetch", "lock_behind_fetch.py", ("cheaper_stage",), "fetch", 1.25),
    Program("lock_behind_encode", "lock_behind_encode.py", ("cheaper_stage",), "fetch", 1.4),
    Program("dataloader_workers", "dataloader_workers.py", ("parallel_input",), "load", 4.0,
            pending="a stage moved onto more worker processes (the replayed graph's lever): today's "
                    "finding is a cheaper 'load' at 4.3x; 8 workers measured 1.4x-2.7x on the loaded 2-core VM"),
    Program("balanced", "balanced.py", (), None, 1.0),
    Program("startup_heavy", "startup_heavy.py", ("overlap_stages",), "load", 1.7, limiter=("load", "step")),
    Program("gpu_pageable", "gpu_pageable.py", ("pin_memory",), None, 2.0, gpu=True),
    Program("gpu_sync", "gpu_sync.py", ("remove_sync",), None, 1.9, gpu=True),
    Program("gpu_tiny_launches", "gpu_tiny_launches.py", ("batch", "cuda_graphs", "compile"), None, 10.0, gpu=True),
]
PROGRAMS: dict[str, Program] = {p.name: p for p in _ALL}
CPU_PROGRAMS = [p.name for p in _ALL if not p.gpu and not p.switches and not p.pending]
PENDING_PROGRAMS = [p.name for p in _ALL if p.pending]
GPU_PROGRAMS = [p.name for p in _ALL if p.gpu]


def _env() -> dict:
    """The programs import this checkout's labkit (its annotate module), one thread per math library."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    return env


def run_once(argv: list[str], *, timeout: float = 120) -> dict:
    """Run one variant as a plain subprocess; its JSON line (``wall_s``, ``items``)."""
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(argv)} printed no JSON line: {done.stdout[-400:]}")
    return json.loads(lines[-1])


def measure(prog: Program | str, *, repeats: int = 3) -> dict:
    """Both variants, slow and fix interleaved (so a load on the machine hits both alike).

    Returns: slow_s and fix_s (median steady-loop wall, s), speedup (slow_s / fix_s), noise (half
    the spread of the paired speed-ups slow_i / fix_i over their median: what the machine's load
    did to the measurement), and the runs.
    """
    prog = PROGRAMS[prog] if isinstance(prog, str) else prog
    slow, fix = [], []
    for _ in range(repeats):
        slow.append(run_once(prog.argv)["wall_s"])
        fix.append(run_once(prog.fix_argv)["wall_s"])
    s, f = statistics.median(slow), statistics.median(fix)
    pairs = [a / b for a, b in zip(slow, fix)]
    noise = (max(pairs) - min(pairs)) / (2 * statistics.median(pairs))
    return {"slow_s": s, "fix_s": f, "speedup": s / f, "noise": noise, "slow_runs": slow, "fix_runs": fix}


def profile(prog: Program | str, outdir, *, trace=("cuda", "nvtx", "osrt"), timeout_s: float = PROFILE_LIMIT_S,
            follow_forks: bool = True):
    """The slow variant under nsys, exported and loaded (``outdir/<name>.nsys-rep``). A profile that
    runs past ``timeout_s`` is stopped and taken again, once: nsys 2022.4 now and then hangs at its
    program's exit (CI run N of 2026-11-30: 19 minutes, the program done)."""
    import labkit
    from labkit.record.nsys import ProfileTimeoutError

    prog = PROGRAMS[prog] if isinstance(prog, str) else prog
    for again in (False, True):
        try:
            return labkit.profile(prog.argv, name=prog.name, outdir=str(outdir), trace=trace, env=_env(),
                                  overwrite=True, progress=False, timeout_s=timeout_s,
                                  nsys_args=[*(["--cpuctxsw=process-tree"] if prog.switches else []),
                                             *([] if follow_forks else ["--trace-fork-before-exec=false"])])
        except ProfileTimeoutError:
            if again:
                raise


def judge(prog: Program | str, rep) -> dict:
    """labkit's judgement of the slow variant's profile: ``advice`` (the frame), ``top`` (its first
    row as a dict, or None), ``bottleneck`` (the object, or None) and ``errors`` (what raised)."""
    import labkit

    prog = PROGRAMS[prog] if isinstance(prog, str) else prog
    out: dict = {"advice": None, "top": None, "bottleneck": None, "errors": []}
    try:
        adv = labkit.advise(rep, **prog.advise)
        out["advice"] = adv
        out["top"] = adv.iloc[0].to_dict() if len(adv) else None
    except Exception as exc:  # the table reports it as the program's failure
        out["errors"].append(f"advise: {type(exc).__name__}: {exc}")
    try:
        out["bottleneck"] = labkit.bottleneck(rep)
    except Exception as exc:
        out["errors"].append(f"bottleneck: {type(exc).__name__}: {exc}")
    return out


def amdahl_limit(row: dict) -> float | None:
    """``window_ms / (window_ms - saves_ms)`` of a finding, where it has those columns."""
    w, s = row.get("window_ms"), row.get("saves_ms")
    if w is None or s is None or w != w or s != s:
        return None
    return float("inf") if s >= w else w / (w - s)


def amdahl_violations(advice) -> list[str]:
    """Findings whose prediction exceeds their own Amdahl limit (1 % rounding allowed)."""
    if advice is None or not len(advice) or not {"saves_ms", "window_ms"} <= set(advice.columns):
        return []
    bad = []
    for row in advice.to_dict("records"):
        lim = amdahl_limit(row)
        if lim is not None and row["predicted_speedup"] > lim * 1.01:
            bad.append(f"{row['lever']} on {row.get('stage')}: {row['predicted_speedup']:.2f}x > "
                       f"{row['window_ms']:.0f}/({row['window_ms']:.0f}-{row['saves_ms']:.0f}) = {lim:.2f}x")
    return bad


def _names(want, row) -> bool:
    """Whether a finding row is about one of the stages ``want`` (its stage, or its finding's words)."""
    return any(w in str(x) for w in want for x in (row.get("stage"), row.get("finding")) if x is not None)


def fix_finding(prog: Program, adv) -> dict | None:
    """The first (largest) finding with the fix's lever on the fix's stage, as a dict, or None."""
    if adv is None or len(adv) == 0:
        return None
    for _, r in adv.iterrows():
        r = r.to_dict()
        if r["lever"] in prog.levers and (prog.stage is None or _names((prog.stage,), r)) and \
                (prog.rule is None or r["rule"] == prog.rule):
            return r
    return None


def verdict(prog: Program | str, judged: dict, measured: dict) -> dict:
    """One row of the known-answer table, with ``passed`` and ``why`` (every reason it failed): the
    top finding is about the limiting thread's stages, the fix's own finding is there and predicts
    the measured speed-up within the tolerance (widened by the measurement's noise, by
    :data:`NOISE_WIDENING` at most) and promises at most :data:`OVER_PROMISE` times it, no bound is
    exceeded and no finding predicts past its own Amdahl limit."""
    prog = PROGRAMS[prog] if isinstance(prog, str) else prog
    top, bn, adv = judged["top"], judged["bottleneck"], judged["advice"]
    meas = measured["speedup"]
    tol = TOLERANCE + min(measured.get("noise", 0.0), NOISE_WIDENING)
    why = list(judged["errors"])
    fix = fix_finding(prog, adv) if prog.levers else None
    rank = None
    if fix is not None:
        rank = 1 + next(i for i, (_, r) in enumerate(adv.iterrows()) if r["rule"] == fix["rule"]
                        and r["stage"] == fix["stage"] and r["lever"] == fix["lever"])
    row = {"program": prog.name, "expected": "/".join(prog.levers) or "(nothing)",
           "expected_stage": prog.stage or "", "top": top["lever"] if top else "(nothing)",
           "top_stage": (top.get("stage") or "") if top else "",
           "top_x": round(float(top["predicted_speedup"]), 3) if top else None,
           "fix_rank": rank, "predicted_x": None, "measured_x": round(meas, 3),
           "noise": round(measured.get("noise", 0.0), 3), "ratio": None,
           "basis": fix.get("basis") if fix else "", "saves_ms": fix.get("saves_ms") if fix else None,
           "window_ms": fix.get("window_ms") if fix else None, "bottleneck": str(bn) if bn is not None else ""}
    if fix is not None:
        pred = float(fix["predicted_speedup"])
        row["predicted_x"], row["ratio"] = round(pred, 3), round(pred / meas, 3)
    if not prog.levers:  # the control: nothing above noise
        if top is not None and top["predicted_speedup"] > NOISE:
            why.append(f"finds {top['lever']} at {top['predicted_speedup']:.2f}x in a balanced program")
        if abs(meas - 1) > tol:
            why.append(f"the control's fix measured {meas:.2f}x (should be 1.0x): the machine is too noisy")
    elif top is None:
        why.append("no finding")
    else:
        limiter = prog.limiter or ((prog.stage,) if prog.stage else ())
        if limiter and not _names(limiter, top):
            why.append(f"top finding is about {top.get('stage')!r}, not the limiting thread's {'/'.join(limiter)}")
        if prog.rule and top.get("rule") != prog.rule:
            why.append(f"top finding's rule is {top.get('rule')}, not {prog.rule}")
        if top.get("rule") in prog.not_rules:
            why.append(f"top finding's rule {top['rule']} does not explain this program")
        if fix is None:
            why.append(f"no {'/'.join(prog.levers)} finding" + (f" on {prog.stage!r}" if prog.stage else ""))
        else:
            if abs(row["ratio"] - 1) > tol:
                why.append(f"{fix['lever']} predicted {row['predicted_x']:.2f}x vs measured {meas:.2f}x (off by "
                           f"more than {100 * tol:.0f} %)")
            if row["predicted_x"] > meas * OVER_PROMISE:
                why.append(f"{fix['lever']} promised {row['predicted_x']:.2f}x, over {OVER_PROMISE:g}x the "
                           f"measured {meas:.2f}x")
            if fix.get("basis") == "bound" and meas > row["predicted_x"] * BOUND_SLACK:
                why.append(f"bound {row['predicted_x']:.2f}x exceeded by the measured {meas:.2f}x")
    if prog.blocked and "block" not in row["bottleneck"].lower():
        why.append("bottleneck does not call the run blocked")
    why += amdahl_violations(adv)
    row["passed"] = not why
    row["why"] = "; ".join(why)
    return row


def typical(tries: list[tuple[dict, dict]]) -> tuple[dict, dict]:
    """Of the (row, judged) of several profiles of one program, the one whose fix's prediction is the
    median (a profile without the fix's finding counts as the lowest; the first of equals), its row
    saying every try's prediction (``profiles``)."""
    key = [t[0]["predicted_x"] if t[0]["predicted_x"] is not None else float("-inf") for t in tries]
    order = sorted(range(len(tries)), key=lambda i: (key[i], i))
    row, judged = tries[order[(len(order) - 1) // 2]]
    return dict(row, profiles=[t[0]["predicted_x"] for t in tries]), judged


def check(prog: Program | str, outdir, *, repeats: int = 3, measured: dict | None = None) -> tuple[dict, dict]:
    """Measure, profile and judge one program: its verdict row and the judgement it came from.

    A profile is one sample of a machine whose load varies, as the plain runs are (three of them,
    their median): where the first profile's verdict fails, the program is profiled :data:`PROFILES`
    - 1 times more and the verdict is that of the median prediction (:func:`typical`). A rule wrong by
    construction fails in most profiles; one loaded profile decides nothing. ``measured``: the
    plain runs' :func:`measure`, where taken already."""
    prog = PROGRAMS[prog] if isinstance(prog, str) else prog
    measured = measured or measure(prog, repeats=repeats)
    tries = []
    for k in range(PROFILES):
        judged = judge(prog, profile(prog, Path(outdir) / f"try{k}" if k else outdir))
        tries.append((verdict(prog, judged, measured), judged))
        if tries[0][0]["passed"]:
            break
    return typical(tries)
