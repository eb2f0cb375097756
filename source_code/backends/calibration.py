"""INT8 calibration data: the settings that key it, and frames of generated scenes to calibrate on.

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

