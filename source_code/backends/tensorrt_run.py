"""TensorRT at run time: a deserialized engine enqueued on the backend's own (non-default) stream.

``execute_async_v3`` gets the handle of ``backend.stream``, a stream of the engine's device:
never the default stream (TensorRT warns "Using default stream in enqueueV3()" and adds
synchronization there). Ordering with torch's producer and consumer is by events
(``Backend.__call__``), never by a device-wide synchronize. Pages read:
  https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/ExecutionContext.html
    (IExecutionContext: set_input_shape, set_tensor_address, get_tensor_shape, execute_async_v3)
  https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/Engine.html
    (ICudaEngine: num_io_tensors, get_tensor_name, get_tensor_mode, get_tensor_dtype)
  https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/Runtime.html
    (Runtime(logger).deserialize_cuda_engine(buffer) -> ICudaEngine or None)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from source_code.backends.artifacts import engine_path, ensure_int8_onnx, ensure_onnx, model_hash
from source_code.backends.base import Backend, BackendUnavailable, backend_stream
from source_code.backends.qdq_fp16 import qdq_to_fp16
from source_code.backends.tensorrt_build import build_engine, gpu_tag, import_tensorrt


class TensorRTBackend(Backend):
    """A deserialized TensorRT engine run on the backend's stream, reading and writing torch tensors."""

    def __init__(self, engine_file: Path, *, device: torch.device, precision: str, batch_size: int, stream=None):
        trt = import_tensorrt()
        self.device, self.batch_size, self.precision, self.engine_file = device, batch_size, precision, engine_file
        self._logger = trt.Logger(trt.Logger.WARNING)
        with torch.cuda.device(device):
            self.stream = backend_stream(device, stream)
            self._runtime = trt.Runtime(self._logger)
            self.engine = self._runtime.deserialize_cuda_engine(engine_file.read_bytes())
            if self.engine is None:
                raise BackendUnavailable(f"TensorRT could not load {engine_file} (built by another TensorRT or GPU?): "
                                         "delete it to rebuild")
            self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        for n in names:
            if self.engine.get_tensor_dtype(n) != trt.DataType.FLOAT:
                raise BackendUnavailable(f"engine tensor {n!r} is {self.engine.get_tensor_dtype(n)}, expected float32 I/O; "
                                         f"delete {engine_file} to rebuild")
        self.name = f"tensorrt-{precision}"

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x.float().contiguous()
        ctx = self.context
        ctx.set_input_shape(self.inputs[0], tuple(x.shape))
        ctx.set_tensor_address(self.inputs[0], x.data_ptr())
        outs = []
        for name in self.outputs:
            out = torch.empty(tuple(ctx.get_tensor_shape(name)), device=self.device, dtype=torch.float32)
            ctx.set_tensor_address(name, out.data_ptr())
            outs.append(out)
        if not ctx.execute_async_v3(self.stream.cuda_stream):
            raise RuntimeError(f"{self.name}: execute_async_v3 failed (see the TensorRT log)")
        return tuple(outs)

    def close(self) -> None:
        """Wait for the work enqueued on the engine's stream, then drop the context, the engine and
        the runtime, in that order: a context destroyed while its enqueued work still runs frees
        memory the GPU is using (TensorRT's developer guide: synchronize before destroying)."""
        if getattr(self, "context", None) is not None and getattr(self, "stream", None) is not None:
            self.stream.synchronize()
        self.context = None
        self.engine = None
        self._runtime = None


def make_trt_backend(model, *, precision, device, batch_size, cache_dir, input_hw, calibration,
                     stream=None, tf32=None) -> Backend:
    """Build (once, cached) and load the TensorRT engine of ``model`` for ``precision``."""
    trt = import_tensorrt()  # first: the missing-TensorRT message must come before anything else
    if device.type != "cuda":
        raise BackendUnavailable("TensorRT needs --device cuda; on CPU use --backend onnxruntime or torch")
    cache_dir.mkdir(parents=True, exist_ok=True)
    mhash = model_hash(model, input_hw=input_hw)
    out = engine_path(cache_dir, mhash=mhash, precision=precision, batch_size=batch_size, gpu=gpu_tag(device),
                      trt_version=trt.__version__, calibration=calibration, tf32=tf32)
    if precision == "int8":  # its unquantized layers in FP16, as ORT's TensorRT provider runs them
        out = out.with_name(out.name.replace(".engine", "-fp16rest.engine"))
    if not out.exists():
        src = ensure_onnx(model, cache_dir=cache_dir, input_hw=input_hw, fp16=precision == "fp16")
        if precision == "int8":
            src = ensure_int8_onnx(src, calibration=dataclasses.replace(calibration, target="tensorrt"),
                                   input_hw=input_hw, cache_dir=cache_dir, workdir=cache_dir / "calibration_scenes")
            src = qdq_to_fp16(src)
        with torch.cuda.device(device):
            build_engine(src, out, precision=precision, batch_size=batch_size, input_hw=input_hw, tf32=tf32)
    return TensorRTBackend(out, device=device, precision=precision, batch_size=batch_size, stream=stream)
