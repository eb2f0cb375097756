"""TensorRT engines: import TensorRT with a clear message, and build a strongly typed engine from ONNX.

One recipe on TensorRT 10 and 11. Every engine is built from a network created
``STRONGLY_TYPED`` (TensorRT 11 is always strongly typed and ignores the flag; 10 honours
it), so each layer runs in the type the ONNX model gives it, and no ``BuilderFlag.FP16`` /
``INT8`` is set (11 has none; 10 rejects them on a strongly typed network):

- fp32: the FP32 ONNX model (TF32 allowed unless ``tf32=False``: ``BuilderFlag.TF32``).
- fp16: the FP16 ONNX export with float32 input/output casts (``ensure_onnx(fp16=True)``).
- int8: the QDQ model (explicit quantization) with its float parts in FP16 (``qdq_fp16``): the
  layers left unquantized (the three heads) run in FP16, as under ONNX Runtime's TensorRT
  provider, so INT8 is compared with FP16 fairly.

Strong typing is complete from TensorRT 10.12 (``MIN_TENSORRT``); older versions are refused early.

Written against the TensorRT Python API; pages read:
  https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/Builder.html
    (Builder: create_network, create_builder_config, create_optimization_profile,
     build_serialized_network; NetworkDefinitionCreationFlag.STRONGLY_TYPED)
  https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/parsers/Onnx/pyOnnx.html
    (OnnxParser(network, logger), parse_from_file, num_errors, get_error)
  https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/c-api/classnvinfer1_1_1_i_builder_config-members.html
    (IBuilderConfig: set_memory_pool_limit, add_optimization_profile, clear_flag)
  https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/work-with-strongly-typed-networks.html
  https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html
    (TensorRT 11 removes BuilderFlag.FP16/INT8: strong typing only)
Every TensorRT name used here and in ``tensorrt_run.py`` is checked against the 11.4
bindings by ``tests/test_tensorrt_names.py``.

Engine builds take from seconds to minutes; they happen inside make_backend, before the
pipeline's first frame, inside an NVTX range ``engine_build``, and are cached on disk.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from source_code.backends.artifacts import atomic_write_bytes
from source_code.backends.base import BackendUnavailable

TRT_MAX_WORKSPACE = 4 << 30
MIN_TENSORRT = (10, 12)
"""The first TensorRT whose strongly typed networks cover this recipe (10.0-10.11 are partial)."""


def check_tensorrt_version(version: str) -> None:
    """Raise BackendUnavailable unless ``version`` is at least ``MIN_TENSORRT``."""
    parts = [int(p) for p in str(version).split("+")[0].split(".")[:2] if p.isdigit()]
    if tuple(parts + [0] * (2 - len(parts))) < MIN_TENSORRT:
        need = ".".join(map(str, MIN_TENSORRT))
        raise BackendUnavailable(f"TensorRT {version} is too old: this backend builds strongly typed engines, complete "
                                 f"from TensorRT {need}; pip install 'tensorrt>={need}'")


def import_tensorrt():
    """The ``tensorrt`` module (10.12 or newer), or BackendUnavailable naming the fix."""
    try:
        import tensorrt as trt
    except Exception as exc:  # ImportError, or a broken install failing to load libnvinfer
        raise BackendUnavailable(
            f"TensorRT is not installed ({type(exc).__name__}: {exc}): pip install tensorrt "
            "(GPU machines only), or use --backend torch / --backend onnxruntime"
        ) from exc
    check_tensorrt_version(trt.__version__)
    return trt


def gpu_tag(device: torch.device) -> str:
    """The GPU's name as a file-name part (engines are specific to the GPU that built them)."""
    name = torch.cuda.get_device_name(device)
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def build_engine(onnx_path: Path, out_path: Path, *, precision: str, batch_size: int, input_hw: Sequence[int],
                 tf32: bool | None = None) -> Path:
    """Build and serialize a strongly typed TensorRT engine from ``onnx_path`` (see the module notes).

    Batch profile: min 1, opt and max ``batch_size`` (the pipeline's full batches; a shorter
    batch still runs). ``precision`` only names the engine in messages: the ONNX model's types decide.
    """
    trt = import_tensorrt()
    from labkit import annotate

    logger = trt.Logger(trt.Logger.WARNING)
    with annotate.range("engine_build"):
        builder = trt.Builder(logger)
        network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = "\n".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendUnavailable(f"TensorRT could not parse {onnx_path}:\n{errors}\n"
                                     "  delete the cached .onnx to re-export it, or use --backend onnxruntime")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, TRT_MAX_WORKSPACE)
        if tf32 is False:
            config.clear_flag(trt.BuilderFlag.TF32)  # on by default, as for PyTorch's convolutions
        h, w = (int(v) for v in input_hw)
        profile = builder.create_optimization_profile()
        name = network.get_input(0).name
        profile.set_shape(name, (1, 3, h, w), (batch_size, 3, h, w), (batch_size, 3, h, w))
        config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise BackendUnavailable(f"TensorRT failed to build a {precision} engine from {onnx_path} "
                                     "(see the TensorRT log above); use --backend onnxruntime or torch")
        out_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out_path, bytes(serialized))
    return out_path
