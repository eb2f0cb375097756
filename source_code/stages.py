"""The pipeline's stages: small callables that each take a ``Batch``, fill in their part and
return it (decode happens in ``source_code.sources``). One runner composes them
(``source_code.runner``), in one thread or one thread per stage; both share these objects.

``STAGES`` lists the stage names in order; they are also the NVTX range names that labkit reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import cv2
import numpy as np

from source_code.errors import PipelineError

STAGES = ("decode", "preprocess", "infer", "postprocess", "track", "display")
"""Stage names in pipeline order; each is an NVTX range name (``labkit.annotate.range``)."""
SCORE_THRESH = 0.05  # kept low so mAP sees the whole precision-recall curve; the tracker filters
MAX_DET = 100
DETECTOR_STAGES = ("preprocess", "infer")
"""Stages that see only the frames the detector runs on (``--interval``)."""


@dataclass
class Batch:
    """Frames travelling through the stages together, and what each stage adds."""

    index: int
    frames: list = field(default_factory=list)  # BGR uint8 (H, W, 3)
    sources: list = field(default_factory=list)  # stream index per frame
    frame_ids: list = field(default_factory=list)  # frame index within its stream
    read_ns: list = field(default_factory=list)  # perf_counter_ns when each frame arrived (decode began)
    detect: list = field(default_factory=list)  # whether the detector runs on this frame (--interval)
    tensor: object = None  # preprocessed input of the detected frames
    outputs: object = None  # raw network outputs
    dets: list = field(default_factory=list)  # per frame (K, 6) [x1,y1,x2,y2,score,cls] or None
    tracks: list = field(default_factory=list)  # per frame (K, 7) [x1,y1,x2,y2,cls,track_id,score]
    done_ns: int = 0

    def items(self, stage: str) -> int:
        """Frames that ``stage`` works on in this batch (its NVTX range's item count)."""
        return sum(self.detect) if stage in DETECTOR_STAGES else len(self.frames)


class Preprocess:
    """Resize + BGR->RGB + /255 for the frames the detector will see; CPU or GPU (pinned upload)."""

    def __init__(self, *, device, input_hw: tuple[int, int], gpu: bool):
        import torch

        from source_code.detector import preprocess_frames, preprocess_frames_torch

        self.torch = torch
        self.device = device
        self.input_hw = input_hw
        self.gpu = gpu
        self._cpu = preprocess_frames
        self._gpu = preprocess_frames_torch
        self._pinned: dict = {}
        self._events: dict = {}
        self._flip = 0

    def _upload(self, frames: list) -> "object":
        torch = self.torch
        shape = (len(frames), *frames[0].shape)
        key = (shape, self._flip)
        self._flip ^= 1  # two pinned buffers, used alternately
        buf = self._pinned.get(key)
        if buf is None:
            buf = self._pinned[key] = torch.empty(shape, dtype=torch.uint8).pin_memory()
        ev = self._events.get(key)
        if ev is not None:
            ev.synchronize()  # the previous copy out of this buffer has finished
        np.stack(frames, out=buf.numpy())
        dev = buf.to(self.device, non_blocking=True)
        ev = self._events[key] = torch.cuda.Event()
        ev.record()
        return dev

    def __call__(self, b: Batch) -> Batch:
        frames = [f for f, d in zip(b.frames, b.detect) if d]
        if not frames:
            b.tensor = None
            return b
        if self.gpu:
            groups: dict = {}
            for i, f in enumerate(frames):
                groups.setdefault(f.shape, []).append(i)
            if len(groups) == 1:  # the usual case: one upload, one resize for the whole batch
                b.tensor = self._gpu(self._upload(frames), self.input_hw)
                return b
            parts = [None] * len(frames)
            for idx in groups.values():
                x = self._gpu(self._upload([frames[i] for i in idx]), self.input_hw)
                for j, i in enumerate(idx):
                    parts[i] = x[j:j + 1]
            b.tensor = parts[0] if len(parts) == 1 else self.torch.cat(parts)
        else:
            x = self.torch.from_numpy(self._cpu(frames, self.input_hw))
            b.tensor = x.to(self.device, non_blocking=True) if self.device.type == "cuda" else x
        return b


class Infer:
    """Run the inference backend on the preprocessed batch."""

    def __init__(self, backend: Callable, *, device):
        self.backend = backend
        self.device = device

    def __call__(self, b: Batch) -> Batch:
        if b.tensor is None:
            b.outputs = None
            return b
        b.outputs = self.backend(b.tensor)
        if self.device.type == "cuda":
            # so that the infer range covers the GPU work, not just the launches
            import torch
            torch.cuda.synchronize(self.device)
        return b


class Postprocess:
    """Peak extraction (3x3 max-pool NMS, top-k) and mapping of boxes back to frame pixels."""

    def __init__(self, *, input_hw: tuple[int, int]):
        from source_code.detector import decode, scale_boxes

        self.input_hw = input_hw
        self._decode = decode
        self._scale = scale_boxes

    def __call__(self, b: Batch) -> Batch:
        b.dets = [None] * len(b.frames)
        b.tensor = None
        if b.outputs is None:
            return b
        per_image = self._decode(b.outputs, score_thresh=SCORE_THRESH, max_det=MAX_DET)
        b.outputs = None
        k = 0
        for i, d in enumerate(b.detect):
            if d:
                b.dets[i] = self._scale(per_image[k], self.input_hw, b.frames[i].shape[:2])
                k += 1
        return b


class Track:
    """One SORT-like tracker per stream: update on detected frames, predict in between."""

    def __init__(self, n_streams: int):
        from source_code.tracker import Tracker

        self.trackers = [Tracker() for _ in range(n_streams)]

    def __call__(self, b: Batch) -> Batch:
        b.tracks = []
        for s, d in zip(b.sources, b.dets):
            t = self.trackers[s]
            b.tracks.append(t.update(d) if d is not None else t.predict())
        return b


_PALETTE = [tuple(int(c) for c in cv2.cvtColor(np.uint8([[[h, 220, 255]]]), cv2.COLOR_HSV2BGR)[0, 0])
            for h in range(0, 180, 7)]


class Display:
    """Draw tracks (OSD) and write stream 0 to the output video."""

    def __init__(self, *, osd: bool, output: Path | None, fps: float, class_names):
        self.osd = osd
        self.output = output
        self.fps = fps
        self.class_names = class_names
        self.writer = None
        self.written = 0

    def draw(self, frame: np.ndarray, tracks: np.ndarray) -> None:
        scale = max(0.4, frame.shape[0] / 1200)
        for x1, y1, x2, y2, cls, tid, _ in tracks:
            color = _PALETTE[int(tid) % len(_PALETTE)]
            cv2.rectangle(frame, (int(x1), int(y1)), (int(x2), int(y2)), color, 2)
            label = f"{int(tid)} {self.class_names[int(cls)] if int(cls) < len(self.class_names) else int(cls)}"
            cv2.putText(frame, label, (int(x1), max(10, int(y1) - 4)), cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1,
                        cv2.LINE_AA)

    def __call__(self, b: Batch) -> Batch:
        for frame, s, tracks in zip(b.frames, b.sources, b.tracks):
            if self.osd:
                self.draw(frame, tracks)
            if self.output is not None and s == 0:
                if self.writer is None:
                    h, w = frame.shape[:2]
                    fourcc = cv2.VideoWriter_fourcc(*("mp4v" if self.output.suffix.lower() in (".mp4", ".mov", ".m4v")
                                                      else "MJPG"))
                    self.writer = cv2.VideoWriter(str(self.output), fourcc, self.fps, (w, h))
                    if not self.writer.isOpened():
                        raise PipelineError(self._cannot_write(w, h))
                self.writer.write(frame)
                self.written += 1
        return b

    def _cannot_write(self, w: int, h: int) -> str:
        """Why OpenCV could not open the writer, as far as we can tell, and the fix."""
        if min(w, h) < 2 and self.output.suffix.lower() != ".avi":
            return (f"cannot write the output video {self.output}: the mp4 encoder refuses {w}x{h} frames; "
                    "use an .avi --output, or --no-osd without --output")
        return (f"cannot write the output video {self.output}: OpenCV could not open a writer for {w}x{h} frames "
                "(its FFmpeg backend may lack the codec); try an .avi --output")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()
            self.writer = None
