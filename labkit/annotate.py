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

The results file an application writes for labkit is defined here too, once: its schema marker
and version, its fields and types (``RESULTS_FIELDS``), ``write_results`` (atomic) and
``read_results`` (validating; ``ResultsError`` names the file and the field).

When :func:`enable_cuda_timing` is on and torch with CUDA is already imported, each range
also records a pair of CUDA events; their elapsed time (GPU time on the current stream
between push and pop) is resolved lazily by :func:`records`.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from labkit.errors import LabkitError

try:  # nvtx is a dependency, but annotation must never break an application.
    import nvtx as _nvtx
    from nvtx._lib import EventAttributes as _EventAttributes
    from nvtx._lib import mark as _mark
    from nvtx._lib import pop_range as _pop
    from nvtx._lib import push_range as _push
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
    "RESULTS_SCHEMA",
    "RESULTS_SCHEMA_VERSION",
    "RESULTS_FIELDS",
    "THROUGHPUT",
    "OPTIONAL_FIELDS",
    "FAILED_FIELDS",
    "ResultsError",
    "results_marker",
    "is_results_file",
    "write_results",
    "write_atomic",
    "read_results",
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


MAX_RECORDS = 100_000
"""Finished ranges :func:`records` keeps (the latest; about 15 MB): a long run opens several ranges
a frame, and keeping every one grew by gigabytes an hour. :func:`stage_summary` counts every range
(per-thread running totals), whatever the ring still holds."""
EXACT_BATCHES = 4096
"""Batches below this index are totalled one by one, so that ``stage_summary(skip_batches=...)``
can leave warm-up out exactly; later ones (and ranges without a batch) share one total per name."""
_lock = threading.Lock()
_records: collections.deque = collections.deque(maxlen=MAX_RECORDS)  # raw tuples; cuda events resolved on demand
_states: list = []  # every thread's _ThreadState, for its totals
_recording = True
_cuda_timing = False
_now = time.perf_counter_ns
_get_ident = threading.get_ident
_threads: dict[int, threading.Thread] = {}  # ident -> thread, registered at its first range
# the default domain (messages registered in it), as nvtx.push_range(message=...) uses
_DOMAIN = _nvtx.get_domain(None) if _nvtx is not None else None
_HANDLE = _DOMAIN.handle if _DOMAIN is not None else None
_local = threading.local()  # .state: this thread's _ThreadState


class _ThreadState:
    """Per thread: the NVTX event attributes by (name, colour), and finished range objects to
    reuse (so that opening a range allocates nothing once a thread is warm)."""

    __slots__ = ("attrs", "pool", "totals")

    def __init__(self):
        self.attrs: dict[tuple, tuple] = {}
        self.pool: list[_Range] = []
        # (name, batch below EXACT_BATCHES or -1) -> [ranges, ns, items]: this thread's alone, so
        # no lock and no lost update; bounded by names x EXACT_BATCHES
        self.totals: dict[tuple, list] = {}
        _threads[_get_ident()] = threading.current_thread()  # for records()
        with _lock:
            _states.append(self)


def _new_attributes(st: _ThreadState, name: str, color: str | None) -> tuple:
    """This thread's reusable NVTX event attributes for ``name``: (range with an int payload,
    range without one, its items mark); Nones without nvtx. nvtx cannot clear a payload once
    set, hence two."""
    if _DOMAIN is None:
        attrs = (None, None, None)
    else:
        rgb = color or _COLORS.get(name, "blue")
        reg = _DOMAIN.get_registered_string
        attrs = (_EventAttributes(reg(name), rgb, None, 0), _EventAttributes(reg(name), rgb, None, None),
                 _EventAttributes(reg(ITEMS_MARK), rgb, None, 0))
    st.attrs[name, color] = attrs
    return attrs


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


class _Range:
    """An open range (see :func:`range`); returned to its thread's pool when it closes."""

    __slots__ = ("st", "name", "batch", "items", "color", "t0", "cuda_start", "mark")

    def __init__(self, st: _ThreadState):
        self.st = st

    def __enter__(self) -> None:
        attrs = self.st.attrs.get((self.name, self.color))
        if attrs is None:
            attrs = _new_attributes(self.st, self.name, self.color)
        with_payload, without, self.mark = attrs
        if _HANDLE is not None:
            if self.batch is not None:
                with_payload.payload = self.batch
                _push(with_payload, _HANDLE)
            else:
                _push(without, _HANDLE)
        self.cuda_start = _cuda_events() if _cuda_timing else None
        self.t0 = _now()

    def __exit__(self, exc_type, exc, tb) -> None:
        t1 = _now()
        cuda_end = None
        if self.cuda_start is not None:
            cuda_end = sys.modules["torch"].cuda.Event(enable_timing=True)
            cuda_end.record()
        if _HANDLE is not None:
            if self.items is not None:
                self.mark.payload = int(self.items)
                _mark(self.mark, _HANDLE)
            _pop(_HANDLE)
        if _recording:
            # deque.append is atomic under the GIL: no lock on the hot path; the thread's id and
            # name are looked up when the records are read
            _records.append((self.name, self.t0, t1, _get_ident(), self.batch, self.items,
                             self.cuda_start, cuda_end))
            b = self.batch
            key = (self.name, b if b is not None and 0 <= b < EXACT_BATCHES else -1)
            tot = self.st.totals.get(key)
            if tot is None:
                tot = self.st.totals[key] = [0, 0, 0]
            tot[0] += 1
            tot[1] += t1 - self.t0
            tot[2] += self.items or 0
        self.st.pool.append(self)


def range(name: str, *, batch: int | None = None, items: int | None = None,  # noqa: A001 - public name
          color: str | None = None) -> _Range:
    """Time a block as an NVTX range named ``name`` (payload = ``batch``); use it in a ``with``
    statement, once.

    Cheap on purpose (about 1.3 us here, nsys's own calls excluded): the pipeline opens several
    ranges per frame, and nvtx's helpers cost 3-5 us a call (their attribute cache is keyed by
    payload, so it allocates for every new batch index). So the event attributes are built once
    per (thread, name, colour) and reused with the payload set in place, messages are registered
    strings, and range objects are reused from a per-thread pool.
    """
    try:
        st = _local.state
    except AttributeError:
        st = _local.state = _ThreadState()
    r = st.pool.pop() if st.pool else _Range(st)
    r.name = name
    r.batch = batch
    r.items = items
    r.color = color
    return r


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
    """The ranges finished since the last :func:`reset`, in completion order: the latest
    :data:`MAX_RECORDS` of them."""
    with _lock:
        raw = list(_records)
    out = []
    for name, t0, t1, ident, batch, items, ev0, ev1 in raw:
        th = _threads[ident]
        cuda_ms = None
        if ev0 is not None and ev1 is not None:
            ev1.synchronize()
            cuda_ms = float(ev0.elapsed_time(ev1))
        out.append(Record(name, t0, t1, th.native_id, th.name, batch, items, cuda_ms))
    return out


def stage_summary(*, skip_batches: int = 0) -> dict[str, dict]:
    """Per range name, over every range since the last :func:`reset`: count, total_ms, mean_ms,
    items, ms_per_item (and cuda_ms when timed, over the ranges :func:`records` still holds).

    Args:
        skip_batches: ranges whose batch index is below this are left out (warm-up); at most
            :data:`EXACT_BATCHES`.
    """
    if skip_batches > EXACT_BATCHES:
        raise ValueError(f"skip_batches={skip_batches}: at most {EXACT_BATCHES} warm-up batches are told apart")
    summary: dict[str, dict] = {}
    with _lock:
        states = list(_states)
    for st in states:
        for (name, batch), (count, ns, items) in list(st.totals.items()):
            if 0 <= batch < skip_batches:
                continue
            s = summary.setdefault(name, {"count": 0, "total_ms": 0.0, "items": 0, "cuda_ms": None})
            s["count"] += count
            s["total_ms"] += ns / 1e6
            s["items"] += items
    for r in records() if _cuda_timing else ():
        if r.cuda_ms is not None and not (r.batch is not None and r.batch < skip_batches):
            s = summary[r.name]
            s["cuda_ms"] = (s["cuda_ms"] or 0.0) + r.cuda_ms
    for s in summary.values():
        s["mean_ms"] = s["total_ms"] / s["count"]
        s["ms_per_item"] = s["total_ms"] / s["items"] if s["items"] else None
    return summary


def reset() -> None:
    """Forget every recorded range (and every thread's totals)."""
    with _lock:
        _records.clear()
        for st in _states:
            st.totals.clear()


# ----------------------------------------------------------------------------- results file
# The results file is the application's side of its contract with labkit (beside the range
# names): the application writes it with write_results, labkit reads it with read_results.
RESULTS_SCHEMA = "labkit-results"
"""Value of the ``schema`` field: marks a file as written by an application through this module."""
RESULTS_SCHEMA_VERSION = 2
"""Version 2 dropped ``env`` (labkit records the environment in the ledger). Version 1 files
(``"schema": 1``, no ``schema_version``) are still read. The version changes only when a reader
of the previous one would misread a file; optional fields (``OPTIONAL_FIELDS``) join without a
new version: an older reader ignores them and reads the other fields right."""

_OPT_NUM = (int, float, type(None))
THROUGHPUT = (
    "fps is steady-state throughput: timed_frames / seconds, over a window that opens when the last "
    "warm-up batch completes (or the run starts) and closes when the last batch completes, counting only "
    "frames read from their source inside that window; frames read before it and still queued when it "
    "opened (carried_frames) are finished inside it but not counted, so no work done before the window "
    "counts. A run is long enough to measure throughput only when the frames in flight (capacity_frames, "
    "what its queues hold up to the detector, or carried_frames if more) are at most 10 % of timed_frames "
    "(Little's law); otherwise too_short is true and a warning says 'too short to measure throughput'.")
"""The one definition of a results file's throughput (``fps``); readers quote it, never restate it."""
RESULTS_FIELDS: dict[str, tuple[type, ...]] = {
    "status": (str,),  # "ok" or "partial" (frames so far kept)
    "frames": (int,),  # frames processed, every stream, warm-up included
    "timed_frames": (int,),  # frames read from their source inside the timed window (THROUGHPUT)
    "warmup_frames": (int,),  # frames - timed_frames: warm-up, and frames carried into the window
    "seconds": _OPT_NUM,  # length of the timed window, s
    "fps": _OPT_NUM,  # timed_frames / seconds, frames/s: see THROUGHPUT
    "stages": (dict,),  # {stage: ms per timed frame or None}
    "stage_detail": (dict,),  # {stage: {count, total_ms, mean_ms, items, ms_per_item, cuda_ms}}
    "latency_ms": (dict,),  # {"p50": ms or None, "p99": ms or None}, decode start to the end of display
    "accuracy": (dict,),  # {"map50", "mota", "idf1", "hota": float or None, "note": str, ...}; map50 (like
    #                       MOTA/IDF1/HOTA) scores every frame's output boxes (tracks, each carrying its last
    #                       detection's score); "map50_detected" scores the detector's boxes on the
    #                       "detected_frames" it ran on
    "config": (dict,),  # the run's options, plus device_resolved, input_hw, output, ...
    "model": (dict, type(None)),  # weights, params_m, gflops_per_frame; None when no model ran (decode only)
    "output_frames": (int,),  # frames written to the output video
    "warnings": (list,),  # one line each
}
"""Fields of a finished run's results file (status "ok" or "partial") and their JSON types."""
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    # a run under torchrun (source_code/distributed.py), written by rank 0; frames, timed_frames
    # and fps are then every rank's, fps over the common measured window (first start to last end)
    "ranks": (int,),  # processes (ranks) that ran
    "per_rank": (list,),  # one dict per rank: rank, host, device, inputs, frames, timed_frames, seconds,
    #                       fps, fps_ci95, latency_ms, stages, status
    "placement": (str,),  # where the ranks ran, in words (on the CPU, sharing a GPU...): a fact, not a warning
    # the timed window (THROUGHPUT); absent from files written before they existed
    "carried_frames": (int,),  # read before the window opened, finished inside it, not counted
    "fps_ci95": (list, type(None)),  # [low, high]: bootstrap 95 % interval of fps over blocks of timed batches
    "capacity_frames": (int, type(None)),  # frames the queues hold up to the detector (Little's law's L)
    "too_short": (bool,),  # frames in flight > 10 % of timed_frames: "too short to measure throughput"
}
"""Fields that a finished run's results file may carry, checked when present."""
FAILED_FIELDS: dict[str, tuple[type, ...]] = {"status": (str,), "error": (str,), "config": (dict,)}
"""Fields of a failed run's results file (status "failed"): the one-line error and the options."""


class ResultsError(LabkitError):
    """A results file that is missing, unreadable or not of the expected schema."""


def results_marker() -> dict[str, Any]:
    """The fields that mark a results file and its version."""
    return {"schema": RESULTS_SCHEMA, "schema_version": RESULTS_SCHEMA_VERSION}


def _version(data: Any) -> int | None:
    """Schema version of a decoded results document, or None when it is not one."""
    if not isinstance(data, dict):
        return None
    if data.get("schema") == 1 and "schema_version" not in data:
        return 1
    if data.get("schema") == RESULTS_SCHEMA and isinstance(data.get("schema_version"), int):
        return data["schema_version"]
    return None


def is_results_file(path: str | os.PathLike) -> bool:
    """True when ``path`` is a JSON file that carries the results schema marker (of any version)."""
    try:
        with open(path, encoding="utf-8") as f:
            return _version(json.load(f)) is not None
    except (OSError, ValueError):
        return False


def write_results(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` (with the schema marker added) to ``path`` atomically: a temporary file in
    the same folder, renamed into place, so a reader never sees half a file."""
    doc = {**results_marker(), **data}
    write_atomic(path, json.dumps(doc, indent=2, default=str) + "\n")


def write_atomic(path: str | os.PathLike, data: bytes | str, *, overwrite: bool = True) -> None:
    """Write ``data`` (str: UTF-8) to ``path`` atomically: a temporary file in the same folder,
    moved into place, so a reader never sees half a file. With ``overwrite=False`` an existing
    ``path`` is never replaced (FileExistsError; the move is a hard link, which fails if the name
    exists). OSError is raised as met (callers word it: ``labkit.errors.output_error``)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".labkit-", suffix=".tmp", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would hide results that logs and the ledger show
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        if overwrite:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)  # fails with FileExistsError if path exists: nothing is replaced
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: check, then move
            if os.path.lexists(path):
                raise FileExistsError(17, "File exists", str(path)) from None
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def read_results(path: str | os.PathLike) -> dict:
    """Read and validate a results file; returns the decoded document.

    Raises:
        ResultsError: naming the file and the field (missing, wrong type, unknown schema).
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ResultsError(f"{path}: no results file: did the application run with --results {path}?") from None
    except (OSError, ValueError) as e:
        raise ResultsError(f"{path}: not a readable JSON results file ({e}); run the application again") from None
    version = _version(data)
    if version is None:
        raise ResultsError(f"{path}: not a results file (field 'schema' should be {RESULTS_SCHEMA!r}); "
                           "was it written by the application?")
    if version > RESULTS_SCHEMA_VERSION:
        raise ResultsError(f"{path}: results schema version {version} is newer than this labkit reads "
                           f"({RESULTS_SCHEMA_VERSION}); update labkit")
    fields = FAILED_FIELDS if data.get("status") == "failed" else {**RESULTS_FIELDS, **OPTIONAL_FIELDS}
    for name, types in fields.items():
        if name not in data and name in OPTIONAL_FIELDS:
            continue
        if name not in data:
            raise ResultsError(f"{path}: field {name!r} is missing (schema version {version})")
        value = data[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise ResultsError(f"{path}: field {name!r} should be {want}, not {type(value).__name__}")
    return data
