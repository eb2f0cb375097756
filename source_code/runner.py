"""The runners: compose the stages over the muxer's batches, in this thread (``run_sync``) or
one thread per stage joined by bounded queues (``run_queued``). Both call every stage through
``call_stage`` and hand each finished batch, stamped with ``done_ns``, to a sink. On CUDA every
thread that runs stages first makes the run's device its current device (``use_device``).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable

from labkit import annotate
from source_code.sources import Muxer, get_until, put_until
from source_code.stages import Batch

Stages = list[tuple[str, Callable[[Batch], Batch]]]


def call_stage(name: str, fn: Callable[[Batch], Batch], b: Batch) -> Batch:
    """Run one stage on one batch inside its NVTX range (payload = batch index, items = frames
    the stage works on): every stage call of both runners goes through here."""
    with annotate.range(name, batch=b.index, items=b.items(name)):
        return fn(b)


def use_device(device):
    """Make ``device`` (``cuda``, ``cuda:N``) this thread's current CUDA device and return it with
    its index (a bare ``cuda`` is this thread's current device); CPU or None: nothing, returned as is.

    A new thread starts on cuda:0, so with ``cuda:N`` every stage thread must say so first:
    work that a stage or a library launches on "the current device" would otherwise land on 0."""
    if device is None or device.type != "cuda":
        return device
    import torch

    from source_code.backends.base import parse_device

    device = parse_device(device)
    torch.cuda.set_device(device)
    return device


def frames_held(*, batch: int, queue_size: int, streams: int = 1, queued: bool, threaded: bool,
                upto: int = 2) -> int:
    """Frames a run holds between reading a frame and the end of the detector when the detector
    is the slowest stage, as its queues fill ahead of it (Little's law's L): with decoder threads,
    per source its queue (``Muxer``: max(2, queue_size x batch)) plus the frame its blocked decoder
    holds; the batch being assembled; queued, also the queue before each of the ``upto`` stages up
    to ``infer`` (``queue_size`` batches each) and the batch in each of those stages' hands."""
    held = batch
    if threaded:
        held += streams * (max(2, queue_size * batch) + 1)
    if queued:
        held += batch * upto * (queue_size + 1)
    return held


def capacity_frames(muxer: Muxer, stage_names: list[str], *, queued: bool, queue_size: int) -> int:
    """:func:`frames_held` of this muxer and these stages."""
    upto = stage_names.index("infer") + 1 if "infer" in stage_names else len(stage_names)
    held = frames_held(batch=muxer.batch_size, queue_size=queue_size, queued=queued and bool(stage_names),
                       threaded=False, upto=upto)
    if muxer.threaded:
        held += sum(q.maxsize + 1 for q in muxer.queues)
    if getattr(muxer, "pool", None) is not None:  # decoded ahead into the rings
        held += muxer.pool.slots * len(muxer.sources)
    return held


def _tell_capacity(sink, frames: int) -> None:
    if hasattr(sink, "capacity_frames"):
        sink.capacity_frames = frames


def run_sync(muxer: Muxer, stages: Stages, sink: Callable[[Batch], None], *, device=None) -> None:
    """Run every stage in this thread, batch after batch."""
    use_device(device)
    _tell_capacity(sink, capacity_frames(muxer, [n for n, _ in stages], queued=False, queue_size=0))
    while True:
        if muxer.threaded or getattr(muxer, "pool", None) is not None:  # decoded elsewhere: no decode range here
            b = muxer()
        else:
            with annotate.range("decode", batch=muxer.next_batch, items=muxer.expected_batch_items()):
                b = muxer()
        if b is None:
            return
        for name, fn in stages:
            b = call_stage(name, fn, b)
        b.done_ns = time.perf_counter_ns()
        sink(b)


def run_queued(muxer: Muxer, stages: Stages, sink: Callable[[Batch], None], *,
               queue_size: int, device=None) -> None:
    """Run each stage in its own thread, connected by bounded queues; re-raise the first error."""
    device = use_device(device)  # resolved here: a bare "cuda" means this thread's device, not 0
    _tell_capacity(sink, capacity_frames(muxer, [n for n, _ in stages], queued=True, queue_size=queue_size))
    errors: list[BaseException] = []
    stop = threading.Event()
    qs = [queue.Queue(maxsize=queue_size) for _ in range(len(stages) + 1)]

    def put(q, item):
        put_until(q, stop, item)

    def get(q):
        return get_until(q, stop)

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
            use_device(device)
            while True:
                b = get(qs[k])
                if b is None:
                    break
                put(qs[k + 1], call_stage(name, fn, b))
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
