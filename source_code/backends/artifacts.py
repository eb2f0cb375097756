"""Model artifacts and their cache: the folder, the cache key, ONNX (FP32, FP16), INT8 QDQ, engine file names.

Converted models are cached under ``cache_dir`` (``--cache-dir``; default
``~/.cache/labkit/backends``, which the lab passes explicitly), keyed by a hash of the model's weights and every setting that
changes the artifact. Each one-time step runs in its own NVTX range (``onnx_export``,
``int8_calibration``) so a profile that includes it shows what it was.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Sequence

import torch

from source_code.backends.base import BackendUnavailable, default_input_hw
from source_code.backends.calibration import CalibrationSettings, quantize_qdq
from source_code.backends.onnx_export import export_onnx


def default_cache_dir() -> Path:
    """Where converted models and the FLOPs count are cached without ``--cache-dir``:
    ``~/.cache/labkit/backends``. No environment variable: the lab passes its folder as a flag."""
    return Path.home() / ".cache" / "labkit" / "backends"


def model_hash(model: torch.nn.Module, *, input_hw: Sequence[int] | None = None) -> str:
    """A short hash of the model's class, weights and input size, used as the cache key."""
    h = hashlib.sha256()
    h.update(type(model).__qualname__.encode())
    h.update(repr(tuple(input_hw or ())).encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        t = tensor.detach().cpu().contiguous()
        h.update(str(t.dtype).encode() + repr(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _seal_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{path.stat().st_size}:{h.hexdigest()}"


def seal(path: Path) -> None:
    """Record the size and SHA-256 of a cache artifact just written (a hidden ``.<name>.sha256``)."""
    atomic_write_bytes(_seal_path(path), _digest(path).encode())


def verified(path: Path) -> bool:
    """Whether a cached artifact is the one this program wrote: its seal exists and its size and
    SHA-256 match. A file swapped or truncated by someone else, or never sealed, is not reused."""
    try:
        return path.is_file() and _seal_path(path).read_text().strip() == _digest(path)
    except OSError:
        return False


def ensure_onnx(model: torch.nn.Module, *, cache_dir: str | os.PathLike | None = None,
                input_hw: Sequence[int] | None = None, opset: int = 17, fp16: bool = False) -> Path:
    """The model exported to ONNX (dynamic batch), cached as ``<cache>/<model_hash>-opset<N>[-fp16].onnx``.

    ``fp16``: the float16 graph with float32 input and outputs (``onnx_export.Fp16WithFp32IO``),
    the source of strongly typed FP16 TensorRT engines.
    """
    hw = tuple(int(v) for v in input_hw) if input_hw is not None else default_input_hw()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    mhash = model_hash(model, input_hw=hw)
    path = cache / f"{mhash}-opset{opset}{'-fp16' if fp16 else ''}.onnx"
    if not verified(path):  # absent, or not the file this program wrote: export it again
        from labkit import annotate

        tmp = cache / f".{path.stem}.{os.getpid()}.onnx"
        with annotate.range("onnx_export"):
            export_onnx(model, tmp, input_hw=hw, opset=opset, metadata={"labkit.model_hash": mhash}, fp16=fp16)
        os.replace(tmp, path)
        seal(path)
    return path


def ensure_int8_onnx(onnx_path: Path, *, calibration: CalibrationSettings, input_hw: Sequence[int],
                     cache_dir: Path, workdir: str | os.PathLike | None = None) -> Path:
    """The QDQ INT8 model of ``onnx_path``, cached next to it keyed by calibration settings.

    The recipe (``calibration.quantize_qdq``) depends on ``calibration.target``: every Conv
    as ONNX Runtime's ``QLinearConv`` on CPU, or TensorRT's symmetric explicit quantization.
    """
    if calibration.method not in ("minmax", "entropy", "percentile"):
        raise BackendUnavailable(f"unknown calibration method {calibration.method!r}: choose one of minmax, entropy, percentile")
    out = cache_dir / f"{onnx_path.stem}-int8-{calibration.key()}.onnx"
    if verified(out):
        return out
    from labkit import annotate

    tmp = cache_dir / f".{out.stem}.{os.getpid()}.onnx"
    with contextlib.ExitStack() as stack:
        stack.enter_context(annotate.range("int8_calibration"))
        stack.callback(tmp.unlink, missing_ok=True)
        quantize_qdq(onnx_path, tmp, calibration=calibration, input_hw=input_hw, workdir=workdir)
        os.replace(tmp, out)
        seal(out)
    return out


# Changes whenever build_engine builds differently, so cached engines are rebuilt.
ENGINE_RECIPE = "typed"  # strongly typed from the FP32 / FP16 / QDQ ONNX models


def engine_path(cache_dir: Path, *, mhash: str, precision: str, batch_size: int, gpu: str, trt_version: str,
                calibration: CalibrationSettings | None = None, tf32: bool | None = None) -> Path:
    """Cache file of one engine: keyed by model, precision, batch profile, GPU, TensorRT version and TF32."""
    calib = f"-cal{calibration.key()}" if precision == "int8" and calibration is not None else ""
    no_tf32 = "-notf32" if tf32 is False else ""
    return cache_dir / (f"{mhash}-{precision}{calib}-b1_{batch_size}_{batch_size}-{gpu}-trt{trt_version}"
                        f"{no_tf32}-{ENGINE_RECIPE}.engine")

