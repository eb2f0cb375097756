"""INT8 calibration and quantization: the settings that key it, frames to calibrate on, the QDQ recipe.

The calibration frames are frames of clips made as the lab's clips are (the same scene
generator, 1280x720, the same codec, read back with OpenCV), from seeds the lab never scores.

The scene seeds (9101-9104) are far from the evaluation seeds (small integers) and the
training seeds (>= 100000), so calibration never sees a held-out clip.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

# Changes whenever quantize_qdq quantizes differently, so cached INT8 models are redone.
QUANT_RECIPE = "qdq-v3"  # v3: TensorRT target keeps biases float (QuantizeBias False)
# What each target runs (see quantize_qdq): ONNX Runtime's CPU kernels, or TensorRT's explicit quantization.
TARGETS = ("cpu", "tensorrt")


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
    target: str = "cpu"  # cpu (ONNX Runtime's integer kernels) | tensorrt (symmetric INT8, explicit quantization)

    def key(self) -> str:
        blob = json.dumps({**asdict(self), "recipe": QUANT_RECIPE}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]



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
    if not video.exists():  # make_video writes under a temporary name and renames, ground truth first
        make_video(video, seconds=seconds, config=SceneConfig(seed=seed))
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



def quantize_qdq(src: str | os.PathLike, out: str | os.PathLike, *, calibration: CalibrationSettings,
                 input_hw: Sequence[int], workdir: str | os.PathLike | None = None) -> Path:
    """Quantize the FP32 ONNX model ``src`` to a QDQ INT8 model at ``out``, following ONNX Runtime's recipe.

    1. ``quant_pre_process`` (ONNX shape inference and ORT's graph optimizations; the symbolic
       pass is skipped: H and W are static and it stops at Resize).
    2. ``quantize_static`` in QDQ format with INT8 weights per output channel, calibrated on
       ``calibration``'s scene frames (``SceneCalibrationReader``).

    ``target="cpu"``: activations uint8 with a zero point (U8S8), every Conv, Add and Resize
    quantized. Each Relu after a Conv is removed and its range folded into the Conv's output
    scale, so ONNX Runtime fuses DequantizeLinear -> Conv -> QuantizeLinear into one
    ``QLinearConv`` (and Add into ``QLinearAdd``; Resize runs on the uint8 tensor). Measured on
    ONNX Runtime 1.32 (x86-64, avx512_vnni): with symmetric int8 activations (S8S8) the Relu
    stays as a float op between Q/DQ pairs and 13 of 22 Conv ran as float ``Conv``; with U8S8
    all 22 run as ``QLinearConv``.
    ``target="tensorrt"``: int8 activations and weights, both symmetric (zero point 0), the only
    form TensorRT's explicit quantization accepts; biases stay float (``QuantizeBias: False``:
    ``quantize_static`` would otherwise store each Conv bias as INT32 behind a DequantizeLinear,
    which TensorRT's ONNX parser refuses); the three output heads stay float (their logits feed a
    sigmoid and a threshold). ONNX Runtime's CUDA provider takes this recipe too
    (``ort.calibration_target``): symmetric INT8 Q/DQ is what its GPU kernels and TensorRT fuse.
    """
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    if calibration.method not in methods:
        raise ValueError(f"unknown calibration method {calibration.method!r}: choose one of {', '.join(methods)}")
    if calibration.target not in TARGETS:
        raise ValueError(f"unknown quantization target {calibration.target!r}: choose one of {', '.join(TARGETS)}")
    out = Path(out)
    pre = out.with_name(f".{out.stem}.{os.getpid()}.pre.onnx")
    try:
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        proto = onnx.load(str(pre))
        input_name = proto.graph.input[0].name
        reader = SceneCalibrationReader(calibration, input_name=input_name, input_hw=input_hw, workdir=workdir)
        if calibration.target == "cpu":
            kwargs = dict(activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                          op_types_to_quantize=["Conv", "Add", "Resize", "Relu"], nodes_to_exclude=[],
                          extra_options={"WeightSymmetric": True})
        else:
            outputs = {o.name for o in proto.graph.output}
            kwargs = dict(activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                          nodes_to_exclude=[n.name for n in proto.graph.node if set(n.output) & outputs],
                          extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                         "QuantizeBias": False})
        quantize_static(str(pre), str(out), reader, quant_format=QuantFormat.QDQ,
                        per_channel=calibration.per_channel, calibrate_method=methods[calibration.method], **kwargs)
    finally:
        pre.unlink(missing_ok=True)
    return out
