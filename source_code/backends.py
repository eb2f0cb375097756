"""Inference backends for the detector: PyTorch variants, ONNX Runtime, TensorRT.

One entry point, ``make_backend(model, backend=..., precision=...)``, returns a callable
``Backend``: ``backend(x)`` takes a float32 ``(N, 3, H, W)`` tensor on the backend's device
and returns the model's output tuple ``(heatmap_logits, wh, offset)`` as float32 tensors on
that same device. ``N`` may be smaller than ``batch_size`` (the last batch of a clip).

Everything that can fail (missing package, no GPU, unsupported precision) fails inside
``make_backend`` with ``BackendUnavailable`` whose message names the fix, before any video
work starts. Heavy imports (onnxruntime, tensorrt) happen only when that backend is asked for.

Backends and precisions:

========================  ========  ===================================================
backend                   devices   precisions
========================  ========  ===================================================
``torch``                 cpu, cuda fp32 (cpu, cuda); fp16 (cuda); + channels_last,
                                    cuda_graphs (cuda), compile (cpu, cuda)
``onnxruntime``           cpu, cuda fp32; int8 (static QDQ, calibrated on generated scenes)
``tensorrt``              cuda      fp32, fp16, int8 (explicit quantization from the QDQ
                                    model)
========================  ========  ===================================================

Converted models (ONNX, INT8 ONNX, TensorRT engines) are cached under ``cache_dir``
(default ``$LABKIT_CACHE_DIR`` or ``~/.cache/labkit/backends``), keyed by a hash of the
model's weights and every setting that changes the artifact.

All one-time work happens inside ``make_backend``, each step in its own NVTX range (via
``labkit.annotate``) so a profile that does include it shows what it was: ``onnx_export``,
``int8_calibration``, ``engine_build``, ``ort_session_init``, ``torch_compile``,
``cuda_graph_capture``. The per-batch call emits no range of its own: the pipeline's
``infer`` stage range wraps it.

ONNX export: the dynamo exporter (``torch.onnx.export(dynamo=True)``) with a dynamic batch
axis, falling back to the TorchScript exporter; see ``source_code/export_onnx.py``.
INT8 calibration uses scene seeds 9101-9104 (``CalibrationSettings``), far from evaluation
seeds (small integers) and training seeds (>= 100000).

``python -m source_code.backends`` prints what this machine can run.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

BACKENDS = ("torch", "onnxruntime", "tensorrt")
PRECISIONS = ("fp32", "fp16", "int8")
_ALIASES = {"ort": "onnxruntime", "onnx": "onnxruntime", "trt": "tensorrt", "pytorch": "torch"}


class BackendUnavailable(RuntimeError):
    """The requested backend/precision/device cannot run here; the message names the fix."""


# --------------------------------------------------------------------------- common


class Backend:
    """A callable inference backend: ``backend(x) -> tuple of float32 tensors``."""

    name: str = "backend"
    device: torch.device = torch.device("cpu")
    batch_size: int = 1

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the backend holds (sessions, engines, graph pools)."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} device={self.device} batch_size={self.batch_size}>"


# Changes whenever ensure_int8_onnx quantizes differently, so cached INT8 models are redone.
QUANT_RECIPE = "qdq-s8s8-symmetric-perchannel-heads_float-v1"


@dataclass(frozen=True)
class CalibrationSettings:
    """How the INT8 models are calibrated (part of the cache key).

    The scene seeds are deliberately far from the evaluation seeds (small integers) so that
    calibration never sees a held-out clip.
    """

    seeds: tuple[int, ...] = (9101, 9102, 9103, 9104)
    frames_per_seed: int = 16
    seconds: float = 2.0
    method: str = "minmax"  # minmax | entropy | percentile
    per_channel: bool = True

    def key(self) -> str:
        blob = json.dumps({**asdict(self), "recipe": QUANT_RECIPE}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    """Where converted models are cached: ``$LABKIT_CACHE_DIR`` or ``~/.cache/labkit/backends``."""
    env = os.environ.get("LABKIT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "labkit" / "backends"


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


def _default_input_hw() -> tuple[int, int]:
    try:
        from source_code.detector import INPUT_HW
    except ImportError as exc:  # only while the detector module is being written
        raise BackendUnavailable(
            f"cannot read the detector's input size ({exc}); pass input_hw=(H, W) to make_backend"
        ) from exc
    return tuple(INPUT_HW)


def _parse_device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise BackendUnavailable(f"unknown device {device!r}: use cpu or cuda[:N]") from exc
    if dev.type not in ("cpu", "cuda"):
        raise BackendUnavailable(f"device {device!r} is not supported: use cpu or cuda[:N]")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendUnavailable(
                f"--device {device} asked for, but torch sees no CUDA GPU "
                f"(torch {torch.__version__}): use --device cpu, or install a CUDA build of torch on a GPU machine"
            )
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= torch.cuda.device_count():
            raise BackendUnavailable(
                f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s); use cuda:0"
            )
    return dev


def _outputs_tuple(out) -> tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(out)


def _check_input(x: torch.Tensor, device: torch.device, batch_size: int, name: str) -> None:
    if x.dim() != 4 or x.shape[1] != 3:
        raise ValueError(f"{name}: expected a (N, 3, H, W) tensor, got shape {tuple(x.shape)}")
    if x.shape[0] > batch_size:
        raise ValueError(f"{name}: batch of {x.shape[0]} frames exceeds batch_size={batch_size}")
    if x.device != device:
        raise ValueError(f"{name}: input is on {x.device}, backend runs on {device}; move it with x.to({str(device)!r})")


# --------------------------------------------------------------------------- PyTorch


class TorchBackend(Backend):
    """Eager PyTorch, optionally fp16, channels_last, or torch.compile."""

    def __init__(self, model: torch.nn.Module, *, device: torch.device, precision: str, batch_size: int,
                 channels_last: bool, compile: bool, input_hw: tuple[int, int]):
        self.device, self.batch_size, self.input_hw = device, batch_size, input_hw
        self.precision, self.channels_last = precision, channels_last
        # A private copy: .half() and channels_last would otherwise change the caller's model.
        m = copy.deepcopy(model).eval().to(device)
        if precision == "fp16":
            m = m.half()
        if channels_last:
            m = m.to(memory_format=torch.channels_last)
        self.model = m
        self._forward: Callable = m
        self.compiled = compile
        parts = ["torch", precision] + (["channels_last"] if channels_last else []) + (["compile"] if compile else [])
        self.name = "-".join(parts)
        if compile:
            # One static shape: partial batches are zero-padded to batch_size (see __call__), so
            # the last batch of a clip does not trigger a recompile inside the profiled region.
            self._forward = torch.compile(m, dynamic=False)
            from labkit import annotate

            # Compile now, in make_backend, not on the first frame of the video.
            with annotate.range("torch_compile"), torch.inference_mode():
                h, w = input_hw
                self._forward(self._prepare(torch.zeros((batch_size, 3, h, w), device=device)))

    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        if self.precision == "fp16":
            x = x.half()
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        _check_input(x, self.device, self.batch_size, self.name)
        n = x.shape[0]
        with torch.inference_mode():
            if self.compiled and n < self.batch_size:
                x = torch.cat([x, x.new_zeros((self.batch_size - n, *x.shape[1:]))])
            out = _outputs_tuple(self._forward(self._prepare(x)))
            return tuple(o[:n].float().contiguous() for o in out)

    def close(self) -> None:
        self.model = None
        self._forward = None


class CudaGraphBackend(TorchBackend):
    """PyTorch captured once into a CUDA graph at ``batch_size``; replayed for every batch.

    The graph reads a static input buffer and writes static output buffers: each call
    copies ``x`` into the buffer (zero-padding a partial batch), replays, and returns copies
    of the first ``N`` rows so the next replay cannot overwrite what the caller holds.
    """

    def __init__(self, model: torch.nn.Module, **kw):
        super().__init__(model, compile=False, **kw)
        self.name += "-cuda_graphs"
        h, w = self.input_hw
        dtype = torch.float16 if self.precision == "fp16" else torch.float32
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        self._static_in = torch.zeros((self.batch_size, 3, h, w), device=self.device, dtype=dtype).contiguous(memory_format=fmt)
        self._graph = torch.cuda.CUDAGraph()
        from labkit import annotate

        with annotate.range("cuda_graph_capture"):
            # Warm-up on a side stream (cuDNN autotuning, lazy allocations), as capture requires.
            side = torch.cuda.Stream(device=self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.inference_mode(), torch.cuda.stream(side):
                for _ in range(3):
                    self.model(self._static_in)
            torch.cuda.current_stream(self.device).wait_stream(side)
            with torch.inference_mode(), torch.cuda.graph(self._graph):
                self._static_out = _outputs_tuple(self.model(self._static_in))
            torch.cuda.synchronize(self.device)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        _check_input(x, self.device, self.batch_size, self.name)
        n = x.shape[0]
        if tuple(x.shape[2:]) != tuple(self._static_in.shape[2:]):
            raise ValueError(f"{self.name}: captured for {tuple(self._static_in.shape[2:])} frames, got {tuple(x.shape[2:])}")
        with torch.inference_mode():
            self._static_in[:n].copy_(x)
            if n < self.batch_size:
                self._static_in[n:].zero_()
            self._graph.replay()
            return tuple(o[:n].float().clone() for o in self._static_out)

    def close(self) -> None:
        super().close()
        self._graph = None
        self._static_in = None
        self._static_out = None


# --------------------------------------------------------------------------- factory


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
    if kind != "torch" and (channels_last or cuda_graphs or compile):
        flags = [n for n, v in (("--channels-last", channels_last), ("--cuda-graphs", cuda_graphs), ("--compile", compile)) if v]
        raise BackendUnavailable(f"{' and '.join(flags)} {'apply' if len(flags) > 1 else 'applies'} to --backend torch only; "
                                 f"drop {'them' if len(flags) > 1 else 'it'} for --backend {kind}")
    if kind == "tensorrt":
        _import_tensorrt()  # a missing TensorRT is the first thing to say, whatever the device
    dev = _parse_device(device)
    hw = tuple(int(v) for v in input_hw) if input_hw is not None else _default_input_hw()

    if kind == "torch":
        if precision == "int8":
            raise BackendUnavailable("int8 is not offered for --backend torch: use --backend onnxruntime or tensorrt with --precision int8")
        if precision == "fp16" and dev.type != "cuda":
            raise BackendUnavailable("fp16 needs a CUDA GPU (--device cuda); on CPU use --precision fp32")
        if cuda_graphs and dev.type != "cuda":
            raise BackendUnavailable("CUDA graphs need --device cuda; on CPU drop --cuda-graphs")
        if cuda_graphs and compile:
            raise BackendUnavailable(
                "--cuda-graphs and --compile together are not offered: pick one "
                "(torch.compile(mode='reduce-overhead') would capture its own graphs)"
            )
        if compile:
            _check_compile_available(dev)
        kw = dict(device=dev, precision=precision, batch_size=batch_size, channels_last=channels_last, input_hw=hw)
        if cuda_graphs:
            return CudaGraphBackend(model, **kw)
        return TorchBackend(model, compile=compile, **kw)

    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    calib = calibration or CalibrationSettings()
    if kind == "onnxruntime":
        return _make_ort_backend(model, precision=precision, device=dev, batch_size=batch_size,
                                 cache_dir=cache, input_hw=hw, calibration=calib)
    return _make_trt_backend(model, precision=precision, device=dev, batch_size=batch_size,
                             cache_dir=cache, input_hw=hw, calibration=calib)


def _check_compile_available(dev: torch.device) -> None:
    if not hasattr(torch, "compile"):
        raise BackendUnavailable(f"torch.compile needs torch >= 2.0 (found {torch.__version__}): upgrade torch or drop --compile")
    if dev.type == "cpu":
        import shutil

        if not (shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++") or shutil.which("clang++")):
            raise BackendUnavailable("torch.compile on CPU needs a C++ compiler (g++): apt-get install g++, or drop --compile")


# --------------------------------------------------------------------------- ONNX models on disk


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def ensure_onnx(model: torch.nn.Module, *, cache_dir: str | os.PathLike | None = None,
                input_hw: Sequence[int] | None = None, opset: int = 17) -> Path:
    """The model exported to ONNX (dynamic batch), cached as ``<cache>/<model_hash>-opset<N>.onnx``."""
    from source_code.export_onnx import export_onnx

    hw = tuple(int(v) for v in input_hw) if input_hw is not None else _default_input_hw()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    mhash = model_hash(model, input_hw=hw)
    path = cache / f"{mhash}-opset{opset}.onnx"
    if not path.exists():
        from labkit import annotate

        tmp = cache / f".{path.stem}.{os.getpid()}.onnx"
        with annotate.range("onnx_export"):
            export_onnx(model, tmp, input_hw=hw, opset=opset, metadata={"labkit.model_hash": mhash})
        os.replace(tmp, path)
    return path


def read_video_frames(video: str | os.PathLike, *, indices: Sequence[int] | None = None):
    """BGR uint8 frames of ``video`` (all, or those at ``indices``), as a list of arrays."""
    import cv2

    cap = cv2.VideoCapture(str(video))
    if not cap.isOpened():
        raise RuntimeError(f"OpenCV cannot open {video}")
    wanted = None if indices is None else set(int(i) for i in indices)
    frames, i = [], 0
    try:
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            if wanted is None or i in wanted:
                frames.append(frame)
            i += 1
    finally:
        cap.release()
    return frames


def scene_video(*, seed: int, seconds: float, workdir: str | os.PathLike) -> Path:
    """The generated scene ``seed`` as a video in ``workdir`` (written once, then reused)."""
    from source_code.scenes import SceneConfig, make_video

    folder = Path(workdir)
    folder.mkdir(parents=True, exist_ok=True)
    video = folder / f"scene_seed{seed}_{seconds:g}s.mp4"
    if not video.exists():
        tmp = folder / f".{video.stem}.{os.getpid()}.mp4"
        written, gt = make_video(tmp, seconds=seconds, config=SceneConfig(seed=seed))
        os.replace(gt, folder / f"{video.stem}.gt.csv")
        os.replace(written, video)
    return video


def scene_frames(*, seed: int, count: int, seconds: float = 2.0, workdir: str | os.PathLike | None = None,
                 input_hw: Sequence[int] | None = None):
    """``count`` frames of the generated scene ``seed``, preprocessed to float32 ``(N, 3, H, W)``.

    The scene is written with ``source_code.scenes.make_video`` and read back with OpenCV, so
    the frames went through the same codec as the clips the pipeline runs on. Frames are
    spread evenly over the clip.
    """
    import tempfile

    import numpy as np

    from source_code.detector import INPUT_HW, preprocess_frames

    hw = tuple(input_hw) if input_hw is not None else tuple(INPUT_HW)
    with contextlib.ExitStack() as stack:
        folder = workdir if workdir is not None else stack.enter_context(tempfile.TemporaryDirectory())
        video = scene_video(seed=seed, seconds=seconds, workdir=folder)
        frames = read_video_frames(video)
    if not frames:
        raise RuntimeError(f"could not read any frame from {video}")
    picks = np.linspace(0, len(frames) - 1, num=min(count, len(frames))).round().astype(int)
    return preprocess_frames(np.stack([frames[i] for i in picks]), hw)


class SceneCalibrationReader:
    """An onnxruntime ``CalibrationDataReader`` over frames of generated scenes (batches of 4)."""

    def __init__(self, settings: CalibrationSettings, *, input_name: str, input_hw: Sequence[int],
                 workdir: str | os.PathLike | None = None, batch: int = 4):
        import numpy as np

        parts = [scene_frames(seed=s, count=settings.frames_per_seed, seconds=settings.seconds,
                              workdir=workdir, input_hw=input_hw) for s in settings.seeds]
        frames = np.concatenate(parts)
        self._batches = [{input_name: np.ascontiguousarray(frames[i:i + batch])} for i in range(0, len(frames), batch)]
        self._it = iter(self._batches)

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._batches)

    def __len__(self) -> int:
        return len(self._batches)


def ensure_int8_onnx(onnx_path: Path, *, calibration: CalibrationSettings, input_hw: Sequence[int],
                     cache_dir: Path, workdir: str | os.PathLike | None = None) -> Path:
    """The QDQ INT8 model of ``onnx_path``, cached next to it keyed by calibration settings.

    Static quantization (``quantize_static``), QDQ format, INT8 weights per channel and INT8
    activations, both symmetric: that is the form TensorRT's explicit quantization accepts,
    and ONNX Runtime's recommended S8S8 QDQ form on CPU. The output convolutions of the three
    heads are left in float: the heatmap logits feed a sigmoid and a threshold, where a
    coarse quantization step changes which detections survive.
    """
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    if calibration.method not in methods:
        raise BackendUnavailable(f"unknown calibration method {calibration.method!r}: choose one of {', '.join(methods)}")
    out = cache_dir / f"{onnx_path.stem}-int8-{calibration.key()}.onnx"
    if out.exists():
        return out
    from labkit import annotate

    pre = cache_dir / f".{onnx_path.stem}.{os.getpid()}.pre.onnx"
    tmp = cache_dir / f".{out.stem}.{os.getpid()}.onnx"
    with contextlib.ExitStack() as stack:
        stack.enter_context(annotate.range("int8_calibration"))
        stack.callback(pre.unlink, missing_ok=True)
        stack.callback(tmp.unlink, missing_ok=True)
        # ONNX shape inference is enough here (static H, W); the symbolic pass stops at Resize.
        quant_pre_process(str(onnx_path), str(pre), skip_symbolic_shape=True)
        proto = onnx.load(str(pre))
        input_name = proto.graph.input[0].name
        outputs = {o.name for o in proto.graph.output}
        head_nodes = [n.name for n in proto.graph.node if set(n.output) & outputs]
        reader = SceneCalibrationReader(calibration, input_name=input_name, input_hw=input_hw, workdir=workdir)
        quantize_static(
            str(pre), str(tmp), reader,
            quant_format=QuantFormat.QDQ, per_channel=calibration.per_channel,
            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
            calibrate_method=methods[calibration.method], nodes_to_exclude=head_nodes,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
        )
        os.replace(tmp, out)
    return out


# --------------------------------------------------------------------------- ONNX Runtime


def _ort_providers(device: torch.device, precision: str, *, batch_size: int, input_hw: Sequence[int],
                   cache_dir: Path) -> list:
    """Execution providers by availability: CPU; CUDA; TensorRT first for INT8 on the GPU."""
    import onnxruntime as ort

    from source_code.export_onnx import INPUT_NAME

    have = ort.get_available_providers()
    if device.type == "cpu":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in have:
        raise BackendUnavailable(
            f"onnxruntime {ort.__version__} has no CUDA provider (it offers {', '.join(have)}): "
            "pip uninstall onnxruntime && pip install onnxruntime-gpu, or use --device cpu"
        )
    dev_id = device.index or 0
    # Run on torch's current stream, so tensors bound from torch need no extra synchronization.
    cuda = ("CUDAExecutionProvider", {"device_id": dev_id,
                                      "user_compute_stream": str(torch.cuda.current_stream(device).cuda_stream)})
    # A QDQ graph runs as INT8 only under TensorRT; the CUDA provider would dequantize it.
    if precision == "int8" and "TensorrtExecutionProvider" in have:
        h, w = input_hw
        shape = lambda n: f"{INPUT_NAME}:{n}x3x{h}x{w}"  # noqa: E731
        trt_opts = {
            "device_id": dev_id, "trt_int8_enable": True, "trt_fp16_enable": True,
            "trt_engine_cache_enable": True, "trt_engine_cache_path": str(cache_dir / "ort_tensorrt"),
            # An explicit batch profile, so a partial last batch does not rebuild the engine mid-run.
            "trt_profile_min_shapes": shape(1), "trt_profile_opt_shapes": shape(batch_size),
            "trt_profile_max_shapes": shape(batch_size),
        }
        return [("TensorrtExecutionProvider", trt_opts), cuda, "CPUExecutionProvider"]
    return [cuda, "CPUExecutionProvider"]


class OrtBackend(Backend):
    """ONNX Runtime session over the exported (fp32) or QDQ-quantized (int8) model."""

    def __init__(self, onnx_path: Path, *, device: torch.device, precision: str, batch_size: int,
                 input_hw: tuple[int, int], providers: list):
        import numpy as np
        import onnxruntime as ort

        self.device, self.batch_size, self.precision, self.onnx_path = device, batch_size, precision, onnx_path
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        from labkit import annotate

        with annotate.range("ort_session_init"):
            self.session = ort.InferenceSession(str(onnx_path), sess_options=opts, providers=providers)
            self.providers = self.session.get_providers()
            self.input_name = self.session.get_inputs()[0].name
            self.output_names = [o.name for o in self.session.get_outputs()]
            h, w = input_hw
            # A warm-up run gives the per-frame output shapes (the batch axis is symbolic); on the
            # GPU at the full batch, so cuDNN's algorithm search and any TensorRT-provider engine
            # build happen here rather than on the first frames of a run.
            n = batch_size if device.type == "cuda" else 1
            probe = self.session.run(self.output_names, {self.input_name: np.zeros((n, 3, h, w), np.float32)})
            self._out_shapes = [tuple(a.shape[1:]) for a in probe]
        ep = self.providers[0].replace("ExecutionProvider", "").lower()
        self.name = f"onnxruntime-{precision}-{ep}"

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        _check_input(x, self.device, self.batch_size, self.name)
        x = x.contiguous()
        if self.device.type == "cpu":
            outs = self.session.run(self.output_names, {self.input_name: x.numpy()})
            return tuple(torch.from_numpy(o) for o in outs)
        # On the GPU: bind torch's buffers directly, no host round trip.
        import numpy as np

        n = x.shape[0]
        outs = [torch.empty((n, *s), device=self.device, dtype=torch.float32) for s in self._out_shapes]
        binding = self.session.io_binding()
        dev_id = self.device.index or 0
        binding.bind_input(self.input_name, "cuda", dev_id, np.float32, tuple(x.shape), x.data_ptr())
        for name, t in zip(self.output_names, outs):
            binding.bind_output(name, "cuda", dev_id, np.float32, tuple(t.shape), t.data_ptr())
        self.session.run_with_iobinding(binding)
        return tuple(outs)

    def close(self) -> None:
        self.session = None


def _make_ort_backend(model, *, precision, device, batch_size, cache_dir, input_hw, calibration) -> Backend:
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailable(f"onnxruntime is not installed ({exc}): pip install onnxruntime (or onnxruntime-gpu on GPU machines)") from exc
    if precision == "fp16":
        raise BackendUnavailable("--backend onnxruntime offers fp32 and int8; for fp16 use --backend tensorrt or --backend torch --device cuda")
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Fails early (before export or calibration) when the GPU provider is missing.
    providers = _ort_providers(device, precision, batch_size=batch_size, input_hw=input_hw, cache_dir=cache_dir)
    path = ensure_onnx(model, cache_dir=cache_dir, input_hw=input_hw)
    if precision == "int8":
        path = ensure_int8_onnx(path, calibration=calibration, input_hw=input_hw, cache_dir=cache_dir,
                                workdir=cache_dir / "calibration_scenes")
    return OrtBackend(path, device=device, precision=precision, batch_size=batch_size, input_hw=input_hw,
                      providers=providers)


# --------------------------------------------------------------------------- TensorRT
#
# Written against the TensorRT 10 Python API (name-based I/O tensors, enqueueV3). Pages read:
#   https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/ExecutionContext.html
#     (IExecutionContext: set_input_shape, set_tensor_address, get_tensor_shape, execute_async_v3)
#   https://docs.nvidia.com/deeplearning/tensorrt/archives/tensorrt-1001/api/python_api/infer/Core/Engine.html
#     (ICudaEngine: num_io_tensors, get_tensor_name, get_tensor_mode, TensorIOMode, serialize)
#   https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/parsers/Onnx/pyOnnx.html
#     (OnnxParser(network, logger), parse_from_file, num_errors, get_error)
#   https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/c-api/classnvinfer1_1_1_i_builder_config-members.html
#     (IBuilderConfig: setFlag, addOptimizationProfile, setMemoryPoolLimit; Python: set_flag, ...)
#   https://docs.nvidia.com/deeplearning/tensorrt/11.0.0/_static/python-api/infer/Core/Builder.html
#     (Builder: create_network, create_builder_config, create_optimization_profile,
#      build_serialized_network)
#   https://docs.nvidia.com/deeplearning/tensorrt/archives/tensorrt-843/api/python_api/infer/Core/Runtime.html
#     (Runtime(logger).deserialize_cuda_engine(buffer) -> ICudaEngine or None)
#   https://docs.nvidia.com/deeplearning/tensorrt/migration-guide/index.html
#     (8.x -> 10.x: bindings replaced by named tensors, execute_async_v3)
#   https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/quantized-types-explicit-quantization.html
#     (Q/DQ ONNX models build with explicit quantization)
#   https://docs.nvidia.com/deeplearning/tensorrt/latest/api/migration/tensorrt-10x-to-11x-python-api-reference.html
#     (TensorRT 11 removes BuilderFlag.FP16/INT8: strong typing only; hence the version check)
#
# Engine builds take from seconds to minutes; they happen inside make_backend, before the
# pipeline's first frame, inside an NVTX range "engine_build" (labkit.annotate). On CUDA the
# pipeline calls cudaProfilerStart/Stop around its frames (pipeline._profiler_range), and the
# lab profiles TensorRT steps with nsys --capture-range=cudaProfilerApi (lab.capture_range), so
# the build stays out of the profiled region; when a profile does include it, the range names
# it. Engines are cached on disk, so only the first run of a configuration pays for the build.

TRT_MAX_WORKSPACE = 4 << 30


def _import_tensorrt():
    try:
        import tensorrt as trt
    except Exception as exc:  # ImportError, or a broken install failing to load libnvinfer
        raise BackendUnavailable(
            f"TensorRT is not installed ({type(exc).__name__}: {exc}): pip install tensorrt "
            "(GPU machines only), or use --backend torch / --backend onnxruntime"
        ) from exc
    major = int(str(trt.__version__).split(".")[0])
    if major < 10:
        raise BackendUnavailable(f"TensorRT {trt.__version__} is too old: this backend uses the TensorRT 10 API; pip install 'tensorrt>=10,<11'")
    return trt


def _gpu_tag(device: torch.device) -> str:
    name = torch.cuda.get_device_name(device)
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def engine_path(cache_dir: Path, *, mhash: str, precision: str, batch_size: int, gpu: str, trt_version: str,
                calibration: CalibrationSettings | None = None) -> Path:
    """Cache file of one engine: keyed by model, precision, batch profile, GPU and TensorRT version."""
    calib = f"-cal{calibration.key()}" if precision == "int8" and calibration is not None else ""
    return cache_dir / f"{mhash}-{precision}{calib}-b1_{batch_size}_{batch_size}-{gpu}-trt{trt_version}.engine"


def build_engine(onnx_path: Path, out_path: Path, *, precision: str, batch_size: int, input_hw: Sequence[int]) -> Path:
    """Build and serialize a TensorRT engine from ``onnx_path`` (fp32 graph, or QDQ for int8).

    Batch profile: min 1, opt and max ``batch_size`` (the pipeline's full batches; a last,
    partial batch still runs). FP16: ``BuilderFlag.FP16``. INT8: the QDQ graph gives explicit
    quantization; ``BuilderFlag.INT8`` (and FP16 for the layers left in float) are set
    where this TensorRT still has them (TensorRT 10), and not needed on strongly typed 11.x.
    """
    trt = _import_tensorrt()
    from labkit import annotate

    logger = trt.Logger(trt.Logger.WARNING)
    with annotate.range("engine_build"):
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = "\n".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendUnavailable(f"TensorRT could not parse {onnx_path}:\n{errors}\n"
                                     "  delete the cached .onnx to re-export it, or use --backend onnxruntime")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, TRT_MAX_WORKSPACE)
        flags = {"fp16": ["FP16"], "int8": ["INT8", "FP16"], "fp32": []}[precision]
        for flag in flags:
            if hasattr(trt.BuilderFlag, flag):
                config.set_flag(getattr(trt.BuilderFlag, flag))
            elif precision == "fp16":
                raise BackendUnavailable(
                    f"TensorRT {trt.__version__} has no BuilderFlag.FP16 (TensorRT 11 is strongly typed): "
                    "pip install 'tensorrt>=10,<11', or use --precision int8 / --backend torch --precision fp16"
                )
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
        _atomic_write_bytes(out_path, bytes(serialized))
    return out_path


class TensorRTBackend(Backend):
    """A deserialized TensorRT engine run on torch's current CUDA stream, reading and writing torch tensors."""

    def __init__(self, engine_file: Path, *, device: torch.device, precision: str, batch_size: int):
        trt = _import_tensorrt()
        self.device, self.batch_size, self.precision, self.engine_file = device, batch_size, precision, engine_file
        self._logger = trt.Logger(trt.Logger.WARNING)
        with torch.cuda.device(device):
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

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        _check_input(x, self.device, self.batch_size, self.name)
        x = x.contiguous()
        ctx = self.context
        ctx.set_input_shape(self.inputs[0], tuple(x.shape))
        ctx.set_tensor_address(self.inputs[0], x.data_ptr())
        outs = []
        for name in self.outputs:
            out = torch.empty(tuple(ctx.get_tensor_shape(name)), device=self.device, dtype=torch.float32)
            ctx.set_tensor_address(name, out.data_ptr())
            outs.append(out)
        stream = torch.cuda.current_stream(self.device)
        if not ctx.execute_async_v3(stream.cuda_stream):
            raise RuntimeError(f"{self.name}: execute_async_v3 failed (see the TensorRT log)")
        return tuple(outs)

    def close(self) -> None:
        self.context = None
        self.engine = None
        self._runtime = None


def _make_trt_backend(model, *, precision, device, batch_size, cache_dir, input_hw, calibration) -> Backend:
    trt = _import_tensorrt()  # first: the missing-TensorRT message must come before anything else
    if device.type != "cuda":
        raise BackendUnavailable("TensorRT needs --device cuda; on CPU use --backend onnxruntime or torch")
    cache_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = ensure_onnx(model, cache_dir=cache_dir, input_hw=input_hw)
    mhash = model_hash(model, input_hw=input_hw)
    out = engine_path(cache_dir, mhash=mhash, precision=precision, batch_size=batch_size, gpu=_gpu_tag(device),
                      trt_version=trt.__version__, calibration=calibration)
    if not out.exists():
        src = onnx_path
        if precision == "int8":
            src = ensure_int8_onnx(onnx_path, calibration=calibration, input_hw=input_hw, cache_dir=cache_dir,
                                   workdir=cache_dir / "calibration_scenes")
        with torch.cuda.device(device):
            build_engine(src, out, precision=precision, batch_size=batch_size, input_hw=input_hw)
    return TensorRTBackend(out, device=device, precision=precision, batch_size=batch_size)


# --------------------------------------------------------------------------- what this machine has


def available_backends() -> list[dict]:
    """Which backend/precision/device combinations this machine can run, and why not.

    Returns:
        one dict per combination: ``backend``, ``precision``, ``device``, ``variant`` ("" or
        ``channels_last`` / ``cuda_graphs`` / ``compile``), ``available`` (bool), ``reason``
        (empty when available, else the problem and the fix).
    """
    import importlib.util
    import shutil

    cuda = torch.cuda.is_available()
    no_gpu = f"no CUDA GPU visible to torch {torch.__version__}: run on a GPU machine with a CUDA build of torch"
    rows: list[dict] = []

    def add(backend, precision, device, variant="", reason=""):
        rows.append({"backend": backend, "precision": precision, "device": device, "variant": variant,
                     "available": not reason, "reason": reason})

    compiler = "" if (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")) else \
        "torch.compile on CPU needs a C++ compiler: apt-get install g++"
    add("torch", "fp32", "cpu")
    add("torch", "fp32", "cpu", "channels_last")
    add("torch", "fp32", "cpu", "compile", compiler)
    add("torch", "fp16", "cpu", reason="fp16 needs a CUDA GPU: use --device cuda")
    for precision in ("fp32", "fp16"):
        for variant in ("", "channels_last", "cuda_graphs", "compile"):
            add("torch", precision, "cuda", variant, "" if cuda else no_gpu)

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
        trt = _import_tensorrt()
        trt_why = "" if cuda else no_gpu
        fp16_why = trt_why or ("" if hasattr(trt.BuilderFlag, "FP16") else
                               f"TensorRT {trt.__version__} has no BuilderFlag.FP16: pip install 'tensorrt>=10,<11'")
    except BackendUnavailable as exc:
        trt_why = fp16_why = str(exc)
    for precision in ("fp32", "fp16", "int8"):
        add("tensorrt", precision, "cuda", reason=fp16_why if precision == "fp16" else trt_why)
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
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
