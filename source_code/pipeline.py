"""Video detection and tracking pipeline: decode -> preprocess -> infer -> postprocess -> track -> display.

Each stage is a small callable that takes a ``Batch`` and fills in its part. One runner composes
them, either synchronously (one thread, stage after stage) or queued (``queues=True``: every
stage in its own thread, joined by bounded queues). Sources are decoded in the main thread
(one source, sync) or each by its own decoder thread (``streams > 1`` or queued), and a muxer
interleaves their frames into batches, as DeepStream's nvstreammux does.

Every stage call runs inside ``labkit.annotate.range(stage, batch=i, items=n)`` (NVTX range named
after the stage, payload = batch index, item count = frames). Decoder threads emit one
``decode`` range per frame (items=1, batch = the batch that frame lands in).

``run_pipeline(config) -> dict`` returns the results document written by ``--results`` (see
source_code/README.md). Problems the user can fix raise ``PipelineError`` with a one-line
message and an exit code.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

# FFmpeg's own log lines (e.g. "moov atom not found") would bury our one-line messages.
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from labkit import annotate  # noqa: E402

STAGES = ("decode", "preprocess", "infer", "postprocess", "track", "display")
SCORE_THRESH = 0.05  # kept low so mAP sees the whole precision-recall curve; the tracker filters
MAX_DET = 100
RESULTS_SCHEMA = 1


class PipelineError(Exception):
    """A problem with the request or the input; ``str(e)`` is a one-line message naming the fix."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class PipelineConfig:
    """Everything that shapes a run (the CLI flags of detect_video.py)."""

    inputs: tuple[str, ...]
    device: str = "auto"
    batch_size: int = 1
    streams: int = 1
    queues: bool = False
    osd: bool = True
    gpu_preprocess: bool = False
    precision: str = "fp32"
    backend: str = "torch"
    interval: int = 1
    frames: int | None = None
    warmup: int = 10
    output: str | None = None
    results: str | None = None
    weights: str | None = None
    channels_last: bool = False
    cuda_graphs: bool = False
    compile: bool = False
    input_hw: tuple[int, int] | None = None
    queue_size: int = 4
    decode_only: bool = False


@dataclass
class Batch:
    """Frames travelling through the stages together, and what each stage adds."""

    index: int
    frames: list = field(default_factory=list)  # BGR uint8 (H, W, 3)
    sources: list = field(default_factory=list)  # stream index per frame
    frame_ids: list = field(default_factory=list)  # frame index within its stream
    read_ns: list = field(default_factory=list)  # perf_counter_ns when each frame's decode began
    detect: list = field(default_factory=list)  # whether the detector runs on this frame (--interval)
    tensor: object = None  # preprocessed input of the detected frames
    outputs: object = None  # raw network outputs
    dets: list = field(default_factory=list)  # per frame (K, 6) [x1,y1,x2,y2,score,cls] or None
    tracks: list = field(default_factory=list)  # per frame (K, 7) [x1,y1,x2,y2,cls,track_id,score]
    done_ns: int = 0


# ----------------------------------------------------------------------------- sources
class VideoSource:
    """One video file opened with OpenCV; ``read()`` returns a frame or None at the end."""

    def __init__(self, path: str, *, index: int, max_frames: int | None):
        self.path = path
        self.index = index
        if not Path(path).is_file():
            raise PipelineError(f"input not found: {path}", 2)
        self.cap = cv2.VideoCapture(path)
        if not self.cap.isOpened():
            raise PipelineError(f"cannot open {path}: not a readable video (damaged or truncated file?)", 1)
        self.declared = int(self.cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        fps = float(self.cap.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if 0 < fps < 1000 else 30.0
        self.max_frames = max_frames
        self.count = 0
        self.ended = False
        self.error: str | None = None

    def expected(self) -> int | None:
        n = self.declared if self.declared > 0 else None
        if self.max_frames is not None:
            n = self.max_frames if n is None else min(n, self.max_frames)
        return n

    def read(self):
        if self.ended or (self.max_frames is not None and self.count >= self.max_frames):
            self.ended = True
            return None
        try:
            ok, frame = self.cap.read()
        except cv2.error as e:  # some damaged streams raise instead of returning False
            ok, frame = False, None
            self.error = str(e).strip().splitlines()[-1]
        if not ok or frame is None:
            self.ended = True
            self.cap.release()
            return None
        self.count += 1
        return frame

    def truncated(self) -> bool:
        """True when decoding stopped well before the frame count the container declares."""
        want = self.declared if self.max_frames is None else min(self.declared, self.max_frames)
        return self.declared > 0 and self.count < want - 1

    def close(self) -> None:
        self.cap.release()


class Muxer:
    """Batches frames from several sources, round-robin, like DeepStream's stream muxer.

    With ``threaded`` each source is decoded by its own thread into a bounded queue; otherwise
    the muxer decodes in the calling thread (one ``decode`` range per batch).
    """

    def __init__(self, sources: list[VideoSource], *, batch_size: int, interval: int, threaded: bool,
                 queue_size: int):
        self.sources = sources
        self.batch_size = batch_size
        self.interval = interval
        self.threaded = threaded
        self.next_batch = 0
        self.live = list(range(len(sources)))
        self.rr = 0
        self.stop = threading.Event()
        if threaded:
            self.queues = [queue.Queue(maxsize=max(2, queue_size * batch_size)) for _ in sources]
            self.threads = [threading.Thread(target=self._decode_loop, args=(s,), name=f"decode-{s.index}", daemon=True)
                            for s in sources]
            for t in self.threads:
                t.start()

    def _decode_loop(self, src: VideoSource) -> None:
        q = self.queues[src.index]
        n_src = len(self.sources)
        try:
            while not self.stop.is_set():
                t0 = time.perf_counter_ns()
                i = src.count
                with annotate.range("decode", batch=(i * n_src + src.index) // self.batch_size, items=1):
                    frame = src.read()
                if frame is None:
                    break
                self._put(q, (frame, i, t0))
        except Exception as e:  # noqa: BLE001 - reported as a decode error, the stream ends
            src.error = f"{type(e).__name__}: {e}"
            src.ended = True
        finally:
            self._put(q, None)

    def _put(self, q: queue.Queue, item) -> None:
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _next_frame(self, s: int):
        if self.threaded:
            while not self.stop.is_set():
                try:
                    return self.queues[s].get(timeout=0.1)
                except queue.Empty:
                    continue
            return None
        t0 = time.perf_counter_ns()
        i = self.sources[s].count
        frame = self.sources[s].read()
        return None if frame is None else (frame, i, t0)

    def __call__(self) -> Batch | None:
        """Return the next batch, or None when every source has ended."""
        b = Batch(index=self.next_batch)
        while len(b.frames) < self.batch_size and self.live:
            s = self.live[self.rr % len(self.live)]
            item = self._next_frame(s)
            if item is None:
                self.live.remove(s)
                continue
            frame, i, t0 = item
            b.frames.append(frame)
            b.sources.append(s)
            b.frame_ids.append(i)
            b.read_ns.append(t0)
            b.detect.append(i % self.interval == 0)
            self.rr += 1
        if not b.frames:
            return None
        self.next_batch += 1
        return b

    def expected_batch_items(self) -> int:
        """Frames the next unthreaded decode will read (for the range's item count)."""
        left = 0
        for s in self.live:
            e = self.sources[s].expected()
            left += self.batch_size if e is None else max(0, e - self.sources[s].count)
        return max(1, min(self.batch_size, left))

    def close(self) -> None:
        self.stop.set()
        if self.threaded:
            for q in self.queues:  # unblock producers
                while True:
                    try:
                        q.get_nowait()
                    except queue.Empty:
                        break
            for t in self.threads:
                t.join(timeout=5)
        for s in self.sources:
            s.close()


# ----------------------------------------------------------------------------- stages
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
                        raise PipelineError(f"cannot write the output video {self.output} (use a .mp4 or .avi path)")
                self.writer.write(frame)
                self.written += 1
        return b

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()
            self.writer = None


# ----------------------------------------------------------------------------- runners
def _call(name: str, fn: Callable[[Batch], Batch], b: Batch) -> Batch:
    items = sum(b.detect) if name in ("preprocess", "infer") else len(b.frames)
    with annotate.range(name, batch=b.index, items=items):
        return fn(b)


def run_sync(muxer: Muxer, stages: list[tuple[str, Callable]], sink: Callable[[Batch], None]) -> None:
    """Run every stage in this thread, batch after batch."""
    while True:
        if muxer.threaded:
            b = muxer()
        else:
            with annotate.range("decode", batch=muxer.next_batch, items=muxer.expected_batch_items()):
                b = muxer()
        if b is None:
            return
        for name, fn in stages:
            b = _call(name, fn, b)
        b.done_ns = time.perf_counter_ns()
        sink(b)


def run_queued(muxer: Muxer, stages: list[tuple[str, Callable]], sink: Callable[[Batch], None], *,
               queue_size: int) -> None:
    """Run each stage in its own thread, connected by bounded queues; re-raise the first error."""
    errors: list[BaseException] = []
    stop = threading.Event()
    qs = [queue.Queue(maxsize=queue_size) for _ in range(len(stages) + 1)]

    def put(q, item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def get(q):
        while not stop.is_set():
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
        return None

    def source():
        try:
            while not stop.is_set():
                b = muxer()
                if b is None:
                    break
                put(qs[0], b)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)
            stop_all()
        put(qs[0], None)

    def worker(k: int, name: str, fn: Callable):
        try:
            while True:
                b = get(qs[k])
                if b is None:
                    break
                put(qs[k + 1], _call(name, fn, b))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            stop_all()
        put(qs[k + 1], None)

    def stop_all():
        stop.set()
        muxer.stop.set()

    threads = [threading.Thread(target=source, name="mux", daemon=True)]
    threads += [threading.Thread(target=worker, args=(k, n, f), name=n, daemon=True) for k, (n, f) in enumerate(stages)]
    for t in threads:
        t.start()
    try:
        while True:
            b = get(qs[-1])
            if b is None:
                break
            b.done_ns = time.perf_counter_ns()
            sink(b)
    finally:
        stop_all()
        for t in threads:
            t.join(timeout=10)
    if errors:
        raise errors[0]


# ----------------------------------------------------------------------------- setup and results
def resolve_device(requested: str):
    import torch

    req = (requested or "auto").lower()
    if req == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if req.startswith("cuda"):
        if not torch.cuda.is_available():
            raise PipelineError(f"--device {requested}: no CUDA GPU is visible to torch {torch.__version__}; "
                                "use --device cpu (or auto)", 3)
        return torch.device(req)
    if req == "cpu":
        return torch.device("cpu")
    raise PipelineError(f"unknown --device {requested!r}: choose cpu, cuda or auto", 2)


def default_output(first_input: str) -> Path:
    return Path(os.environ.get("LABKIT_REPORTS", "reports")) / f"{Path(first_input).stem}.tracked.mp4"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def validate(cfg: PipelineConfig) -> None:
    """Reject bad requests before any expensive work; raises PipelineError."""
    if not cfg.inputs:
        raise PipelineError("no --input given", 2)
    if cfg.batch_size < 1:
        raise PipelineError(f"--batch-size must be at least 1 (got {cfg.batch_size})", 2)
    if cfg.streams < 1:
        raise PipelineError(f"--streams must be at least 1 (got {cfg.streams})", 2)
    if cfg.interval < 1:
        raise PipelineError(f"--interval must be at least 1 (got {cfg.interval})", 2)
    if cfg.frames is not None and cfg.frames < 1:
        raise PipelineError(f"--frames must be at least 1 (got {cfg.frames})", 2)
    if cfg.warmup < 0:
        raise PipelineError(f"--warmup must be 0 or more (got {cfg.warmup})", 2)
    if cfg.input_hw is not None and (cfg.input_hw[0] % 32 or cfg.input_hw[1] % 32 or min(cfg.input_hw) < 32):
        raise PipelineError(f"--input-hw {cfg.input_hw[0]} {cfg.input_hw[1]}: both must be multiples of 32", 2)
    if len(cfg.inputs) > 1 and len(cfg.inputs) != cfg.streams:
        raise PipelineError(f"{len(cfg.inputs)} inputs but --streams {cfg.streams}: give one input (copied to every "
                            "stream) or one per stream", 2)
    for p in cfg.inputs:
        if not Path(p).exists():
            raise PipelineError(f"input not found: {p}", 2)
        if not Path(p).is_file():
            raise PipelineError(f"input is not a file: {p}", 2)
    if cfg.output:
        out = Path(cfg.output)
        for p in cfg.inputs:
            if _same_file(out, Path(p)) or out.resolve() == Path(p).resolve():
                raise PipelineError(f"--output {cfg.output} is an input video: refusing to overwrite it", 2)
        if out.suffix.lower() not in (".mp4", ".mov", ".m4v", ".avi"):
            raise PipelineError(f"--output {cfg.output}: use a .mp4 or .avi path", 2)


_NSYS_GLOBS = ("/usr/local/cuda/bin/nsys", "/usr/local/cuda-*/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
               "/opt/nvidia/nsight-systems-cli/*/bin/nsys", "/usr/lib/nsight-systems/bin/nsys")


def environment(device) -> dict:
    """Versions and hardware, gathered by the application itself."""
    import platform
    import shutil
    import subprocess
    from importlib import metadata

    import torch

    def version(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_threads": torch.get_num_threads(),
        "opencv": cv2.__version__,
        "numpy": np.__version__,
        "onnxruntime": version("onnxruntime") or version("onnxruntime-gpu"),
        "tensorrt": version("tensorrt") or version("tensorrt-cu12") or version("tensorrt_cu12"),
        "gpu": None,
        "driver": None,
        "cudnn": None,
        "nsys": None,
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    env["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if torch.cuda.is_available():
        idx = (device.index or 0) if device.type == "cuda" else 0
        env["gpu"] = torch.cuda.get_device_name(idx)
        env["cudnn"] = torch.backends.cudnn.version()
        try:
            import pynvml

            pynvml.nvmlInit()
            drv = pynvml.nvmlSystemGetDriverVersion()
            env["driver"] = drv.decode() if isinstance(drv, bytes) else drv
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - NVML is optional
            pass
    nsys = os.environ.get("LABKIT_NSYS") or os.environ.get("NSYS") or shutil.which("nsys")
    if nsys and os.path.isdir(nsys):
        nsys = os.path.join(nsys, "nsys")
    if not nsys:
        import glob

        for pattern in _NSYS_GLOBS:
            hits = sorted(glob.glob(pattern))
            if hits:
                nsys = hits[-1]
                break
    if nsys and os.path.isfile(nsys):
        try:
            out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=30)
            env["nsys"] = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            pass
    return env


def _flops(model, input_hw, count, folder: Path) -> int:
    """FLOPs per frame, cached on disk by architecture and input size: counting traces a whole
    forward pass and imports torch's compiler stack, seconds that every run would pay."""
    import hashlib

    arch = hashlib.sha1(repr([(k, tuple(v.shape)) for k, v in model.state_dict().items()]).encode()).hexdigest()[:16]
    key = f"{type(model).__name__}-{arch}-{input_hw[0]}x{input_hw[1]}"
    path = Path(folder) / "flops.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    try:
        return int(known[key])
    except (KeyError, TypeError, ValueError):
        pass
    value = int(count(model, input_hw))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"flops.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**known, key: value}))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs time
    return value


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _accuracy(cfg: PipelineConfig, gt_frames: dict | None, det_log: dict, trk_log: dict, n_frames: int,
              class_names) -> dict:
    from source_code.metrics import map50, tracking_metrics

    if gt_frames is None:
        return {"map50": None, "mota": None, "idf1": None, "hota": None,
                "note": "no ground truth: none found beside the input (<stem>.gt.csv)"}
    empty = np.zeros((0, 6))
    frames = list(range(n_frames))
    det_frames = [f for f in frames if f in det_log]
    m = map50([gt_frames.get(f, empty)[:, :5] for f in det_frames], [det_log[f] for f in det_frames],
              num_classes=len(class_names), class_names=class_names) if det_frames else {"map50": None, "per_class": {}}
    gt_list = [gt_frames.get(f, empty) for f in frames]
    trk_list = [np.concatenate([trk_log[f][:, :4], trk_log[f][:, 4:6]], 1) if f in trk_log else empty for f in frames]
    t = tracking_metrics(gt_list, trk_list, class_names=class_names)
    return {"map50": m["map50"], "mota": t["mota"], "idf1": t["idf1"], "hota": t["hota"],
            "per_class": {"map50": m["per_class"], **{k: v for k, v in t["per_class"].items()}},
            "counts": t.get("counts", {}),
            "note": f"stream 0, {n_frames} frames; map50 over the {len(det_frames)} frames the detector ran on"}


def _detector(cfg: PipelineConfig, device, input_hw):
    """Load the detector and build its inference backend: (model info for the results, backend)."""
    from source_code import backends
    from source_code.detector import DEFAULT_WEIGHTS, count_flops, load_detector

    try:
        model = load_detector(cfg.weights, device=device)
    except FileNotFoundError as e:
        raise PipelineError(str(e), 3) from None
    except (RuntimeError, KeyError, ValueError) as e:
        oom = out_of_memory_message(e, cfg)
        if oom:
            raise PipelineError(oom, 4) from None
        raise PipelineError(f"cannot load detector weights {cfg.weights or 'weights/detector.pt'}: "
                            f"{str(e).splitlines()[0]}", 3) from None
    model_info = {"weights": str(cfg.weights or DEFAULT_WEIGHTS),
                  "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 3),
                  "gflops_per_frame": round(_flops(model, input_hw, count_flops, backends.default_cache_dir()) / 1e9, 3),
                  "flops_convention": "FlopCounterMode, 2 FLOPs per multiply-accumulate, at input_hw"}
    try:
        infer_fn = backends.make_backend(model, backend=cfg.backend, precision=cfg.precision, device=device,
                                         batch_size=cfg.batch_size, channels_last=cfg.channels_last,
                                         cuda_graphs=cfg.cuda_graphs, compile=cfg.compile, input_hw=input_hw)
    except backends.BackendUnavailable as e:
        oom = out_of_memory_message(e, cfg)  # an engine build that ran out of memory
        raise PipelineError(oom or str(e), 4 if oom else 3) from None
    return model_info, infer_fn


def _ground_truth(first_input: str, warnings: list[str]):
    """(ground truth of the first input or None, its path)."""
    from source_code.scenes import gt_path_for, read_gt

    gt_file = gt_path_for(first_input)
    if gt_file.is_file():
        try:
            return read_gt(gt_file), gt_file
        except (ValueError, KeyError, OSError) as e:
            warnings.append(f"ignoring ground truth {gt_file}: {e}")
    return None, gt_file


@contextlib.contextmanager
def _profiler_range(device):
    """cudaProfilerStart/Stop around the frames on a CUDA device, so that ``nsys profile
    --capture-range=cudaProfilerApi`` records the frames and leaves the set-up out (engine
    builds, compilation, CUDA graph capture), as TensorRT's guide advises. Without a profiler
    attached both calls do nothing."""
    if device.type != "cuda":
        yield
        return
    import torch

    try:
        torch.cuda.profiler.start()
    except Exception:  # noqa: BLE001 - a profiling marker must never stop the pipeline
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # an error on its way out is the one to report
            torch.cuda.profiler.stop()


_OOM_TEXT = re.compile(r"out of memory|can't allocate memory|failed to allocate memory", re.IGNORECASE)


def out_of_memory_message(exc: BaseException, cfg: PipelineConfig) -> str | None:
    """A one-line message naming the fix when ``exc`` is an allocation failure (CUDA or host;
    torch, ONNX Runtime or TensorRT), else None."""
    import torch

    oom = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), MemoryError) if t is not None)
    text = str(exc).strip()
    if not isinstance(exc, oom) and not _OOM_TEXT.search(text):
        return None
    from source_code.detector import INPUT_HW

    h, w = cfg.input_hw or INPUT_HW
    first = text.splitlines()[0][:160] if text else type(exc).__name__
    fixes = [f"--batch-size {max(1, cfg.batch_size // 2)}"] if cfg.batch_size > 1 else []
    fixes += ["fewer --streams"] if cfg.streams > 1 else []
    fixes += [f"a smaller --input-hw than {h}x{w}"]
    on_gpu = isinstance(exc, oom[:-1]) or "cuda" in text.lower()
    where = ("; on a shared GPU, `nvidia-smi` shows what else holds its memory" if on_gpu
             else "; or free host memory (close other programs, or raise `ulimit -v`)")
    return (f"out of memory at --batch-size {cfg.batch_size}, --streams {cfg.streams}, input {h}x{w} ({first}). "
            f"Try {', '.join(fixes[:-1]) + ' or ' if len(fixes) > 1 else ''}{fixes[-1]}{where}")


def run_pipeline(cfg: PipelineConfig, *, progress: Callable[[str], None] | None = None) -> dict:
    """Run the pipeline described by ``cfg``; return the results document (see README).
    An allocation failure (a batch too large for the GPU: loading the weights, building the
    backend, or in the frame loop) becomes a PipelineError (exit code 4) naming the fix."""
    try:
        return _run_pipeline(cfg, progress=progress)
    except PipelineError:
        raise
    except Exception as e:  # noqa: BLE001 - only allocation failures are translated
        msg = out_of_memory_message(e, cfg)
        if msg is None:
            raise
        raise PipelineError(msg, 4) from e


def _run_pipeline(cfg: PipelineConfig, *, progress: Callable[[str], None] | None = None) -> dict:
    validate(cfg)
    from source_code.detector import CLASS_NAMES, INPUT_HW

    device = resolve_device(cfg.device)
    if cfg.gpu_preprocess and device.type != "cuda":
        raise PipelineError("--gpu-preprocess needs a CUDA device: drop it or run with --device cuda", 3)
    input_hw = tuple(cfg.input_hw) if cfg.input_hw else tuple(INPUT_HW)
    warnings: list[str] = []
    inputs = list(cfg.inputs) if len(cfg.inputs) > 1 else [cfg.inputs[0]] * cfg.streams
    out_path = Path(cfg.output) if cfg.output else (default_output(inputs[0]) if cfg.osd and not cfg.decode_only else None)
    if out_path is not None:
        for p in inputs:
            if _same_file(out_path, Path(p)):
                raise PipelineError(f"output {out_path} is an input video: refusing to overwrite it", 2)
        out_path.parent.mkdir(parents=True, exist_ok=True)

    sources = [VideoSource(p, index=i, max_frames=cfg.frames) for i, p in enumerate(inputs)]
    # Read one frame up front: a file OpenCV opens but cannot decode fails here, before the model loads.
    probe = cv2.VideoCapture(inputs[0])
    ok, _ = probe.read() if probe.isOpened() else (False, None)
    probe.release()
    if not ok:
        for s in sources:
            s.close()
        raise PipelineError(f"{inputs[0]} has no decodable frames (empty, damaged or truncated video)", 1)

    if cfg.decode_only:  # the same sources and decoder threads, no stage after decode
        model_info, infer_fn, gt, gt_file = None, None, None, None
    else:
        model_info, infer_fn = _detector(cfg, device, input_hw)
        gt, gt_file = _ground_truth(inputs[0], warnings)

    threaded_decode = cfg.streams > 1 or cfg.queues
    annotate.reset()  # before the decoder threads start recording
    muxer = Muxer(sources, batch_size=cfg.batch_size, interval=cfg.interval, threaded=threaded_decode,
                  queue_size=cfg.queue_size)
    display = None if cfg.decode_only else Display(osd=cfg.osd, output=out_path, fps=sources[0].fps,
                                                   class_names=CLASS_NAMES)
    stages = [] if cfg.decode_only else [
        ("preprocess", Preprocess(device=device, input_hw=input_hw, gpu=cfg.gpu_preprocess)),
        ("infer", Infer(infer_fn, device=device)),
        ("postprocess", Postprocess(input_hw=input_hw)),
        ("track", Track(len(sources))),
        ("display", display),
    ]

    frames_per_batch_est = cfg.batch_size
    warmup_batches = math.ceil(cfg.warmup / frames_per_batch_est) if cfg.warmup else 0
    total_est = sum((s.expected() or 0) for s in sources)
    if warmup_batches and total_est and warmup_batches * cfg.batch_size >= total_est:
        warnings.append(f"--warmup {cfg.warmup} covers the whole run ({total_est} frames): timing includes warm-up")
        warmup_batches = 0

    det_log: dict[int, np.ndarray] = {}
    trk_log: dict[int, np.ndarray] = {}
    state = {"frames": 0, "timed_frames": 0, "t_start": None, "t_end": None, "latency": []}

    def sink(b: Batch) -> None:
        state["frames"] += len(b.frames)
        for s, fid, d, t in zip(b.sources, b.frame_ids, b.dets, b.tracks):
            if s == 0:
                if d is not None:
                    det_log[fid] = d
                trk_log[fid] = t
        if b.index < warmup_batches:
            state["t_start"] = b.done_ns
            return
        state["timed_frames"] += len(b.frames)
        state["t_end"] = b.done_ns
        state["latency"].extend((b.done_ns - t0) / 1e6 for t0 in b.read_ns)
        if progress and b.index % 50 == 0:
            progress(f"batch {b.index}: {state['frames']} frames")

    t_run = time.perf_counter_ns()
    status = "ok"
    try:
        with _profiler_range(device):
            if cfg.queues and stages:
                run_queued(muxer, stages, sink, queue_size=cfg.queue_size)
            else:
                run_sync(muxer, stages, sink)
    except PipelineError:
        raise
    except (RuntimeError, ValueError, cv2.error, OSError, MemoryError) as e:
        oom = out_of_memory_message(e, cfg)
        if oom:  # not a partial result: the settings are too large for this machine
            raise PipelineError(oom, 4) from None
        if state["frames"] == 0:
            raise PipelineError(f"pipeline failed: {type(e).__name__}: {str(e).strip().splitlines()[0]}", 1) from None
        status = "partial"
        warnings.append(f"stopped after {state['frames']} frames: {type(e).__name__}: {str(e).strip().splitlines()[0]}")
    finally:
        muxer.close()
        if display is not None:
            display.close()
        if hasattr(infer_fn, "close"):
            infer_fn.close()

    if state["frames"] == 0:
        raise PipelineError(f"{inputs[0]} has no decodable frames (empty, damaged or truncated video)", 1)
    for s in sources:
        if s.truncated():
            status = "partial"
            warnings.append(f"{s.path}: decoding stopped at frame {s.count} of {s.declared} declared "
                            f"(damaged or truncated file){': ' + s.error if s.error else ''}; frames so far kept")
    n0 = sources[0].count
    if state["t_start"] is None:
        state["t_start"] = t_run
    seconds = (state["t_end"] - state["t_start"]) / 1e9 if state["t_end"] else None
    if seconds is None:
        warnings.append("every batch was warm-up: no timing (lower --warmup)")
    summary = annotate.stage_summary(skip_batches=warmup_batches)
    # ms per timed frame: with --interval K, infer/preprocess run on every K-th frame only, so
    # dividing by the frames they saw (stage_detail's ms_per_item) would overstate their cost.
    stage_ms = {}
    for name in STAGES:
        s = summary.get(name)
        per = state["timed_frames"] or (s["items"] if s else 0)
        stage_ms[name] = round(s["total_ms"] / per, 4) if s and per else (round(s["mean_ms"], 4) if s else None)
    accuracy = ({"map50": None, "mota": None, "idf1": None, "hota": None,
                 "note": "--decode-only: nothing detected, no accuracy"} if cfg.decode_only
                else _accuracy(cfg, gt, det_log, trk_log, n0, CLASS_NAMES))
    if gt is not None and sources[0].count < max(gt.keys(), default=-1) + 1 and cfg.frames is None and status == "ok":
        warnings.append(f"ground truth covers {max(gt.keys()) + 1} frames but {sources[0].count} were decoded")
    return {
        "schema": RESULTS_SCHEMA,
        "status": status,
        "frames": state["frames"],
        "timed_frames": state["timed_frames"],
        "warmup_frames": state["frames"] - state["timed_frames"],
        "seconds": round(seconds, 6) if seconds else None,
        "fps": round(state["timed_frames"] / seconds, 4) if seconds else None,
        "stages": stage_ms,
        "stage_detail": {k: {kk: (round(vv, 4) if isinstance(vv, float) else vv) for kk, vv in v.items()}
                         for k, v in summary.items()},
        "latency_ms": {"p50": _percentile(state["latency"], 50), "p99": _percentile(state["latency"], 99)},
        "accuracy": accuracy,
        "config": {**{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
                   "device_resolved": str(device), "input_hw": list(input_hw), "output": str(out_path) if out_path else None,
                   "backend_name": "none (decode only)" if cfg.decode_only else getattr(infer_fn, "name", cfg.backend),
                   "ground_truth": str(gt_file) if gt else None},
        "model": model_info,
        "env": environment(device),
        "output_frames": display.written if display is not None else 0,
        "warnings": warnings,
    }
