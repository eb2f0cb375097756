"""The registry: ``make_backend`` picks and builds a backend; ``available_backends`` says what runs here.

Everything that can fail (missing package, no GPU, unsupported precision) fails inside
``make_backend`` with ``BackendUnavailable`` whose message names the fix, before any video
work starts. Heavy imports (onnxruntime, tensorrt) happen only when that backend is asked for.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Sequence

import torch

from source_code.backends.artifacts import default_cache_dir
from source_code.backends.base import (Backend, BackendUnavailable, default_input_hw, parse_device, set_tf32,
                                       warm_sizes)
from source_code.backends.calibration import CalibrationSettings
from source_code.backends.cuda_graphs import CudaGraphBackend
from source_code.backends.ort import make_ort_backend
from source_code.backends.tensorrt_build import import_tensorrt
from source_code.backends.tensorrt_run import make_trt_backend
from source_code.backends.torch_eager import TorchBackend
from source_code.options import refused

BACKENDS = ("torch", "onnxruntime", "tensorrt")
PRECISIONS = ("fp32", "fp16", "int8")
TF32_NOTE = ("fp32 on an Ampere or Hopper GPU: PyTorch's defaults run the convolutions as TF32 "
             "(make_backend(tf32=False), detect_video --tf32 off: true FP32)")
_ALIASES = {"ort": "onnxruntime", "onnx": "onnxruntime", "trt": "tensorrt", "pytorch": "torch"}


def make_backend(
    model: torch.nn.Module,
    *,
    backend: str = "torch",
    precision: str = "fp32",
    device: str | torch.device = "cpu",
    batch_size: int = 1,
    channels_last: bool = False,
    cuda_graphs: bool = False,
    compile: bool = False,
    cache_dir: str | os.PathLike | None = None,
    input_hw: Sequence[int] | None = None,
    calibration: CalibrationSettings | None = None,
    batch_sizes: Sequence[int] | None = None,
    stream=None,
    tf32: bool | None = None,
) -> Backend:
    """Build an inference backend for ``model``; raise ``BackendUnavailable`` early if it cannot run.

    Args:
        model: the detector (``forward(x) -> (heatmap_logits, wh, offset)``), any device.
        backend: ``torch`` | ``onnxruntime`` | ``tensorrt`` (aliases ``ort``, ``trt``).
        precision: ``fp32`` | ``fp16`` | ``int8`` (see the module table for what each backend takes).
        device: ``cpu`` or ``cuda[:N]``; inputs must already be there.
        batch_size: the largest batch the backend will be called with.
        channels_last, cuda_graphs, compile: PyTorch variants (``backend="torch"`` only).
        cache_dir: where ONNX models and TensorRT engines are cached (default ``default_cache_dir()``).
        input_hw: network input ``(H, W)``; default ``source_code.detector.INPUT_HW``.
        calibration: INT8 calibration settings; default ``CalibrationSettings()``.
        batch_sizes: the batch sizes the run will call with (default ``(batch_size,)``): CUDA
            graphs are captured, ``torch.compile`` compiles and ONNX Runtime on CUDA warms up for
            each ahead (``expected_batch_sizes`` computes them for ``--interval``); nothing is padded.
        stream: on CUDA, the ``torch.cuda.Stream`` (of that device) the backend runs on; default
            a new non-default stream. The backend records ``backend.event`` after each call.
        tf32: True / False allow or forbid TF32 for FP32 convolutions and matmuls (torch's flags,
            process-wide; ONNX Runtime's ``use_tf32``; TensorRT's ``BuilderFlag.TF32``); None keeps
            the defaults, under which PyTorch runs FP32 convolutions as TF32 on Ampere/Hopper.
    """
    kind = _ALIASES.get(str(backend).lower(), str(backend).lower())
    if kind not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    precision = str(precision).lower()
    if precision not in PRECISIONS:
        raise BackendUnavailable(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if int(batch_size) < 1:
        raise BackendUnavailable(f"batch_size must be at least 1, got {batch_size}")
    batch_size = int(batch_size)
    warm_sizes(batch_size, batch_sizes)  # raises on a size outside 1..batch_size, for every backend
    if kind != "torch" and (channels_last or cuda_graphs or compile):
        flags = [n for n, v in (("--channels-last", channels_last), ("--cuda-graphs", cuda_graphs), ("--compile", compile)) if v]
        raise BackendUnavailable(f"{' and '.join(flags)} {'apply' if len(flags) > 1 else 'applies'} to --backend torch only; "
                                 f"drop {'them' if len(flags) > 1 else 'it'} for --backend {kind}")
    if refused({"compile": compile, "cuda_graphs": cuda_graphs}):  # source_code.options.REFUSED_TOGETHER
        raise BackendUnavailable(
            "--cuda-graphs and --compile together are not offered: pick one "
            "(torch.compile(mode='reduce-overhead') would capture its own graphs)"
        )
    if kind == "tensorrt":
        import_tensorrt()  # a missing TensorRT is the first thing to say, whatever the device
    dev = parse_device(device)
    hw = tuple(int(v) for v in input_hw) if input_hw is not None else default_input_hw()

    if kind == "torch":
        if precision == "int8":
            raise BackendUnavailable("int8 is not offered for --backend torch: use --backend onnxruntime or tensorrt with --precision int8")
        if precision == "fp16" and dev.type != "cuda":
            raise BackendUnavailable("fp16 needs a CUDA GPU (--device cuda); on CPU use --precision fp32")
        if cuda_graphs and dev.type != "cuda":
            raise BackendUnavailable("CUDA graphs need --device cuda; on CPU drop --cuda-graphs")
        if compile:
            _check_compile_available(dev)
        set_tf32(tf32)
        kw = dict(device=dev, precision=precision, batch_size=batch_size, channels_last=channels_last, input_hw=hw,
                  batch_sizes=batch_sizes, stream=stream)
        if cuda_graphs:
            return CudaGraphBackend(model, **kw)
        return TorchBackend(model, compile=compile, **kw)

    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    calib = calibration or CalibrationSettings()
    if kind == "onnxruntime":
        return make_ort_backend(model, precision=precision, device=dev, batch_size=batch_size,
                                cache_dir=cache, input_hw=hw, calibration=calib, stream=stream, tf32=tf32,
                                batch_sizes=batch_sizes)
    return make_trt_backend(model, precision=precision, device=dev, batch_size=batch_size,
                            cache_dir=cache, input_hw=hw, calibration=calib, stream=stream, tf32=tf32)


def compile_unavailable(device_type: str) -> str:
    """Why ``torch.compile`` cannot run on ``device_type`` here ('' when it can): Inductor builds C++
    on the CPU and, on CUDA, Triton's kernel launchers with the C compiler (``$CC``, else gcc, cc, clang)."""
    if not hasattr(torch, "compile"):
        return f"torch.compile needs torch >= 2.0 (found {torch.__version__}): upgrade torch or drop --compile"
    if device_type == "cpu":
        if not any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "c++", "clang++")):
            return "torch.compile on CPU needs a C++ compiler (g++): apt-get install g++, or drop --compile"
        return ""
    if not any(shutil.which(c) for c in (os.environ.get("CC", "gcc"), "cc", "clang")):
        return ("torch.compile on CUDA needs a C compiler for Triton (gcc): apt-get install gcc, "
                "or drop --compile")
    return ""


def _check_compile_available(dev: torch.device) -> None:
    why = compile_unavailable(dev.type)
    if why:
        raise BackendUnavailable(why)


def available_backends() -> list[dict]:
    """Which backend/precision/device combinations this machine can run, and why not.

    Returns:
        one dict per combination: ``backend``, ``precision``, ``device``, ``variant`` ("" or
        ``channels_last`` / ``cuda_graphs`` / ``compile``), ``available`` (bool), ``reason``
        (empty when available, else the problem and the fix).
    """
    import importlib.util

    cuda = torch.cuda.is_available()
    no_gpu = f"no CUDA GPU visible to torch {torch.__version__}: run on a GPU machine with a CUDA build of torch"
    rows: list[dict] = []

    def add(backend, precision, device, variant="", reason=""):
        rows.append({"backend": backend, "precision": precision, "device": device, "variant": variant,
                     "available": not reason, "reason": reason})

    compiler = compile_unavailable("cpu")
    add("torch", "fp32", "cpu")
    add("torch", "fp32", "cpu", "channels_last")
    add("torch", "fp32", "cpu", "compile", compiler)
    add("torch", "fp16", "cpu", reason="fp16 needs a CUDA GPU: use --device cuda")
    for precision in ("fp32", "fp16"):
        for variant in ("", "channels_last", "cuda_graphs", "compile"):
            why = no_gpu if not cuda else (compile_unavailable("cuda") if variant == "compile" else "")
            add("torch", precision, "cuda", variant, why)

    if importlib.util.find_spec("onnxruntime") is None:
        why = "onnxruntime is not installed: pip install onnxruntime (onnxruntime-gpu on GPU machines)"
        for precision in ("fp32", "int8"):
            add("onnxruntime", precision, "cpu", reason=why)
            add("onnxruntime", precision, "cuda", reason=why)
    else:
        import onnxruntime as ort

        have = ort.get_available_providers()
        gpu_why = "" if cuda and "CUDAExecutionProvider" in have else (
            no_gpu if not cuda else f"onnxruntime {ort.__version__} has no CUDA provider: pip install onnxruntime-gpu")
        for precision in ("fp32", "int8"):
            add("onnxruntime", precision, "cpu")
            add("onnxruntime", precision, "cuda", reason=gpu_why)
    try:
        trt = import_tensorrt()
        del trt
        trt_why = "" if cuda else no_gpu
    except BackendUnavailable as exc:
        trt_why = str(exc)
    for precision in ("fp32", "fp16", "int8"):  # strongly typed builds: the same three on TensorRT 10 and 11
        add("tensorrt", precision, "cuda", reason=trt_why)
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m source_code.backends [--json]``: print what this machine can run."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m source_code.backends", description=main.__doc__)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = available_backends()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        what = f"{r['backend']} {r['precision']} {r['device']}" + (f" {r['variant']}" if r["variant"] else "")
        print(f"{'yes' if r['available'] else 'no ':<4} {what:<38} {r['reason']}")
    print(TF32_NOTE)
    sys.stdout.flush()
    return 0

