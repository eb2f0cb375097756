"""Light annotation API for applications: NVTX ranges plus in-process timings.

This is the only part of labkit an application imports. It pulls in neither pandas nor
matplotlib, so annotating a program costs nothing at import time.

Each range is emitted as a real NVTX push/pop range (so Nsight Systems sees it) and is
also timed in-process with ``time.perf_counter_ns``, so a run without nsys still yields a
stage table. Conventions that labkit's report analysis relies on:

- default NVTX domain; the range message is the stage name;
- the range's int64 payload is the batch index, when one is given;
- when an item count is given, a mark with message ``"items"`` and payload = count is
  emitted on the same thread just before the range is popped (as CV-CUDA's
  ``pop_range(total_items=...)``), so nsys-side analysis recovers per-item times.

Usage::

    from labkit import annotate
    with annotate.range("infer", batch=i, items=len(frames)):
        ...
    @annotate.ranged("decode")
    def decode(): ...

When :func:`enable_cuda_timing` is on and torch with CUDA is already imported, each range
also records a pair of CUDA events; their elapsed time (GPU time on the current stream
between push and pop) is resolved lazily by :func:`records`.
"""
from __future__ import annotations

import functools
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

try:  # nvtx is a dependency, but annotation must never break an application.
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - exercised only where nvtx is absent
    _nvtx = None

__all__ = [
    "Record",
    "range",
    "ranged",
    "mark",
    "records",
    "stage_summary",
    "reset",
    "enable_cuda_timing",
    "enable_recording",
    "ITEMS_MARK",
]

ITEMS_MARK = "items"
"""Message of the mark that carries a range's item count in its payload."""

_COLORS = {
    "decode": "green",
    "preprocess": "yellow",
    "infer": "red",
    "postprocess": "orange",
    "track": "purple",
    "display": "blue",
}


@dataclass(frozen=True)
class Record:
    """One finished range, timed in-process.

    ``cuda_ms`` is GPU time between push and pop on the current CUDA stream, or None.
    """

    name: str
    start_ns: int
    end_ns: int
    thread_id: int
    thread_name: str
    batch: int | None
    items: int | None
    cuda_ms: float | None = None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


_lock = threading.Lock()
_records: list[tuple] = []  # raw tuples; cuda events resolved on demand
_recording = True
_cuda_timing = False


def enable_recording(on: bool = True) -> None:
    """Turn in-process recording on or off (NVTX ranges are always emitted)."""
    global _recording
    _recording = bool(on)


def enable_cuda_timing(on: bool = True) -> None:
    """Also record CUDA-event times per range when torch with CUDA is in use."""
    global _cuda_timing
    _cuda_timing = bool(on)


def _cuda_events():
    torch = sys.modules.get("torch")  # never import torch ourselves: it is heavy
    if not _cuda_timing or torch is None or not torch.cuda.is_available():
        return None
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    return start


@contextmanager
def range(name: str, *, batch: int | None = None, items: int | None = None,
          color: str | None = None) -> Iterator[None]:
    """Time a block as an NVTX range named ``name`` (payload = ``batch``)."""
    color = color or _COLORS.get(name, "blue")
    if _nvtx is not None:
        _nvtx.push_range(message=name, color=color, payload=batch)
    cuda_start = _cuda_events()
    t0 = time.perf_counter_ns()
    try:
        yield
    finally:
        t1 = time.perf_counter_ns()
        cuda_end = None
        if cuda_start is not None:
            cuda_end = sys.modules["torch"].cuda.Event(enable_timing=True)
            cuda_end.record()
        if _nvtx is not None:
            if items is not None:
                _nvtx.mark(message=ITEMS_MARK, color=color, payload=int(items))
            _nvtx.pop_range()
        if _recording:
            th = threading.current_thread()
            with _lock:
                _records.append((name, t0, t1, th.native_id, th.name, batch, items, cuda_start, cuda_end))


def ranged(name: str | None = None, **kwargs) -> Callable:
    """Decorator form of :func:`range`; the range is named after the function by default."""

    def wrap(fn: Callable) -> Callable:
        label = name or fn.__name__

        @functools.wraps(fn)
        def inner(*args, **kw):
            with range(label, **kwargs):
                return fn(*args, **kw)

        return inner

    return wrap


def mark(name: str, *, payload: int | None = None, color: str = "white") -> None:
    """Emit an instantaneous NVTX mark."""
    if _nvtx is not None:
        _nvtx.mark(message=name, color=color, payload=payload)


def records() -> list[Record]:
    """All ranges finished since the last :func:`reset`, in completion order."""
    with _lock:
        raw = list(_records)
    out = []
    for name, t0, t1, tid, tname, batch, items, ev0, ev1 in raw:
        cuda_ms = None
        if ev0 is not None and ev1 is not None:
            ev1.synchronize()
            cuda_ms = float(ev0.elapsed_time(ev1))
        out.append(Record(name, t0, t1, tid, tname, batch, items, cuda_ms))
    return out


def stage_summary(*, skip_batches: int = 0) -> dict[str, dict]:
    """Per range name: count, total_ms, mean_ms, items, ms_per_item (and cuda_ms when timed).

    Args:
        skip_batches: ranges whose batch index is below this are left out (warm-up).
    """
    summary: dict[str, dict] = {}
    for r in records():
        if r.batch is not None and r.batch < skip_batches:
            continue
        s = summary.setdefault(r.name, {"count": 0, "total_ms": 0.0, "items": 0, "cuda_ms": None})
        s["count"] += 1
        s["total_ms"] += r.duration_ns / 1e6
        s["items"] += r.items or 0
        if r.cuda_ms is not None:
            s["cuda_ms"] = (s["cuda_ms"] or 0.0) + r.cuda_ms
    for s in summary.values():
        s["mean_ms"] = s["total_ms"] / s["count"]
        s["ms_per_item"] = s["total_ms"] / s["items"] if s["items"] else None
    return summary


def reset() -> None:
    """Forget every recorded range."""
    with _lock:
        _records.clear()
