"""Decoder processes (``--decode-workers N``): each decodes its sources with OpenCV in its own
interpreter and hands the frames to the pipeline through a ring of frame slots in shared memory,
so the pipeline's interpreter (and its GIL) serves only the stages that launch and track.

Per source: one ``multiprocessing.shared_memory`` ring of ``slots`` frames, a queue of free slot
numbers (pipeline -> worker) and a queue of filled ones (worker -> pipeline), so each stream's
frames arrive in order. Worker w decodes the sources whose index is w modulo the workers, in turn.
The pipeline copies a frame out of its slot and frees the slot at once: a frame it holds never
changes under it (the OSD draws on it, queues keep it), and the copy costs about a tenth of the
decode. Segments are named ``labkit-decode-<pid>-...`` and unlinked by the pipeline on its way
out; a worker that dies stops the run with one line naming it.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import secrets
import threading
import time
from multiprocessing import shared_memory

import numpy as np

from source_code.errors import EXIT_FAILED, PipelineError

SHM_PREFIX = "labkit-decode-"
"""Start of every ring's /dev/shm name (then the pipeline's pid), so a leak can be found."""
POLL_S = 0.1  # how often a blocked side looks at the stop flag and at its peer's health


def _fill(src, job: dict, ring: np.ndarray, stop, parent: int) -> bool:
    """Decode ``src``'s next frame into a free slot of ``ring``; False once the source has ended."""
    while True:
        if stop.is_set() or os.getppid() != parent:  # the pipeline stopped, or died: no orphan
            raise SystemExit(0)
        try:
            slot = job["free"].get(timeout=POLL_S)
            break
        except queue.Empty:
            continue
    from labkit import annotate

    t0 = src.arrival()
    i = src.count
    with annotate.range("decode", batch=(i * job["streams"] + src.index) // job["batch_size"], items=1):
        frame = src.read()
    if frame is None:
        job["free"].put(slot)
        job["ready"].put(("end", src.count, src.error))
        return False
    if frame.shape != ring.shape[1:]:
        raise ValueError(f"{src.path}: frame {i} is {frame.shape[1]}x{frame.shape[0]}, the stream began at "
                         f"{ring.shape[2]}x{ring.shape[1]} (a stream whose size changes is not supported)")
    ring[slot] = frame
    job["ready"].put(("frame", slot, i, t0))
    return True


def _worker(jobs: list[dict], stop, parent: int) -> None:
    """One decoder process: open its sources and fill their rings in turn until each has ended."""
    from source_code.sources import VideoSource

    rings, live = {}, []
    try:
        for job in jobs:
            shm = shared_memory.SharedMemory(name=job["shm"])
            rings[job["index"]] = (shm, np.ndarray(job["shape"], np.uint8, buffer=shm.buf))
            live.append((VideoSource(job["path"], index=job["index"], max_frames=job["max_frames"],
                                     realtime=job["realtime"]), job))
        while live:
            for src, job in list(live):
                if not _fill(src, job, rings[job["index"]][1], stop, parent):
                    live.remove((src, job))
                    src.close()
    except SystemExit:
        pass
    except BaseException as e:  # noqa: BLE001 - said by the pipeline, in one line
        msg = " ".join(f"{type(e).__name__}: {e}".split())
        for job in jobs:
            with contextlib.suppress(Exception):
                job["ready"].put(("error", msg))
    finally:
        for shm, arr in rings.values():
            del arr
            with contextlib.suppress(BufferError):
                shm.close()


def decode_pool(sources, *, workers: int, batch_size: int, queue_size: int) -> "DecodePool | None":
    """The run's decoder processes (``--decode-workers``), or None for 0: they decode ahead by as many
    frames as a decoder thread's queue holds (``Muxer``)."""
    if not workers:
        return None
    return DecodePool(sources, workers=workers, slots=max(2, queue_size * batch_size) + 1, batch_size=batch_size)


class DecodePool:
    """The decoder processes of a run and their rings; ``next(s)`` is stream s's next frame.
    Started by ``decode_pool``; the ``Muxer`` given it reads from it and closes it.

    Args:
        sources: the run's ``VideoSource`` objects, opened here (their first frame read): the pool
            reopens each file in a worker, and keeps each source's ``count``/``ended``/``error``
            up to date so the results read them as with in-process decoding.
        workers: decoder processes (at most one per source: a stream is decoded in order by one).
        slots: frames per source's ring.
        batch_size: frames per batch (the batch index of each frame's ``decode`` range).
    """

    def __init__(self, sources, *, workers: int, slots: int, batch_size: int):
        self.sources = sources
        self.stop = threading.Event()  # the muxer's: set, ``next`` returns None
        self.workers = max(1, min(workers, len(sources)))
        self.slots = slots
        ctx = mp.get_context("spawn")  # never fork a process that holds torch's and CUDA's threads
        self._stop = ctx.Event()
        self.rings: list[shared_memory.SharedMemory] = []
        self.views: list[np.ndarray] = []
        self.free, self.ready = [], []
        jobs: list[list[dict]] = [[] for _ in range(self.workers)]
        try:
            for s in sources:
                shape = (slots, s.height, s.width, 3)
                shm = shared_memory.SharedMemory(create=True, size=int(np.prod(shape)),
                                                 name=f"{SHM_PREFIX}{os.getpid()}-{s.index}-{secrets.token_hex(4)}")
                self.rings.append(shm)
                self.views.append(np.ndarray(shape, np.uint8, buffer=shm.buf))
                free, ready = ctx.Queue(), ctx.Queue()
                for k in range(slots):
                    free.put(k)
                self.free.append(free)
                self.ready.append(ready)
                jobs[s.index % self.workers].append(
                    {"index": s.index, "path": s.path, "max_frames": s.max_frames, "realtime": s.realtime,
                     "streams": len(sources), "batch_size": batch_size, "shm": shm.name, "shape": shape,
                     "free": free, "ready": ready})
            self.procs = [ctx.Process(target=_worker, args=(jobs[w], self._stop, os.getpid()),
                                      name=f"decode-worker-{w}", daemon=True) for w in range(self.workers)]
            for p in self.procs:
                p.start()
        except BaseException:
            self.procs = getattr(self, "procs", [])
            self.close()
            raise
        self.owner = {s.index: self.procs[s.index % self.workers] for s in sources}

    def next(self, s: int):
        """(frame, index in its stream, arrival perf_counter_ns) of stream ``s``, or None at its end
        (or once the run stops). A worker that failed or died raises PipelineError."""
        try:
            msg = self.ready[s].get_nowait()
        except queue.Empty:
            from labkit import annotate
            from source_code.sources import WAIT_RANGE

            with annotate.range(WAIT_RANGE):  # waiting on a decoder is no work of this process
                msg = self._wait(s)
        if msg is None:
            return None
        src = self.sources[s]
        if msg[0] == "frame":
            _, slot, i, t0 = msg
            frame = self.views[s][slot].copy()
            self.free[s].put(slot)
            src.count = i + 1
            return frame, i, t0
        if msg[0] == "end":
            src.count, src.error, src.ended = msg[1], msg[2] or src.error, True
            return None
        raise PipelineError(f"decode worker failed on {src.path}: {msg[1]}", EXIT_FAILED)

    def _wait(self, s: int):
        """Stream ``s``'s next message, or None once the run stops; PipelineError if its worker died."""
        while not self.stop.is_set():
            try:
                return self.ready[s].get(timeout=POLL_S)
            except queue.Empty:
                proc = self.owner[s]
                if not proc.is_alive() and self.ready[s].empty():
                    raise PipelineError(f"decode worker {proc.name.rsplit('-', 1)[-1]} (pid {proc.pid}) exited "
                                        f"with code {proc.exitcode} while decoding {self.sources[s].path}: rerun "
                                        f"it, or run without --decode-workers", EXIT_FAILED) from None
        return None

    def close(self) -> None:
        """Stop the workers (each is joined, then terminated if it has not left) and unlink the rings."""
        self._stop.set()
        deadline = time.monotonic() + 5
        for p in self.procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
        for q in (*self.free, *self.ready):
            q.close()
            q.cancel_join_thread()  # nothing left in a queue is wanted: never block the exit on it
        self.views.clear()
        for shm in self.rings:
            with contextlib.suppress(BufferError):
                shm.close()
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()
        self.rings.clear()
