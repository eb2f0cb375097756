"""The lab's steps as data: each step's flags, the step it builds on, and its kind.

Kinds (``labkit.bench.ledger.KINDS``): ``cumulative`` (the main path: keeps every change before it),
``alternative`` (built on a step, not built on by the main path), ``sweep`` (one value of a swept
option) and ``exercise`` (a participant's own run: never in the lab's table). A step name that is
not in :func:`catalogue` is an exercise unless its caller says otherwise.

Notebook 08's steps scale the lab's best single-process step out (:func:`scale_out`): the same
run as several processes side by side, or as ranks under torchrun; which step they build on is
known only once the lab has run, so they are made from it, as the interval steps of notebook 06 are.

This catalogue is the lab's cumulative path; ``benchmarks/pipeline_table.py``'s
``single_changes`` is a different catalogue (each change alone on the baseline) with a home of its own.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from labkit.bench.ledger import KINDS

from labbook.settings import MODE, gpu_available, settings


@dataclass(frozen=True)
class Step:
    """One lab step: ``detect_video.py`` flags (snake case), what it builds on, its kind."""

    name: str
    flags: Mapping = field(default_factory=dict)
    builds_on: str | None = None
    kind: str = "cumulative"
    launch: Mapping = field(default_factory=dict)  # how it starts: {} one process, {"processes": N}, or
    #                                                 {"launcher": "torchrun", "nproc": N} (labkit.bench)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"step {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        object.__setattr__(self, "flags", MappingProxyType(dict(self.flags)))  # read-only: flags() copies
        object.__setattr__(self, "launch", MappingProxyType(dict(self.launch)))

    def labels(self) -> dict:
        """The ledger fields that say what this step is (and, for a step started as several
        processes or ranks, the prediction it runs under: see :func:`scale_out_prediction`)."""
        out = {"kind": self.kind, "builds_on": self.builds_on}
        n = self.launch.get("processes") or self.launch.get("nproc")
        return {**out, **scale_out_prediction(int(n))} if n else out


def scale_out_prediction(n: int) -> dict:
    """The estimate of running the same work as ``n`` processes or ranks: ``n`` times the one process
    (perfect scaling). An estimate, not a bound: wherever they share cores, a GPU or memory
    bandwidth they get less, which no single-process profile can tell, so advise has no rule for it."""
    cores = os.cpu_count() or 1
    return {"predicted_speedup": float(n), "basis": "estimate", "assumptions": "perfect scaling: nothing shared",
            "finding": f"{n} copies of the work: {n}x the one process if they scaled perfectly; "
                       f"they share this machine's {cores} cores, so less where the one process already used them"}


def ort_device(gpu: bool) -> str:
    """Where the ONNX Runtime steps run: ``cuda`` on a GPU machine whose onnxruntime has the CUDA
    provider (onnxruntime-gpu), else ``cpu`` (the CPU build, or no GPU): the row's ``device`` says which."""
    if not gpu:
        return "cpu"
    try:
        import onnxruntime
    except ImportError:
        return "cpu"
    return "cuda" if "CUDAExecutionProvider" in onnxruntime.get_available_providers() else "cpu"


def catalogue(mode: str = MODE, gpu: bool | None = None) -> dict[str, Step]:
    """Every step of the lab in order: name -> :class:`Step`.

    The main path keeps each change: queues, no OSD, batching. channels_last, compile, ONNX
    Runtime and GPU preprocessing are alternatives built on the batched pipeline; the GPU steps
    (fp16, CUDA graphs, TensorRT) build on ``gpu_preprocess``; the INT8 steps on their FP32/FP16
    counterparts. The interval steps (notebook 06) build on whichever step was fastest, so
    notebook 06 names what they build on when it runs them.
    """
    s = settings(mode, gpu)
    batch = f"batch{s.batch}"
    batched = {"queues": True, "osd": False, "batch_size": s.batch}
    on_gpu = {**batched, "device": "cuda", "gpu_preprocess": True}  # the GPU steps build on this
    ort = {**batched, "device": ort_device(gpu_available() if gpu is None else gpu), "backend": "onnxruntime"}
    trt = {**on_gpu, "backend": "tensorrt", "precision": "fp16"}
    steps = [
        Step("baseline", {}, None),
        Step("queues", {"queues": True}, "baseline"),
        Step("no_osd", {"queues": True, "osd": False}, "queues"),
        *(Step(f"batch{b}", {**batched, "batch_size": b}, "no_osd", "sweep") for b in s.batch_sizes),
        Step(batch, batched, "no_osd"),
        *(Step(f"streams{n}", {**batched, "streams": n}, batch, "sweep") for n in s.streams),
        Step("channels_last", {**batched, "channels_last": True}, batch, "alternative"),
        Step("compile", {**batched, "compile": True}, batch, "alternative"),
        Step("gpu_preprocess", on_gpu, batch, "alternative"),
        Step("fp16", {**on_gpu, "precision": "fp16"}, "gpu_preprocess", "alternative"),
        Step("fp16_cuda_graphs", {**on_gpu, "precision": "fp16", "cuda_graphs": True}, "fp16", "alternative"),
        Step("tensorrt_fp16", trt, "gpu_preprocess", "alternative"),
        # two streams decoded in two processes (--decode-workers): the interpreter left to launch and track
        *([Step("decode_workers2", {**on_gpu, "streams": 2, "decode_workers": 2}, "gpu_preprocess", "alternative")]
          if (gpu_available() if gpu is None else gpu) else []),
        Step("ort_fp32", ort, batch, "alternative"),
        Step("ort_int8", {**ort, "precision": "int8"}, "ort_fp32", "alternative"),
        Step("tensorrt_int8", {**trt, "precision": "int8"}, "tensorrt_fp16", "alternative"),
    ]
    return {st.name: st for st in steps}


def flags(step: str, mode: str = MODE) -> dict:
    """The flags of one step (a copy: change it freely)."""
    return dict(catalogue(mode)[step].flags)


def builds_on_map(mode: str = MODE) -> dict[str, str]:
    """step -> the step it builds on, for every catalogue step that builds on one."""
    return {name: st.builds_on for name, st in catalogue(mode).items() if st.builds_on}


def step_of(name: str, *, kind: str | None = None, builds_on: str | None = None, mode: str = MODE,
            default_kind: str = "exercise") -> Step:
    """The catalogue's step ``name``, with ``kind``/``builds_on`` overriding it when given; a
    name the catalogue lacks is a step of ``default_kind`` (flags come from the caller)."""
    known = catalogue(mode).get(name)
    return Step(name, known.flags if known else {}, builds_on or (known.builds_on if known else None),
                kind or (known.kind if known else default_kind))


SCALE_OUT = 2
"""Processes, and ranks, of notebook 08's steps (two: this lab's CPU machine has two cores)."""


def scale_out_candidates(mode: str = MODE) -> list[str]:
    """The steps notebook 08 may build on (the fastest of them within the accuracy floor):
    ``optimized``, ``batch<N>`` and the single-process alternatives, INT8 left out."""
    return ["optimized", f"batch{settings(mode).batch}", "channels_last", "compile", "ort_fp32", "gpu_preprocess",
            "fp16", "fp16_cuda_graphs", "tensorrt_fp16"]


def scale_out(start: str, options: Mapping, n: int = SCALE_OUT) -> dict[str, Step]:
    """Notebook 08's steps on top of ``start``, the lab's best single-process step run with
    ``options`` (its recorded options, every one): ``processes<n>``, n copies of it side by side
    (``labkit.bench.run_parallel``; no output video, which the copies would share), and
    ``ranks<n>``, n ranks under torchrun each running ``start``'s streams (``--streams`` times n,
    shared out by the application). Each process or rank gets ``--threads`` cores / n (unless
    ``options`` set it). Both are alternatives built on ``start``."""
    # each process gets its share of the cores, as the one process had them all (torchrun would
    # otherwise give every rank 1 thread, and side-by-side processes each take every core)
    opts = {"threads": max(1, (os.cpu_count() or 1) // n), **dict(options)}
    per_process = {k: v for k, v in opts.items() if k != "output"}
    ranked = {**opts, "streams": int(opts.get("streams") or 1) * n}
    return {
        f"processes{n}": Step(f"processes{n}", per_process, start, "alternative", {"processes": n}),
        f"ranks{n}": Step(f"ranks{n}", ranked, start, "alternative", {"launcher": "torchrun", "nproc": n}),
    }


def recorded_options(step: str) -> dict:
    """The options ``step`` last ran with on this machine (its latest ok ledger row's ``config``),
    to build on it exactly."""
    from labkit.bench.ledger import Ledger

    from labbook.settings import LEDGER

    rows = [r for r in Ledger(LEDGER).rows() if r.get("step") == step and r.get("status", "ok") == "ok"]
    if not rows:
        raise ValueError(f"step {step!r} has no ok row in {LEDGER} yet: run it first")
    return dict(rows[-1]["config"])
