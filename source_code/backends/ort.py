"""ONNX Runtime: a session over the exported (fp32) or QDQ-quantized (int8) model, CPU or CUDA.

On CUDA the session runs on the backend's stream: its handle is the CUDA provider's
``user_compute_stream`` (ONNX Runtime ignores "0", torch's default stream, and would run on a
stream of its own, unordered with torch's upload and resize). ``Backend.__call__`` makes that
stream wait for the input and the caller wait for the outputs.

After the session is created its providers and their options are checked against those asked
for (:func:`check_session`): ONNX Runtime falls back silently (a CUDA provider that failed to
load runs on CPU; a TensorRT provider listed where TensorRT is absent re-creates the session
with bare CUDA/CPU providers, without the user stream or any option), and a run labelled int8
on CUDA would then measure something else. Any difference is an error naming the fix.

INT8 on CUDA is calibrated for the GPU (:func:`calibration_target`): symmetric INT8 Q/DQ, as
TensorRT and the CUDA provider take it, not the CPU recipe's asymmetric UINT8 activations.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
from pathlib import Path
from typing import Sequence

import torch

from source_code.backends.artifacts import ensure_int8_onnx, ensure_onnx
from source_code.backends.base import Backend, BackendUnavailable, backend_stream, warm_sizes
from source_code.backends.onnx_export import INPUT_NAME

# ONNX Runtime's TensorRT provider builds against TensorRT 11 from this release on.
ORT_FOR_TENSORRT11 = (1, 27)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".")[:2] if p.isdigit())


def installed_tensorrt_version() -> str | None:
    """The installed TensorRT wheel's version (without importing it), or None."""
    for dist in ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu13-libs", "tensorrt-cu12-libs"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_ort_tensorrt(ort_version: str, trt_version: str | None) -> None:
    """Raise BackendUnavailable when ONNX Runtime's TensorRT provider cannot use this TensorRT."""
    if trt_version and _version_tuple(trt_version)[:1] >= (11,) and _version_tuple(ort_version) < ORT_FOR_TENSORRT11:
        need = ".".join(map(str, ORT_FOR_TENSORRT11))
        raise BackendUnavailable(
            f"onnxruntime {ort_version}'s TensorRT provider needs TensorRT 10, and TensorRT {trt_version} is installed: "
            f"pip install 'onnxruntime-gpu>={need}', or pip install 'tensorrt>=10,<11'")


def ort_tensorrt_cache(cache_dir: Path, *, gpu: str, ort_version: str, trt_version: str | None) -> Path:
    """The folder of ONNX Runtime's TensorRT engine cache for this GPU and these versions: an engine
    is specific to the GPU and the TensorRT that built it, and ORT's provider would load one built on
    another box sharing the cache (a class's shared folder, a state carried between machines)."""
    def part(text) -> str:
        return "".join(c if c.isalnum() or c == "." else "_" for c in str(text)).strip("_")

    return cache_dir / "ort_tensorrt" / f"{part(gpu)}-ort{part(ort_version)}-trt{part(trt_version or 'none')}"


def ort_providers(device: torch.device, precision: str, *, batch_size: int, input_hw: Sequence[int],
                  cache_dir: Path, stream=None, tf32: bool | None = None) -> list:
    """Execution providers by availability: CPU; CUDA on ``stream``; TensorRT first for INT8 on the GPU."""
    import onnxruntime as ort

    have = ort.get_available_providers()
    if device.type == "cpu":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in have:
        raise BackendUnavailable(
            f"onnxruntime {ort.__version__} has no CUDA provider (it offers {', '.join(have)}): "
            "pip install --force-reinstall --no-deps onnxruntime-gpu, or use --device cpu"
        )
    dev_id = device.index or 0
    cuda_opts = {"device_id": dev_id}
    if stream is not None:
        cuda_opts.update(has_user_compute_stream="1", user_compute_stream=str(stream.cuda_stream))
    if tf32 is not None:
        cuda_opts["use_tf32"] = "1" if tf32 else "0"
    cuda = ("CUDAExecutionProvider", cuda_opts)
    # A QDQ graph runs as INT8 only under TensorRT; the CUDA provider would dequantize it.
    if precision == "int8" and "TensorrtExecutionProvider" in have:
        check_ort_tensorrt(ort.__version__, installed_tensorrt_version())
        h, w = input_hw
        shape = lambda n: f"{INPUT_NAME}:{n}x3x{h}x{w}"  # noqa: E731
        trt_opts = {
            "device_id": dev_id, "trt_int8_enable": True, "trt_fp16_enable": True,
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(ort_tensorrt_cache(cache_dir, gpu=torch.cuda.get_device_name(device),
                                                            ort_version=ort.__version__,
                                                            trt_version=installed_tensorrt_version())),
            # An explicit batch profile, so a partial last batch does not rebuild the engine mid-run.
            "trt_profile_min_shapes": shape(1), "trt_profile_opt_shapes": shape(batch_size),
            "trt_profile_max_shapes": shape(batch_size),
        }
        if stream is not None:
            trt_opts.update(has_user_compute_stream="1", user_compute_stream=str(stream.cuda_stream))
        return [("TensorrtExecutionProvider", trt_opts), cuda, "CPUExecutionProvider"]
    return [cuda, "CPUExecutionProvider"]


NO_SYNC_KEY = "disable_synchronize_execution_providers"
"""ONNX Runtime's RunOptions config key (onnxruntime_run_options_config_keys.h): "1" stops ``Run()``
from synchronizing the execution providers' streams at its end."""


def run_options(device: torch.device):
    """The RunOptions of every GPU call: no stream synchronize inside ``Run()``. The session runs on
    the backend's stream (``user_compute_stream``), and ``Backend.__call__`` orders the caller after
    it with ``backend.event``: the explicit, GPU-side sync, so that batches overlap under ``--queues``.
    None on CPU (nothing to synchronize)."""
    if device.type != "cuda":
        return None
    import onnxruntime as ort

    opts = ort.RunOptions()
    opts.add_run_config_entry(NO_SYNC_KEY, "1")
    return opts


def calibration_target(device: torch.device) -> str:
    """The INT8 recipe (``CalibrationSettings.target``) for a session on ``device``: ``cpu`` (U8S8,
    ONNX Runtime's QLinearConv) on CPU; ``tensorrt`` (symmetric INT8 activations and weights,
    float biases) on CUDA, where the TensorRT provider or the CUDA provider's Q/DQ kernels run it."""
    return "tensorrt" if device.type == "cuda" else "cpu"


CHECKED_OPTIONS = frozenset({"device_id", "has_user_compute_stream", "user_compute_stream", "use_tf32",
                             "trt_int8_enable", "trt_fp16_enable"})
"""The provider options that change what a run measures (its device, stream, precision), compared
with the session's own (``get_provider_options``); paths and shape profiles are ONNX Runtime's to spell."""


def _short(name: str) -> str:
    return name.replace("ExecutionProvider", "")


def check_session(requested: list, got: Sequence[str], got_options: dict, *, ort_version: str) -> None:
    """Raise BackendUnavailable (one line, naming the fix) unless the session runs exactly the
    providers ``requested``, in order, each with the options asked for (ONNX Runtime reports its
    options as strings). Never a fallback: a different session measures something else."""
    names = [p[0] if isinstance(p, tuple) else p for p in requested]
    check_session_providers(requested, got, ort_version=ort_version)
    if list(got) != names:
        missing = [n for n in names if n not in got]
        raise BackendUnavailable(
            f"onnxruntime {ort_version} started {', '.join(map(_short, got))} instead of the "
            f"{', '.join(map(_short, names))} asked for"
            f"{' (' + ', '.join(map(_short, missing)) + ' did not load)' if missing else ''}: install what it needs "
            "(onnxruntime-gpu built for this CUDA; TensorRT for its provider), or use --device cpu")
    for p in requested:
        if not isinstance(p, tuple):
            continue
        name, opts = p
        have = got_options.get(name, {})
        wrong = {k: v for k, v in opts.items() if k in CHECKED_OPTIONS and str(have.get(k)).lower() != str(v).lower()
                 and not (isinstance(v, bool) and str(have.get(k)) == str(int(v)))}
        if wrong:
            k = sorted(wrong)[0]
            raise BackendUnavailable(
                f"onnxruntime {ort_version}'s {_short(name)} provider runs with {k}={have.get(k)!r}, not the "
                f"{wrong[k]!r} asked for ({len(wrong)} option(s) differ): upgrade onnxruntime-gpu to one that "
                "takes these options, or use --device cpu")


def check_session_providers(requested: list, got: Sequence[str], *, ort_version: str) -> None:
    """Raise BackendUnavailable when a GPU provider asked for is not among the session's providers."""
    names = [p[0] if isinstance(p, tuple) else p for p in requested]
    if "CUDAExecutionProvider" in names and "CUDAExecutionProvider" not in got:
        cuda = torch.version.cuda or "none (CPU build)"
        raise BackendUnavailable(
            f"onnxruntime {ort_version} could not start its CUDA provider and fell back to {', '.join(got)}: "
            f"its CUDA/cuDNN libraries did not load (an onnxruntime-gpu built for another CUDA than torch's, "
            f"CUDA {cuda}, is the usual cause): pip install --force-reinstall --no-deps onnxruntime-gpu "
            "built for that CUDA, or use --device cpu")


class OrtBackend(Backend):
    """ONNX Runtime session over the exported (fp32) or QDQ-quantized (int8) model."""

    def __init__(self, onnx_path: Path, *, device: torch.device, precision: str, batch_size: int,
                 input_hw: tuple[int, int], providers: list, stream=None, batch_sizes: Sequence[int] | None = None):
        import numpy as np
        import onnxruntime as ort

        self.device, self.batch_size, self.precision, self.onnx_path = device, batch_size, precision, onnx_path
        self.stream = stream
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        from labkit import annotate

        with annotate.range("ort_session_init"):
            self.session = ort.InferenceSession(str(onnx_path), sess_options=opts, providers=providers)
            self.providers = self.session.get_providers()
            check_session(providers, self.providers, self.session.get_provider_options(), ort_version=ort.__version__)
            self.input_name = self.session.get_inputs()[0].name
            self.output_names = [o.name for o in self.session.get_outputs()]
            h, w = input_hw
            # A warm-up run gives the per-frame output shapes (the batch axis is symbolic); on the
            # GPU at every batch size the run will use, so cuDNN's algorithm search (per input
            # shape) and any TensorRT-provider engine build happen here rather than on the first
            # frames of a run. Same dtype and (NCHW) layout as every call.
            for n in warm_sizes(batch_size, batch_sizes) if device.type == "cuda" else (1,):
                probe = self.session.run(self.output_names, {self.input_name: np.zeros((n, 3, h, w), np.float32)})
            self._out_shapes = [tuple(a.shape[1:]) for a in probe]
        self.run_options = run_options(device)
        ep = self.providers[0].replace("ExecutionProvider", "").lower()
        self.name = f"onnxruntime-{precision}-{ep}"

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x.float().contiguous()
        if self.device.type == "cpu":
            outs = self.session.run(self.output_names, {self.input_name: x.numpy()})
            return tuple(torch.from_numpy(o) for o in outs)
        # On the GPU: bind torch's buffers directly, no host round trip. The outputs are
        # allocated on the backend's stream (current here), where the session writes them.
        import numpy as np

        n = x.shape[0]
        outs = [torch.empty((n, *s), device=self.device, dtype=torch.float32) for s in self._out_shapes]
        binding = self.session.io_binding()
        dev_id = self.device.index or 0
        binding.bind_input(self.input_name, "cuda", dev_id, np.float32, tuple(x.shape), x.data_ptr())
        for name, t in zip(self.output_names, outs):
            binding.bind_output(name, "cuda", dev_id, np.float32, tuple(t.shape), t.data_ptr())
        # no host sync inside Run(): the caller waits on backend.event (Backend.__call__), GPU-side;
        # x and the outputs live on this stream's allocations until that event
        self.session.run_with_iobinding(binding, self.run_options)
        return tuple(outs)

    def close(self) -> None:
        self.session = None


def make_ort_backend(model, *, precision, device, batch_size, cache_dir, input_hw, calibration,
                     stream=None, tf32=None, batch_sizes=None) -> Backend:
    """Export (and for int8 quantize) ``model`` once, then open an ONNX Runtime session on it."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailable(f"onnxruntime is not installed ({exc}): pip install onnxruntime (or onnxruntime-gpu on GPU machines)") from exc
    if precision == "fp16":
        raise BackendUnavailable("--backend onnxruntime offers fp32 and int8; for fp16 use --backend tensorrt or --backend torch --device cuda")
    cache_dir.mkdir(parents=True, exist_ok=True)
    stream = backend_stream(device, stream)
    # Fails early (before export or calibration) when the GPU provider is missing.
    providers = ort_providers(device, precision, batch_size=batch_size, input_hw=input_hw, cache_dir=cache_dir,
                              stream=stream, tf32=tf32)
    path = ensure_onnx(model, cache_dir=cache_dir, input_hw=input_hw)
    if precision == "int8":
        calibration = dataclasses.replace(calibration, target=calibration_target(device))
        path = ensure_int8_onnx(path, calibration=calibration, input_hw=input_hw, cache_dir=cache_dir,
                                workdir=cache_dir / "calibration_scenes")
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        return OrtBackend(path, device=device, precision=precision, batch_size=batch_size, input_hw=input_hw,
                          providers=providers, stream=stream, batch_sizes=batch_sizes)

