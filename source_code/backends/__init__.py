"""Inference backends for the detector: PyTorch variants, ONNX Runtime, TensorRT.

One entry point, ``make_backend(model, backend=..., precision=...)``, returns a callable
``Backend``: ``backend(x)`` takes a float32 ``(N, 3, H, W)`` tensor on the backend's device
and returns the model's output tuple ``(heatmap_logits, wh, offset)`` as float32 tensors on
that same device. ``N`` may be anything up to ``batch_size``; no batch is padded. On CUDA
each backend runs on its own stream and records ``backend.event`` (``base.py``,
``source_code/GPU_STREAMS.md``).

========================  ========  ===================================================
backend                   devices   precisions
========================  ========  ===================================================
``torch``                 cpu, cuda fp32 (cpu, cuda); fp16 (cuda); + channels_last,
                                    cuda_graphs (cuda), compile (cpu, cuda)
``onnxruntime``           cpu, cuda fp32; int8 (static QDQ, calibrated on generated scenes)
``tensorrt``              cuda      fp32, fp16 (FP16 ONNX export), int8 (QDQ model); strongly
                                    typed on TensorRT 10.12+ and 11 (int8: FP16 outside Q/DQ)
========================  ========  ===================================================

"fp32" on an Ampere or Hopper GPU is TF32 for convolutions under PyTorch's defaults
(``torch.backends.cudnn.conv.fp32_precision`` is ``tf32``); ``make_backend(tf32=False)`` forbids it.

Rooms (one responsibility each):

- ``base``: the ``Backend`` interface, its stream and event, devices, input checks, TF32.
- ``registry``: ``make_backend`` and ``available_backends`` (``python -m source_code.backends``).
- ``torch_eager``: eager / fp16 / channels_last / ``torch.compile``.
- ``cuda_graphs``: CUDA graphs, one per batch size that occurs.
- ``ort``: ONNX Runtime (providers, stream, fallback check).
- ``tensorrt_build`` / ``tensorrt_run``: building engines / running them.
- ``onnx_export``: the ONNX export (FP32, FP16) and output comparison; ``qdq_fp16``: the INT8 model's float parts in FP16.
- ``artifacts``: the cache folder (``--cache-dir``, default ``~/.cache/labkit/backends``), cache keys, ONNX / INT8 / engine files.
- ``calibration``: INT8 calibration settings and the generated scenes it reads.
"""
from source_code.backends.artifacts import (ENGINE_RECIPE, default_cache_dir, engine_path, ensure_int8_onnx,
                                            ensure_onnx, model_hash)
from source_code.backends.base import Backend, BackendUnavailable, expected_batch_sizes, set_tf32, tf32_state
from source_code.backends.calibration import (QUANT_RECIPE, CalibrationSettings, SceneCalibrationReader,
                                              read_video_frames, scene_frames, scene_video)
from source_code.backends.cuda_graphs import CudaGraphBackend
from source_code.backends.ort import OrtBackend
from source_code.backends.registry import BACKENDS, PRECISIONS, available_backends, main, make_backend
from source_code.backends.tensorrt_build import build_engine
from source_code.backends.tensorrt_run import TensorRTBackend
from source_code.backends.torch_eager import TorchBackend

__all__ = [
    "BACKENDS", "ENGINE_RECIPE", "PRECISIONS", "QUANT_RECIPE", "Backend", "BackendUnavailable", "CalibrationSettings",
    "CudaGraphBackend", "OrtBackend", "SceneCalibrationReader", "TensorRTBackend", "TorchBackend",
    "available_backends", "build_engine", "default_cache_dir", "engine_path", "ensure_int8_onnx", "ensure_onnx",
    "expected_batch_sizes", "main", "make_backend", "model_hash", "read_video_frames", "scene_frames", "scene_video", "set_tf32",
    "tf32_state",
]
