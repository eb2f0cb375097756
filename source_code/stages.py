"""The pipeline's stages: small callables that each take a ``Batch``, fill in their part and
return it (decode happens in ``source_code.sources``). One runner composes them
(``source_code.runner``), in one thread or one thread per stage; both share these objects.

``STAGES`` lists the stage names in order; they are also the NVTX range names that labkit reads.
"""
from __future__ import annotations

import contextlib
import shutil
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
    ready: object = None  # CUDA event after ``tensor`` was written (preprocess's stream); None on CPU
    done: object = None  # CUDA event after ``outputs`` were written (``backend.event``); None on CPU

    def items(self, stage: str) -> int:
        """Frames that ``stage`` works on in this batch (its NVTX range's item count)."""
        return sum(self.detect) if stage in DETECTOR_STAGES else len(self.frames)


class GpuWork:
    """A stage's CUDA stream and the CUDA-event times of its GPU work, per batch (ms); on CPU
    (``stream`` None) the same calls run the work as is (``source_code/GPU_STREAMS.md``).

    ``host_wait``: the host waits for the stage's own work of the batch before the stage
    returns (the sync runner: its host range then covers that work; one event, not the device).
    """

    def __init__(self, device, *, stream=None, host_wait: bool = False):
        import torch

        self.torch = torch
        self.device = device
        if device.type == "cuda" and stream is None:
            from source_code.backends.base import parse_device

            stream = torch.cuda.Stream(device=parse_device(device))
        self.stream = stream if device.type == "cuda" else None
        self.host_wait = host_wait
        self.last = None  # end event of the last batch's work; None on CPU
        self._pending: list = []  # (batch index, start event, end event) not read yet
        self._ms: list = []  # (batch index, GPU ms)

    @contextlib.contextmanager
    def timed(self, b: Batch, *, wait=None):
        """Run the block's GPU work on this stage's stream after ``wait`` (an event: GPU-side),
        between two timing events; ``self.last`` is the end event afterwards."""
        if self.stream is None:
            yield
            return
        cuda = self.torch.cuda
        if wait is not None:
            self.stream.wait_event(wait)  # before ``start``: waiting is not this stage's work
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        with cuda.stream(self.stream):
            start.record(self.stream)
            yield
            end.record(self.stream)
        self._pending.append((b.index, start, end))
        self.last = end
        if self.host_wait:
            end.synchronize()
        self._read(block=False)

    def _read(self, *, block: bool) -> None:
        """Turn finished event pairs into ms (``query`` does not block), so that only the
        batches still in flight hold events; ``block`` waits for them all (end of run)."""
        done = 0
        for index, start, end in self._pending:
            if not block and not end.query():
                break
            end.synchronize()
            self._ms.append((index, start.elapsed_time(end)))
            done += 1
        del self._pending[:done]

    def total_ms(self, *, skip_batches: int = 0) -> float | None:
        """GPU time of the stage's work, ms, summed over batches from ``skip_batches`` on; None on CPU."""
        if self.stream is None:
            return None
        self._read(block=True)
        return sum(ms for index, ms in self._ms if index >= skip_batches)


class PinnedBuffers:
    """Page-locked host buffers for uploads: two per (shape, dtype), used alternately, allocated
    pinned (``torch.empty(..., pin_memory=True)``) at ``capacity`` items and reused by every
    batch (a short batch uses the first rows). ``stage`` waits only for the copy out of the same
    buffer two batches ago (its event), then writes the arrays in; ``copied`` records that event
    after the upload was enqueued."""

    def __init__(self, torch, capacity: int):
        self.torch = torch
        self.capacity = max(1, int(capacity))
        self._bufs: dict = {}
        self._events: dict = {}
        self._flip: dict = {}
        self.allocations = 0

    def stage(self, arrays: list, dtype) -> tuple:
        """``(pinned view holding np.stack(arrays), key)``: host work only, before any GPU work."""
        view, key = self.reserve(tuple(arrays[0].shape), dtype, len(arrays))
        np.stack(arrays, out=view.numpy())
        return view, key

    def reserve(self, shape: tuple, dtype, n: int) -> tuple:
        """``(pinned view of n items of shape, key)`` to write into directly, once the copy out of
        the same buffer two batches ago has finished; host work only."""
        torch = self.torch
        shape = tuple(shape)
        flip = self._flip[(shape, dtype)] = self._flip.get((shape, dtype), 1) ^ 1
        key = (shape, dtype, flip)
        buf = self._bufs.get(key)
        if buf is None or buf.shape[0] < n:
            if buf is not None and key in self._events:
                self._events.pop(key).synchronize()  # the old buffer's copy is done before it is dropped
            buf = self._bufs[key] = torch.empty((max(n, self.capacity), *shape), dtype=dtype, pin_memory=True)
            self.allocations += 1
        ev = self._events.get(key)
        if ev is not None:
            ev.synchronize()  # the copy out of this buffer two batches ago has finished
        return buf[:n], key

    def copied(self, key) -> None:
        """Record, on the current stream, that the upload out of ``key``'s buffer is enqueued."""
        ev = self._events[key] = self.torch.cuda.Event()
        ev.record()


class Preprocess:
    """Resize + BGR->RGB + /255 for the frames the detector will see; CPU or GPU (pinned upload).

    Each batch is staged on the host first (``stage``: the cv2 resize, or ``np.stack`` into a
    pinned buffer and the wait for that buffer), then its GPU work is launched (``launch``: the
    upload, the GPU resize) between the stage's timing events, so ``cuda_ms`` holds no host staging;
    it is still a stream span (first event to last), which equals the host's enqueue time when the
    stage is launch-bound: kernel-busy time is in the profile (labkit's ``proj_busy_ns``).
    On CUDA the upload and resize run on this stage's stream and ``b.ready`` is recorded after
    them. Pinned buffers (``PinnedBuffers``) are reused, two per frame shape, and the copy runs
    on this stream, not the detector's: staging batch i+1 waits only for the copy out of the same
    buffer two batches ago, and the copy itself can overlap the forward pass of batch i (queued runner).
    """

    def __init__(self, *, device, input_hw: tuple[int, int], gpu: bool, channels_last: bool = False,
                 host_wait: bool = False, batch_size: int = 1):
        import torch

        from source_code.detector import preprocess_frames, preprocess_frames_torch

        self.torch = torch
        self.device = device
        self.input_hw = input_hw
        self.gpu = gpu
        self.channels_last = channels_last
        self.work = GpuWork(device, host_wait=host_wait)
        self._cpu = preprocess_frames
        self._gpu = preprocess_frames_torch
        self.pinned = PinnedBuffers(torch, batch_size) if device.type == "cuda" else None

    def stage(self, frames: list) -> list:
        """Host work of a batch, before any GPU work: ``[(indices, host data, buffer key)]``, one
        group per frame size (GPU resize) or one group of resized frames (CPU resize)."""
        if not self.gpu:
            if self.pinned is None:  # the cv2 resize, on the host
                return [(range(len(frames)), self.torch.from_numpy(self._cpu(frames, self.input_hw)), None)]
            # straight into the pinned buffer: no float batch made and then copied (95 MB per 32 frames at 384x640)
            view, key = self.pinned.reserve((3, *self.input_hw), self.torch.float32, len(frames))
            self._cpu(frames, self.input_hw, out=view.numpy())
            return [(range(len(frames)), view, key)]
        groups: dict = {}
        for i, f in enumerate(frames):
            groups.setdefault(f.shape, []).append(i)
        out = []
        for idx in groups.values():
            part = [frames[i] for i in idx]
            if isinstance(part[0], self.torch.Tensor):  # decoded on the GPU (--decode nvdec): nothing to upload
                out.append((idx, self.torch.stack(part), None))
            elif self.pinned is None:  # the same path with nothing to upload (tests, CPU)
                out.append((idx, self.torch.from_numpy(np.stack(part)), None))
            else:
                view, key = self.pinned.stage(part, self.torch.uint8)
                out.append((idx, view, key))
        return out

    def launch(self, staged: list):
        """GPU work of a staged batch (upload, GPU resize) on the current stream: the input tensor."""
        torch = self.torch
        parts, n = {}, 0
        for idx, host, key in staged:
            x = host.to(self.device, non_blocking=True) if key is not None else host
            if key is not None:
                self.pinned.copied(key)
            if self.gpu:
                x = self._gpu(x, self.input_hw, channels_last=self.channels_last)
            for j, i in enumerate(idx):
                parts[i] = x[j:j + 1]
            n += len(idx)
            if len(staged) == 1:
                return x
        x = torch.cat([parts[i] for i in range(n)])
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        return x.contiguous(memory_format=fmt)  # cat follows its inputs' layout; make it the one asked for

    def __call__(self, b: Batch) -> Batch:
        frames = [f for f, d in zip(b.frames, b.detect) if d]
        b.ready = None
        if not frames:
            b.tensor = None
            return b
        staged = self.stage(frames)  # host work first: it is not this stage's GPU time
        with self.work.timed(b):
            b.tensor = self.launch(staged)
        b.ready = self.work.last
        return b


class Infer:
    """Run the inference backend on the preprocessed batch: on the backend's stream after
    ``b.ready``, no host wait (unless ``host_wait``); ``b.done`` is the backend's event."""

    def __init__(self, backend: Callable, *, device, host_wait: bool = False):
        self.backend = backend
        self.device = device
        self.work = GpuWork(device, stream=getattr(backend, "stream", None), host_wait=host_wait)

    def __call__(self, b: Batch) -> Batch:
        b.done = None
        if b.tensor is None:
            b.outputs = None
            return b
        with self.work.timed(b, wait=b.ready):
            if self.work.stream is not None:
                b.tensor.record_stream(self.work.stream)  # written on preprocess's stream, read on ours
            b.outputs = self.backend(b.tensor, ready=b.ready)
        b.done = getattr(self.backend, "event", None) or self.work.last
        return b


class Postprocess:
    """Peak extraction (3x3 max-pool NMS, top-k) and mapping of boxes back to frame pixels.

    On CUDA the decode runs on this stage's stream after ``b.done`` (a GPU-side wait); its copy
    of the detections to the host then waits for exactly this batch's forward pass. The stage's
    timing events enclose the GPU work only (the peak extraction and the copy): the end event is
    recorded before the host waits for the copy and filters the rows in NumPy, so ``cuda_ms`` is
    no host time.
    """

    def __init__(self, *, input_hw: tuple[int, int], device=None):
        import torch

        from source_code.detector import decode_device, filter_detections, scale_boxes

        self.input_hw = input_hw
        self.work = GpuWork(device if device is not None else torch.device("cpu"))
        self._decode = decode_device
        self._filter = filter_detections
        self._scale = scale_boxes

    def __call__(self, b: Batch) -> Batch:
        b.dets = [None] * len(b.frames)
        b.tensor = None
        if b.outputs is None:
            return b
        with self.work.timed(b, wait=b.done):
            if self.work.stream is not None:
                for o in b.outputs:
                    o.record_stream(self.work.stream)  # written on the backend's stream, read on ours
            det = self._decode(b.outputs, max_det=MAX_DET)
            # the copy to the host is GPU work of this stage; waiting for it and filtering are not
            host = det.to("cpu", non_blocking=True) if det.is_cuda else det
        if self.work.last is not None:
            self.work.last.synchronize()  # the copy has landed: the end event is recorded before this wait
        per_image = self._filter(host.numpy(), score_thresh=SCORE_THRESH)
        b.outputs = None
        k = 0
        for i, d in enumerate(b.detect):
            if d:
                b.dets[i] = self._scale(per_image[k], self.input_hw, b.frames[i].shape[:2])
                k += 1
        return b


def stage_cuda_ms(stages, *, skip_batches: int = 0) -> dict[str, float]:
    """Stream span of each stage that launched GPU work (CUDA events around its launches), ms,
    batches from ``skip_batches`` on: ``{stage name: total ms}``; empty on CPU. A span, not kernel-busy
    time: where the host cannot keep the GPU fed it equals the launching time (the profile's
    ``proj_busy_ns`` is the busy time). ``stages`` as the runners take them."""
    out = {}
    for name, fn in stages:
        work = getattr(fn, "work", None)
        ms = work.total_ms(skip_batches=skip_batches) if isinstance(work, GpuWork) else None
        if ms is not None:
            out[name] = ms
    return out


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
        self.short: str | None = None  # set by close(): the output holds fewer frames than were written

    def draw(self, frame: np.ndarray, tracks: np.ndarray) -> None:
        scale = max(0.4, frame.shape[0] / 1200)
        for x1, y1, x2, y2, cls, tid, _ in tracks:
            color = _PALETTE[int(tid) % len(_PALETTE)]
            cv2.rectangle(frame, (int(x1), int(y1)), (int(x2), int(y2)), color, 2)
            label = f"{int(tid)} {self.class_names[int(cls)] if int(cls) < len(self.class_names) else int(cls)}"
            cv2.putText(frame, label, (int(x1), max(10, int(y1) - 4)), cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1,
                        cv2.LINE_AA)

    def __call__(self, b: Batch) -> Batch:
        for i, (frame, s, tracks) in enumerate(zip(b.frames, b.sources, b.tracks)):
            if (self.osd or (self.output is not None and s == 0)) and not isinstance(frame, np.ndarray):
                frame = b.frames[i] = frame.cpu().numpy()  # decoded on the GPU: to the host to draw or write
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

    def close(self) -> str | None:
        """Release the writer; the line saying the output holds fewer frames than were written (OpenCV's
        writer reports no write error: a disk that fills after the output was opened leaves a short or
        unreadable video behind), or None."""
        if self.writer is None:
            return None
        self.writer.release()
        self.writer = None
        cap = cv2.VideoCapture(str(self.output))
        kept = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if cap.isOpened() else 0
        cap.release()
        if kept >= self.written:
            return None
        free = shutil.disk_usage(self.output.parent).free / 2**20
        self.short = (f"the output video {self.output} holds {kept} of the {self.written} frames written "
                      f"({free:.0f} MiB free on its disk: did it fill?); free space and run again")
        return self.short
