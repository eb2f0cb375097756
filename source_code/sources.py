"""Video sources and the muxer that batches their frames, as DeepStream's nvstreammux does.

A ``VideoSource`` is one file opened with OpenCV; its first frame is decoded when it opens, so a
file OpenCV opens but cannot decode fails before the model loads. With ``realtime`` a source
releases frame i no earlier than i / fps after its first frame, as a camera would. The
``Muxer`` decodes in the calling thread, or each source in its own decoder thread.
"""
from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path

# FFmpeg's own log lines (e.g. "moov atom not found") would bury our one-line messages.
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")

import cv2  # noqa: E402

from labkit import annotate  # noqa: E402
from source_code.errors import EXIT_USAGE, PipelineError  # noqa: E402
from source_code.stages import Batch  # noqa: E402


WAIT_RANGE = "queue_wait"
"""The NVTX range around a thread's wait on a full or empty queue. Python's timed lock waits
(``sem_clockwait``) are not among the OS runtime calls nsys 2022.4 traces, so without it a thread
waiting on its queue would look busy; a range whose name says it waits is counted as blocked, not
work (``labkit.stats.calls.WAIT_WORDS``). Not a stage: it carries no ``items``."""


def put_until(q: queue.Queue, stop: threading.Event, item) -> None:
    """Put ``item`` on a bounded queue, waiting while it is full (in a :data:`WAIT_RANGE`), unless
    ``stop`` is set."""
    try:
        q.put_nowait(item)
        return
    except queue.Full:
        pass
    with annotate.range(WAIT_RANGE):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue


def get_until(q: queue.Queue, stop: threading.Event):
    """The next item of ``q`` (waiting in a :data:`WAIT_RANGE` while it is empty), or None once
    ``stop`` is set."""
    try:
        return q.get_nowait()
    except queue.Empty:
        pass
    with annotate.range(WAIT_RANGE):
        while not stop.is_set():
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
    return None


_TRACK_KINDS = {b"vide": "video", b"soun": "audio", b"subt": "subtitles", b"text": "text", b"sbtl": "subtitles"}


def track_kinds(path) -> set[str]:
    """The kinds of track an MP4/MOV container declares ("video", "audio"...: its ``hdlr`` boxes,
    read from the first 64 MiB), or an empty set for any other file."""
    try:
        with open(path, "rb") as f:
            head = f.read(64 << 20)
    except OSError:
        return set()
    if head[4:8] not in (b"ftyp", b"moov", b"mdat", b"free", b"wide"):
        return set()
    kinds, at = set(), head.find(b"hdlr")
    while at >= 0:
        kind = head[at + 12:at + 16]  # after version/flags and pre_defined
        if kind in _TRACK_KINDS:
            kinds.add(_TRACK_KINDS[kind])
        at = head.find(b"hdlr", at + 4)
    return kinds


class VideoSource:
    """One video file opened with OpenCV; ``read()`` returns a frame or None at the end."""

    def __init__(self, path: str, *, index: int, max_frames: int | None, realtime: bool = False):
        self.path = path
        self.index = index
        if not Path(path).is_file():
            raise PipelineError(f"input not found: {path}", EXIT_USAGE)
        self.cap = cv2.VideoCapture(path)
        if not self.cap.isOpened():
            kinds = track_kinds(path)
            if kinds and "video" not in kinds:
                raise PipelineError(f"cannot open {path}: it has no video track (only {', '.join(sorted(kinds))}"
                                    f"; an audio-only file?): pass a file with video as --input")
            raise PipelineError(f"cannot open {path}: not a readable video (damaged or truncated file?)")
        self.declared = int(self.cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        fps = float(self.cap.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if 0 < fps < 1000 else 30.0
        self.max_frames = max_frames
        self.realtime = realtime
        self.count = 0
        self.ended = False
        self.error: str | None = None
        self.t_first: int | None = None  # perf_counter_ns of the first frame's arrival (realtime)
        self._pending = self._decode()  # decoded now: an undecodable file fails before the model loads
        if self._pending is None:
            self.cap.release()
            raise PipelineError(f"{path} has no decodable frames (empty, damaged or truncated video)")
        self.height, self.width = self._pending.shape[:2]

    def _decode(self):
        try:
            ok, frame = self.cap.read()
        except cv2.error as e:  # some damaged streams raise instead of returning False
            ok, frame = False, None
            self.error = str(e).strip().splitlines()[-1]
        return frame if ok and frame is not None else None

    def expected(self) -> int | None:
        n = self.declared if self.declared > 0 else None
        if self.max_frames is not None:
            n = self.max_frames if n is None else min(n, self.max_frames)
        return n

    def arrival(self) -> int:
        """Wait until the next frame is due (``realtime``: i / fps after the first) and return
        the time it arrived, perf_counter_ns; without ``realtime``, now."""
        now = time.perf_counter_ns()
        if not self.realtime:
            return now
        if self.t_first is None:
            self.t_first = now
            return now
        due = self.t_first + round(self.count * 1e9 / self.fps)
        if due > now:
            time.sleep((due - now) / 1e9)
            return due
        return now

    def read(self):
        if self.ended or (self.max_frames is not None and self.count >= self.max_frames):
            self.ended = True
            return None
        frame, self._pending = (self._pending, None) if self._pending is not None else (self._decode(), None)
        if frame is None:
            self.ended = True
            self.close()
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

    With ``threaded`` each source is decoded by its own thread into a bounded queue; with ``pool``
    (``source_code.decode_workers.DecodePool``) by decoder processes; otherwise the muxer decodes
    in the calling thread (one ``decode`` range per batch).
    """

    def __init__(self, sources: list[VideoSource], *, batch_size: int, interval: int, threaded: bool,
                 queue_size: int, pool=None):
        self.sources = sources
        self.batch_size = batch_size
        self.interval = interval
        self.threaded = threaded
        self.next_batch = 0
        self.live = list(range(len(sources)))
        self.rr = 0
        self.pool = pool
        self.stop = pool.stop if pool is not None else threading.Event()
        if pool is not None:
            threaded = self.threaded = False  # the pool's processes are the decoder threads
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
                t0 = src.arrival()
                i = src.count
                with annotate.range("decode", batch=(i * n_src + src.index) // self.batch_size, items=1):
                    frame = src.read()
                if frame is None:
                    break
                put_until(q, self.stop, (frame, i, t0))
        except Exception as e:  # noqa: BLE001 - reported as a decode error, the stream ends
            src.error = f"{type(e).__name__}: {e}"
            src.ended = True
        finally:
            put_until(q, self.stop, None)


    def _next_frame(self, s: int):
        if self.pool is not None:
            return self.pool.next(s)
        if self.threaded:
            return get_until(self.queues[s], self.stop)
        t0 = self.sources[s].arrival()
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
        if self.pool is not None:
            self.pool.close()
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
