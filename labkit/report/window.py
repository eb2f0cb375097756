"""One home for time windows: restrict a Report to a span of time or to an NVTX range.

``restrict(report, window=(start_ns, end_ns))`` or ``restrict(report, within="name")`` returns a
new :class:`labkit.report.Report` holding only the events of that span, so every summary and
analysis works on it unchanged; ``@windowed`` gives any function that takes a Report first the
keyword-only ``window=None, within=None`` arguments.

What is kept (the rule, stated once):

- The span is ``[start_ns, end_ns)`` for ``window``; for ``within`` it is the union of every
  instance of the NVTX range of that name (``"name"`` in any domain, or ``"domain:name"``), the
  instances merged where they overlap.
- A CPU-side event (NVTX range or mark, CUDA API call, OS runtime call) is kept when it *starts*
  inside the span (it may end after it, as a range that starts in a zoomed view is shown whole).
- A GPU operation (kernel, memcpy, memset, CUDA graph) is kept when the CUDA API call that
  launched it starts inside the span (joined by process and correlation id), as nsys's
  ``nvtx_kern_sum`` projection attributes kernels to ranges; an operation whose launching call
  is not in the report falls back to its own start.
- CUDA synchronization rows are kept when they start inside the span.
- Threads, GPUs and metadata are kept whole; ``meta["window"]`` lists the span's intervals.
"""
from __future__ import annotations

import functools
import inspect

import numbers

import numpy as np

from labkit.errors import LabkitError
from labkit.report.launch import launching_call

__all__ = ["restrict", "windowed", "WindowError", "span_of"]

_CPU_FRAMES = ("nvtx", "cuda_api", "sync", "osrt", "offcpu")  # kept when they start inside the span
_GPU_FRAMES = ("kernels", "memcpy", "memset", "graphs")


class WindowError(LabkitError, ValueError):
    """A window or NVTX range to restrict to is malformed or absent from the report."""


def span_of(report, *, window=None, within=None) -> np.ndarray:
    """The span as an (n, 2) int64 array of sorted, disjoint [start, end) intervals."""
    if window is not None and within is not None:
        raise WindowError("give window=(start_ns, end_ns) or within='range name', not both")
    if window is not None:
        try:
            s, e = window
            if any(isinstance(x, bool) or not (isinstance(x, numbers.Integral) or float(x).is_integer())
                   for x in (s, e)):
                raise ValueError
            s, e = int(s), int(e)
        except (TypeError, ValueError, OverflowError):  # NaN, infinite, 2.5, a str, not two of them
            raise WindowError(f"window must be (start_ns, end_ns), two whole numbers of ns; got {window!r:.80}") from None
        if e <= s:
            raise WindowError(f"empty window: start_ns {s} >= end_ns {e}; give (start_ns, end_ns) with start < end")
        lo, hi = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)  # a span past any clock is clipped to it
        s, e = min(max(s, lo), hi - 1), min(max(e, lo + 1), hi)
        return np.array([[s, e]], dtype=np.int64)
    if not isinstance(within, str):
        raise WindowError(f"within must be an NVTX range name (a str), not {type(within).__name__}")
    nv = report.nvtx
    r = nv[nv["kind"] != "mark"]
    name = r["name"].to_numpy(dtype=object)
    dom = r["domain"].to_numpy(dtype=object)
    full = np.array([f"{d}:{n}" if d else n for d, n in zip(dom, name)], dtype=object) if len(r) else name
    hit = (name == within) | (full == within)
    if not hit.any():
        known = sorted(set(full))[:8]
        raise WindowError(f"no NVTX range named {within!r} in {report.path}: pick one of {known}"
                          + (" ..." if len(set(full)) > 8 else ""))
    s = r["start_ns"].to_numpy()[hit]
    e = r["end_ns"].to_numpy()[hit]
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    new = np.r_[True, s[1:] > e[:-1]]  # an instance starting after every earlier one ended
    first = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, first)
    return np.stack([s[first], ends], axis=1).astype(np.int64)


def _inside(t: np.ndarray, span: np.ndarray) -> np.ndarray:
    i = np.searchsorted(span[:, 0], t, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = t[ok] < span[i[ok], 1]
    return out


def _renest(nv, keep: np.ndarray):
    """Rows ``keep`` of the nvtx frame, with ``parent`` re-pointed at the kept rows (-1 if dropped)."""
    pos = np.full(len(nv), -1, dtype=np.int64)
    pos[keep] = np.arange(int(keep.sum()))
    out = nv[keep].reset_index(drop=True)
    par = out["parent"].to_numpy()
    out["parent"] = np.where(par >= 0, pos[np.maximum(par, 0)], -1)
    return out


def _check_overlap(report, span) -> None:
    """WindowError when the window lies wholly before the report's first event or after its last
    (a window past the end gave empty tables, said as 'no data')."""
    lo, hi = [], []
    for name in (*_CPU_FRAMES, *_GPU_FRAMES, "cuda_api"):
        f = report._frame(name)
        if len(f):
            lo.append(int(f["start_ns"].min()))
            hi.append(int(f["end_ns"].max()) if "end_ns" in f else int(f["start_ns"].max()))
    if lo and (span[-1, 1] <= min(lo) or span[0, 0] > max(hi)):
        a, b = min(lo), max(hi)
        raise WindowError(f"the window {int(span[0, 0])}..{int(span[-1, 1])} ns lies outside {report.path.name}'s "
                          f"events, which run from {a} to {b} ns on its clock ({a / 1e6:.1f} to {b / 1e6:.1f} ms): "
                          f"give a window inside them")


def restrict(report, *, window=None, within=None):
    """A new Report with only the events of a time window or an NVTX range (rule: module docstring).

    Args:
        report: a :class:`labkit.report.Report`.
        window: ``(start_ns, end_ns)`` on the report clock, start inclusive, end exclusive.
        within: an NVTX range name (``"name"`` or ``"domain:name"``): the union of its instances.
    Returns: the Report itself when both are None, else a new in-memory Report.
    Raises: WindowError for a malformed window or a range the report does not hold.
    """
    if window is None and within is None:
        return report
    from labkit.report.load import Report

    span = span_of(report, window=window, within=within)
    if window is not None:
        _check_overlap(report, span)
    frames = {}
    for name in _CPU_FRAMES:
        f = report._frame(name)
        if name == "nvtx":
            frames[name] = _renest(f, _inside(f["start_ns"].to_numpy(), span))
        else:
            frames[name] = f[_inside(f["start_ns"].to_numpy(), span)].reset_index(drop=True)
    api = report._frame("cuda_api")
    call_of, call_start = launching_call(api["pid"], api["correlation_id"]), api["start_ns"].to_numpy()
    for name in _GPU_FRAMES:  # GPU work belongs to the window its launching call started in
        f = report._frame(name)
        t = f["start_ns"].to_numpy().copy()
        if len(f):
            row = call_of(f["pid"], f["correlation_id"])
            t[row >= 0] = call_start[row[row >= 0]]
        frames[name] = f[_inside(t, span)].reset_index(drop=True)
    frames["threads"] = report.threads
    meta = dict(report.meta)
    meta["window"] = [(int(a), int(b)) for a, b in span]
    if within is not None:
        meta["within"] = within
    return Report(path=report.path, gpu=report.gpu, all_threads=report.all_threads, meta=meta,
                  notes=list(report.notes), log_path=report.log_path, _db=None, _strings=report._strings,
                  _frames=frames)


def windowed(func):
    """Decorator: give ``func(report, ...)`` keyword-only ``window=None, within=None``; when either
    is set, the report is :func:`restrict`-ed before ``func`` runs. Signature and docstring are kept
    (functools.wraps); with both None the call costs one comparison."""
    @functools.wraps(func)
    def wrapper(report, *args, window=None, within=None, **kwargs):
        if window is not None or within is not None:
            report = restrict(report, window=window, within=within)
        return func(report, *args, **kwargs)

    try:
        sig = inspect.signature(func)
        params = [p for p in sig.parameters.values() if p.name not in ("window", "within")]
        extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in ("window", "within")]
        var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD] + extra + var_kw
        wrapper.__signature__ = sig.replace(parameters=params)
    except (TypeError, ValueError):  # a builtin without a signature: keep wraps' default
        pass
    wrapper.__doc__ = (func.__doc__ or "").rstrip() + (
        "\n\n    window, within: restrict the report first, to ``(start_ns, end_ns)`` or to an NVTX range's "
        "instances (see :func:`labkit.report.window.restrict`).\n")
    wrapper.__wrapped_windowed__ = True
    return wrapper
