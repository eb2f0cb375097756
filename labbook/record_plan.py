"""The recording plan of ``scripts/record_reference.py``: how many frames each step runs, what
each step costs on a machine (a timing model built on figures already measured there), and
the calls the steps are packed into so that every call and the whole recording fit the device
tool's limits (``plan``; ``python scripts/record_reference.py plan --json``).

Frames per step (small and record mode): as few as Little's law allows. A run measures throughput only
when the frames its queues and stages hold at once are at most ``THROUGHPUT_RULE`` of its timed
frames (``source_code.results``; ``tests/test_modes.py``), so a synchronous batch-1 step needs
a few dozen frames and a queued batch-32 step thousands: :func:`frames_for` gives each step the
frames its own queues need (with the batch each stage past the detector holds as room to spare),
never fewer than ``MIN_FRAMES`` nor more than the clip holds.

Per step, the model (:func:`step_seconds`) adds: each run's start-up (Python, torch, CUDA, the
model and backend), its frames at the step's frames/s, the nsys start, stop and export of the
profiled run (per 1,000 frames), accuracy scored once (the application caches the score of an
output it has scored before: repeats that produce the same output are scored once, see
``source_code.results.accuracy_cached``) and the one-time preparations the step needs that no
earlier step made (a compiled graph, an ONNX export, an INT8 calibration, a TensorRT engine).
Each call adds its own fixed cost (restoring the state, making the clip on a fresh machine,
writing the reference and the state back).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from labbook.settings import ROOT, settings

PER_STEP_MODES = ("small", "record")
"""The modes whose steps each run the frames their own queues need (:func:`frames_for`); full mode
runs its settings' frames everywhere."""

MIN_FRAMES = 600
"""Frames of a step whose queues hold few (the synchronous ones): enough batches for the
interval of the run's frames/s (``source_code.results.CI_BLOCKS`` blocks of them)."""


def held_frames(flags: Mapping, *, queue_size: int | None = None) -> int:
    """Frames a run with ``flags`` holds when its detector is the slowest stage (Little's L, as
    ``source_code.runner.frames_held``), plus the batch each stage past the detector has in hand."""
    from source_code.options import BY_NAME
    from source_code.runner import frames_held
    from source_code.stages import DETECTOR_STAGES, STAGES

    batch = int(flags.get("batch_size", 1))
    streams = int(flags.get("streams", 1))
    queued = bool(flags.get("queues"))
    q = int(flags.get("queue_size", queue_size or BY_NAME["queue_size"].default))
    held = frames_held(batch=batch, queue_size=q, streams=streams, queued=queued, threaded=queued or streams > 1)
    return held + len(STAGES[STAGES.index(DETECTOR_STAGES[-1]) + 1:]) * batch


def frames_for(flags: Mapping, mode: str) -> int:
    """Frames per stream that a step with ``flags`` runs in ``mode``: small and record mode size each
    step by what its queues hold (the module doc), at most the settings' frames in small mode; full
    mode runs its settings' frames."""
    from source_code.results import THROUGHPUT_RULE

    s = settings(mode)
    if mode not in PER_STEP_MODES:
        return s.frames
    held, streams = held_frames(flags), int(flags.get("streams", 1))
    # held <= RULE x timed, timed = streams x frames - warmup - held
    need = math.ceil((held / THROUGHPUT_RULE + held + s.warmup) / streams)
    most = int(s.video_seconds * 30) if mode == "record" else s.frames  # record: what the clip holds
    return int(min(most, max(MIN_FRAMES, need)))


def frames_range(mode: str, *, gpu: bool | None = None) -> tuple[int, int]:
    """The fewest and the most frames per stream a step of ``mode``'s catalogue runs here (``gpu``:
    the catalogue of a GPU machine or not; default this machine's)."""
    from labbook.settings import gpu_available
    from labbook.steps import catalogue

    gpu = gpu_available() if gpu is None else gpu
    frames = [frames_for(st.flags, mode) for st in catalogue(mode, gpu=gpu).values()]
    return min(frames), max(frames)


def clip_seconds(mode: str) -> float:
    """Seconds of clip the mode's steps need: the record mode's longest step, else the settings'."""
    from labbook.steps import catalogue

    s = settings(mode)
    if mode != "record":
        return s.video_seconds
    most = max(frames_for(st.flags, mode) for st in catalogue(mode, gpu=True).values())
    return min(s.video_seconds, math.ceil(most / 30 + 1))


@dataclass(frozen=True)
class Machine:
    """One machine's timing model: seconds per part of a step, frames/s per step."""

    name: str
    basis: str  # where the figures come from (files and commands)
    startup_s: float  # one application run's start: interpreter, torch, CUDA, weights, backend
    profile_s: float  # nsys start and stop around a run
    export_s_per_kframe: float  # nsys export (and trim) of the profiled run, per 1,000 frames
    accuracy_ms_per_frame: float  # scoring one frame of stream 0 (mAP, MOTA, IDF1, HOTA)
    call_s: float  # per call: restore the state, save_reference, the tarballs
    clip_s: float  # the clip, made on a fresh machine (the first call; a later call made within the
    #                machine's idle release finds it still there)
    tensorrt: bool  # TensorRT is installed there (else its steps are skipped rows, ``skip_s`` each)
    fps: Mapping[str, float]  # step -> frames/s (all streams, all processes side by side)
    build_s: Mapping[str, float] = field(default_factory=dict)  # one-time preparation -> seconds
    skip_s: float = 1.0  # a step this machine cannot run: its skipped ledger row
    call_limit_s: float = 540.0  # 9 minutes a call
    total_limit_s: float = 900.0  # 15 minutes of device time a session (2026-11-26); the state carries over
    record_limit_s: float | None = None  # the whole recording's budget within one session, if it must fit one
    measured_s: Mapping[str, float] = field(default_factory=dict)  # step -> wall seconds it took there
    onnxruntime_gpu: bool = False  # its environment has onnxruntime-gpu (else ONNX Runtime runs on its CPU)
    gpus: int = 1

    def __post_init__(self):
        object.__setattr__(self, "fps", MappingProxyType(dict(self.fps)))
        object.__setattr__(self, "build_s", MappingProxyType(dict(self.build_s)))
        object.__setattr__(self, "measured_s", MappingProxyType(dict(self.measured_s)))


def _rows(path: Path) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if r.get("status", "ok") == "ok":
                out[r["step"]] = r.get("metrics", {})
    return out


H100 = ROOT / "reports" / "reference" / "h100"
CPU = ROOT / "reports" / "reference" / "cpu-2core-r3"


def h100() -> Machine:
    """The H100 of the device tool, from its committed figures (``reports/reference/h100``:
    ``pipeline_table.jsonl``, ``detector_throughput.csv``) and ``../shared/device/README.md``'s
    planning figure for the CPU preprocess (280 frames/s). Where no figure covers a step, the
    lower of the figures that bound it (its slowest stage), so the model errs long."""
    t = _rows(H100 / "pipeline_table.jsonl")
    fps = lambda step: float(t[step]["fps"])  # noqa: E731
    cpu_pre = 280.0  # CPU resize + scale into the pinned buffer, one thread (the planning figure's work)
    gpu_path = min(fps("all_s1"), fps("decode_only_s1") * 0.5)  # GPU preprocess: the Python stages bound it
    ceiling = fps("decode_only_s1")
    # ONNX Runtime on the CPU's 16 cores: the 2-core VM's ort rows (cpu-2core-r3) x 16/2 cores x 0.5
    c = _rows(CPU / "ledger.reference.jsonl")
    ort32, ort8 = float(c["ort_fp32"]["fps"]) * 4, float(c["ort_int8"]["fps"]) * 4
    table = {"decode_ceiling": ceiling, "baseline": fps("baseline"), "queues": fps("queues"),
             "no_osd": fps("no_osd"), "batch8": cpu_pre, "batch32": cpu_pre, "streams4": cpu_pre,
             "channels_last": cpu_pre, "compile": cpu_pre, "gpu_preprocess": gpu_path, "fp16": gpu_path,
             "fp16_cuda_graphs": gpu_path, "tensorrt_fp16": gpu_path, "tensorrt_int8": gpu_path,
             "ort_fp32": min(ort32, cpu_pre), "ort_int8": min(ort8, cpu_pre), "optimized": gpu_path,
             "processes2": gpu_path, "ranks2": gpu_path}
    for k in (2, 3, 5, 10, 20, 30):  # the detector (and the CPU preprocess) on every k-th frame
        table[f"interval{k}"] = min(cpu_pre * k, fps("all_s1_interval3"))
    # per run: 9.6 s (issue 32: ~9 min of start-up over ~56 runs); accuracy: 22.8 s per 6,600 frames on
    # the 2-core VM, over the decode-only ratio of the two machines' CPUs (1531 vs 932 frames/s)
    ratio = ceiling / float(c["decode_ceiling"]["fps"])
    return Machine(
        name="h100", startup_s=9.6, profile_s=8.0, export_s_per_kframe=5.0,
        accuracy_ms_per_frame=22.8 / 6.6 / ratio, call_s=20.0, clip_s=55.0, fps=table,
        tensorrt=False,  # ../shared/device/README.md: "Not there: TensorRT"
        # torch.compile's first build (detector_throughput.csv: 24.8 s) and each later run's cache hit;
        # ONNX export, INT8 calibration (16 scene frames x 4 seeds), TensorRT engine builds
        build_s={"compile": 25.0 + 6.0, "onnx": 6.0, "int8": 40.0, "tensorrt": 90.0},
        basis="reports/reference/h100/pipeline_table.jsonl (python benchmarks/pipeline_table.py --seconds 20 "
              "--repeats 3 --repeats-single 1 --batch-size 32 --streams 4 --all-streams 1,4), "
              "detector_throughput.csv, ../shared/device/README.md (CPU preprocess 280 frames/s), "
              "reports/reference/cpu-2core-r3 (ONNX Runtime, accuracy scoring)")


H200 = ROOT / "reports" / "reference" / "h200"


def h200() -> Machine:
    """The H200 the device tool lends now, from its own recording (``reports/reference/h200``): each
    step's measured seconds (``provenance.json``: ``step_seconds``) where it has one, else the H100
    model's figures for it; frames/s from its ledger. Its two calls took 9.70 and 9.23 minutes for
    959 s of steps: 88 s a call beside the steps, of which the first call's clip (55 s) and the
    decode-only ceiling (11 s), so about 55 s a call to restore the state and write it and the
    reference out, counted inside each call's budget. The recording must fit one session: 12 of its
    15 minutes of device time (the machine's start takes the rest), in calls of at most 8."""
    prov = json.loads((H200 / "provenance.json").read_text())
    base = h100()
    fps = {**base.fps, **{k: float(v["fps"]) for k, v in _rows(H200 / "ledger.jsonl").items() if v.get("fps")}}
    fps["decode_workers2"] = fps["processes2"]  # two streams decoded off the interpreter: at most the two processes
    return Machine(
        name="h200", startup_s=base.startup_s, profile_s=base.profile_s, export_s_per_kframe=base.export_s_per_kframe,
        accuracy_ms_per_frame=base.accuracy_ms_per_frame, call_s=55.0, clip_s=55.0, fps=fps, tensorrt=False,
        build_s=base.build_s, measured_s=prov["step_seconds"], call_limit_s=480.0, record_limit_s=720.0,
        onnxruntime_gpu=False,  # its ledger's ONNX Runtime rows ran on the CPU
        basis="reports/reference/h200/provenance.json (step_seconds, call_minutes) and ledger.jsonl (fps), "
              f"recorded at commit {prov.get('commit', '?')[:7]}; the H100 model (labbook.record_plan.h100) "
              "for what it did not run")


CPU_SMALL = {
    # small mode on the 2-core VM, shared with other work (640x360 clip, 192x320 input), frames/s of each
    # step, all streams and processes: measured with `python scripts/record_reference.py run --mode small
    # --model cpu --machine cpu-rehearsal --steps baseline,queues,fp16` and `... --steps batch4,interval2,
    # interval16,optimized,processes2,ranks2` (the ledgers' fps), 2026-11-25, commit 2306808 + this change;
    # the steps the rehearsal does not run are scaled from batch4 by the full-mode ledger (cpu-2core-r3)
    "decode_ceiling": 1200.0, "baseline": 25.2, "queues": 25.4, "no_osd": 27.0, "batch2": 30.0, "batch4": 33.0,
    "streams2": 33.0, "channels_last": 39.0, "compile": 45.0, "ort_fp32": 51.0, "ort_int8": 105.0,
    "interval2": 62.0, "interval3": 84.0, "interval4": 115.0, "interval8": 210.0, "interval16": 373.0,
    "optimized": 62.7, "processes2": 68.7, "ranks2": 130.0,
}


def cpu() -> Machine:
    """This development and CI machine class (2-core VM, no GPU) in small mode: the rehearsal's model."""
    return Machine(name="cpu", startup_s=4.0, profile_s=6.0, export_s_per_kframe=4.0, accuracy_ms_per_frame=1.5,
                   call_s=8.0, clip_s=7.0, tensorrt=False, fps=CPU_SMALL, build_s={"compile": 20.0, "onnx": 5.0, "int8": 25.0},
                   basis="small mode on the 2-core VM (labbook.record_plan.CPU_SMALL)")


MACHINES = {"h200": h200, "h100": h100, "cpu": cpu}


def builds(flags: Mapping) -> tuple[str, ...]:
    """The one-time preparations a step with ``flags`` needs (cached, travelling with the state)."""
    backend, precision = flags.get("backend", "torch"), flags.get("precision", "fp32")
    out = []
    if flags.get("compile"):
        out.append("compile")
    if backend in ("onnxruntime", "tensorrt"):
        out.append("onnx")
    if precision == "int8":
        out.append("int8")
    if backend == "tensorrt":
        out.append(f"tensorrt-{precision}")
    return tuple(out)


RECORD_PROFILES = ("baseline", "queues", "fp16_cuda_graphs", "optimized")
"""The steps record mode profiles: those whose reports come back from the device (the reference
keeps the baseline's, the queued pipeline's and the fastest step's, ``scripts/save_reference.py``)
and the CUDA graphs the H100 evidence lacks a profile of (``reports/reference/h100/EVIDENCE.md``).
A profile of any other step would stay on the device: its run would cost time and show nothing."""


def profiled(name: str, kind: str, mode: str) -> bool:
    """Whether the step ``name`` (of ``kind``) runs once under nsys in ``mode``: in record mode the
    steps of :data:`RECORD_PROFILES`; else every step but a sweep's values, and of the interval
    sweep the mode's own interval (notebook 06)."""
    if mode == "record":
        return name in RECORD_PROFILES
    if name.startswith("interval"):
        return name == f"interval{settings(mode).interval}"
    return kind != "sweep"


def runnable(m: Machine, flags: Mapping) -> bool:
    """Whether ``m`` runs a step with ``flags`` (else it is a skipped row)."""
    if flags.get("backend") == "tensorrt" and not m.tensorrt:
        return False
    gpu = flags.get("device") == "cuda" or flags.get("gpu_preprocess") or flags.get("cuda_graphs") \
        or flags.get("precision") == "fp16"
    return not (gpu and m.name == "cpu")


def step_seconds(m: Machine, name: str, flags: Mapping, *, mode: str, profiled: bool, runs: int,
                 built: set | None = None, parallel: int = 1) -> float:
    """Modelled seconds of one step (see the module doc); ``built``: preparations already made
    (updated here), ``parallel``: processes side by side (their frames run at the same time)."""
    if not runnable(m, flags):
        return m.skip_s
    if name in m.measured_s:  # what it took there, its preparations included
        for b in builds(flags):
            if built is not None:
                built.add(b)
        return float(m.measured_s[name])
    per_stream = frames_for(flags, mode)
    frames = per_stream * int(flags.get("streams", 1)) * parallel  # fps: of all streams and processes
    fps = m.fps.get(name) or min(m.fps.values())
    total = (m.startup_s + frames / fps) * runs + m.accuracy_ms_per_frame / 1000 * per_stream * parallel
    if profiled:
        total += m.profile_s + m.export_s_per_kframe * frames / 1000
    for b in builds(flags):
        if built is None or b not in built:
            total += m.build_s.get(b, m.build_s.get(b.split("-")[0], 0.0))
            if built is not None:
                built.add(b)
    return total


@dataclass(frozen=True)
class PlannedStep:
    name: str
    flags: Mapping
    profiled: bool
    runs: int
    launch: Mapping = field(default_factory=dict)


def planned_steps(mode: str, names: list[str] | None = None, gpu: bool = True) -> list[PlannedStep]:
    """Every step the driver records, in order, with the flags the model assumes: the decode-only
    ceiling (measured before the first step), the catalogue's own, and for 06's and 08's steps
    (resolved only when their turn comes) the flags they take when the levers pay (the interval
    on ``batch<N>``; ``optimized``, and 08's steps on it). ``names``: only these (the driver's ``--steps``)."""
    from labbook.steps import SCALE_OUT, catalogue, scale_out

    s, cat = settings(mode), catalogue(mode, gpu=gpu)
    out = [PlannedStep("decode_ceiling", {"decode_only": True, "queues": True}, False, s.repeats)]
    for n, st in cat.items():
        prof = profiled(n, st.kind, mode)
        out.append(PlannedStep(n, dict(st.flags), prof, s.repeats + prof))
    base = dict(cat[f"batch{s.batch}"].flags)
    for k in sorted({*s.intervals, s.interval}):
        prof = profiled(f"interval{k}", "sweep", mode)
        out.append(PlannedStep(f"interval{k}", {**base, "interval": k}, prof, s.repeats + prof))
    best = {**dict(cat["fp16_cuda_graphs"].flags if gpu else base), "interval": s.interval}
    prof = profiled("optimized", "cumulative", mode)
    out.append(PlannedStep("optimized", best, prof, s.repeats + prof))
    for n, st in scale_out("optimized", best, SCALE_OUT).items():
        par = st.launch.get("processes") or 1
        out.append(PlannedStep(n, dict(st.flags), False, 1 if par > 1 else s.repeats, dict(st.launch)))
    if names is not None:
        keep = set(names)
        out = [p for p in out if p.name in keep or p.name == "decode_ceiling"]
    return out


def cuts(m: Machine, mode: str) -> dict[str, str]:
    """The steps a recording on ``m`` leaves out because they would teach nothing there, each with
    the reason the plan prints (none on the CPU model: its rehearsal runs what it is asked).

    On a GPU box: ONNX Runtime's steps where only its CPU build is installed (0.15x rows beside the
    GPU's); ``ranks<N>`` on one GPU, where its ranks run what ``processes<N>``'s processes run; the
    interval sweep past three values (the smallest, the lab's interval and the largest: the two
    ends of the accuracy curve and the knee notebook 06 builds on); ``compile`` and the streams
    sweep where they ran below :data:`PAYS` times ``batch<N>`` there (H200: 1.02x and 0.98x)."""
    from labbook.steps import SCALE_OUT

    if m.name == "cpu":
        return {}
    s = settings(mode, gpu=True)
    out = {}
    if not m.onnxruntime_gpu:
        for n in ("ort_fp32", "ort_int8"):
            out[n] = ("ONNX Runtime would run on this machine's CPU (no onnxruntime-gpu in its environment): "
                      "a row far below the GPU's that shows nothing about the GPU")
    if m.gpus == 1:
        out[f"ranks{SCALE_OUT}"] = (f"on one GPU its ranks run what processes{SCALE_OUT}'s processes run "
                                    f"(both {m.fps.get(f'processes{SCALE_OUT}', 0):,.0f} frames/s in the reference)")
    sweep = sorted({*s.intervals, s.interval})
    keep = {sweep[0], s.interval, sweep[-1]}
    for k in sweep:
        if k not in keep:
            out[f"interval{k}"] = (f"the interval sweep keeps three values ({', '.join(map(str, sorted(keep)))}: "
                                   "its two ends and the lab's interval); more show the same curve")
    base = m.fps.get(f"batch{s.batch}")
    why = {"compile": "for a minute of compilation: nothing a host-bound run can show",
           **{f"streams{n}": "more decoder threads in the one interpreter add nothing (decode_workers2 takes "
                             "decoding out of it)" for n in s.streams}}
    for name, reason in why.items():
        fps = m.fps.get(name)
        if fps and base and fps / base < PAYS:
            out[name] = f"{fps / base:.2f}x over batch{s.batch} in the reference, {reason}"
    return out


PAYS = 1.05
"""A lever whose step ran below this times its base in a machine's reference is cut from its
recording (:func:`cuts`): within the run-to-run spread, it would show nothing again."""


def estimates(m: Machine, mode: str, steps: list[PlannedStep], built: set | None = None) -> dict[str, float]:
    """Modelled seconds of each step in order (a preparation counted at the first step that needs it)."""
    built = set() if built is None else built
    return {p.name: round(step_seconds(m, p.name, p.flags, mode=mode, profiled=p.profiled, runs=p.runs, built=built,
                                       parallel=int(p.launch.get("processes", 1))), 1) for p in steps}


def pack(est: Mapping[str, float], *, call_s: float, first_s: float, limit_s: float) -> list[dict]:
    """Steps in order into calls: a call takes steps while its fixed cost (``call_s``, plus
    ``first_s`` for the first call: the clip) and its steps fit ``limit_s``."""
    calls: list[dict] = []
    cur: list[str] = []
    used = call_s + first_s
    for name, sec in est.items():
        if cur and used + sec > limit_s:
            calls.append({"steps": cur, "seconds": used})
            cur, used = [], call_s
        cur.append(name)
        used += sec
    if cur:
        calls.append({"steps": cur, "seconds": used})
    return calls


def machine(name: str) -> Machine:
    if name not in MACHINES:
        raise ValueError(f"no timing model for machine {name!r}: choose one of {', '.join(MACHINES)}")
    return MACHINES[name]()


def plan(machine_name: str = "h200", mode: str = "record", names: list[str] | None = None) -> dict:
    """The recording plan for a machine in ``mode``: ``calls`` (each ``steps`` and modelled
    ``minutes``, the write-out included), ``total_minutes``, the limits, whether it fits (every call
    within a call's limit, and the whole within the recording's where the machine has one), ``cut``
    (the steps left out, :func:`cuts`, each with its reason; none when ``names`` are given),
    ``sessions`` (the calls, by number, packed in order into one session's device time each: the
    state carries over from one session to the next), each step's frames and seconds, and the model
    with its basis."""
    m = machine(machine_name)
    cut = {} if names is not None else cuts(m, mode)  # steps asked for by name are run
    steps = [p for p in planned_steps(mode, names, gpu=m.name != "cpu") if p.name not in cut]
    est = estimates(m, mode, steps)
    calls = pack(est, call_s=m.call_s, first_s=m.clip_s, limit_s=m.call_limit_s)
    total = sum(c["seconds"] for c in calls)
    sessions: list[list[int]] = []  # the calls, packed in order into sessions' device time
    used = math.inf
    for i, c in enumerate(calls, 1):
        if used + c["seconds"] > m.total_limit_s:
            sessions.append([])
            used = 0.0
        sessions[-1].append(i)
        used += c["seconds"]
    model = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in vars(m).items()}
    return {
        "machine": m.name, "mode": mode,
        "calls": [{"steps": c["steps"], "minutes": round(c["seconds"] / 60, 2)} for c in calls],
        "total_minutes": round(total / 60, 2),
        "limits": {"call_minutes": m.call_limit_s / 60, "session_minutes": m.total_limit_s / 60,
                   "record_minutes": None if m.record_limit_s is None else m.record_limit_s / 60},
        "sessions": sessions,
        "fits": all(c["seconds"] <= m.call_limit_s for c in calls)
        and (m.record_limit_s is None or total <= m.record_limit_s),
        "cut": cut,
        "steps": {p.name: {"seconds": est[p.name], "frames": frames_for(p.flags, mode),
                           "streams": int(p.flags.get("streams", 1)), "runs": p.runs, "profiled": p.profiled,
                           **({} if runnable(m, p.flags) else {"skipped": True})} for p in steps},
        "clip_seconds": clip_seconds(mode),
        "model": model,
    }
