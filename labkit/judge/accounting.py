"""The accounting of a run: where each thread's and each GPU's time went in one window, and which
resource limited progress. Every judgement reads it (bottleneck, advise and its caps), so they
cannot disagree.

Per thread, over the window (clipped to the thread's first and last traced event, its *extent*):

- ``blocked_ms``: in a call or range that waits (:mod:`labkit.stats.blocked`: blocking OS runtime
  calls, synchronizing CUDA calls, ranges named as waits);
- ``work_ms``: in its own NVTX work ranges, not blocked;
- ``cuda_ms``: in other CUDA API calls (launches, copies, allocations), outside both;
- ``untraced_ms``: the rest of the extent (Python between ranges, compilation, anything untraced);
- ``busy_ms``: work and CUDA calls; for a thread with no NVTX range at all, everything not blocked
  (its untraced time may be compute: nothing says otherwise), and ``busy_basis`` says which.

Per run: ``oversubscribed_ms``, the time more threads were ready to run (in their extent, not blocked;
the CUDA driver's and the profiler's own threads apart) than the profiled run had cores (``CpuCores`` in
the report, or fewer where labkit recorded that the program could use fewer). Times measured then include
waits for a core, which a change that frees a core takes away too: a prediction read from them is no
bound (:func:`labkit.advise` says so). Zero where the report traced no OS runtime calls (an untraced wait
reads as running) or does not give its cores.

Per GPU: SM busy (kernels, graphs), copy-engine busy by direction, kept apart. The *limiter* is the
resource busiest in the window: a thread (its busy share), the GPU's SMs or its copy engines; the
GPU is named only when its SMs were busier than every thread (a thread in a synchronous copy is
blocked on the copy engine, not busy).

The window (:func:`steady_window_of`) leaves start-up out by default: the first instances of the
run's repeated range, else everything before the first kernel launch; ``steady=False`` keeps the
whole trace.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from labkit.report.cpu import osrt_calls
from labkit.stats.blocked import blocked_intervals
from labkit.stats.calls import osrt_traced, runtime_threads, work_ranges
from labkit.stats.idle import busy_in, busy_intervals, depth, engine_busy, launch_calls
from labkit.stats.stages import domains, trace_span

__all__ = ["Accounting", "account", "chosen_window", "steady_window_of", "THREAD_COLUMNS", "WARMUP_SHARE", "MAX_WARMUP"]

THREAD_COLUMNS = ["global_tid", "tid", "thread", "extent_ms", "work_ms", "blocked_ms", "cuda_ms", "untraced_ms",
                  "busy_ms", "busy_frac", "busy_basis"]
WARMUP_SHARE = 0.1  # the first tenth of a repeated range's instances is warm-up (at least one, at most MAX_WARMUP)
MAX_WARMUP = 5
MIN_REPEATS = 3  # a range repeated fewer times says nothing about a steady state


def _intervals_total(s: np.ndarray, e: np.ndarray) -> int:
    return int(np.sum(e - s)) if len(s) else 0


def _clip(s, e, w0, w1):
    s, e = np.clip(s, w0, w1), np.clip(e, w0, w1)
    keep = e > s
    return s[keep], e[keep]


def _minus(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Time of the disjoint sorted intervals ``a`` not covered by the disjoint sorted ``b``."""
    total = _intervals_total(*a)
    if total == 0 or len(b[0]) == 0:
        return total
    from labkit.stats.blocked import overlap_ns  # one home for interval overlaps
    return total - overlap_ns(b, a)


def steady_window_of(rep) -> tuple[tuple[int, int], str]:
    """((start_ns, end_ns), why): the window past start-up for any program.

    The run's repeated range (the NVTX range, outside waits, repeated at least three times with the
    most time in all) gives it: from the end of its last warm-up instance (the first tenth of them, at
    least one, at most five) to the end of its last, a whole number of its periods (from the start of
    the first instance past warm-up, a range run every tenth step held one instance more than its
    share of the window: 2.87x read for a checkpoint that measured 2.50x). Where instances overlap
    (one per rank, at once) the window starts with the first instance past warm-up, as their ends
    then say nothing of a period. Without one, a run with GPU work starts
    at its first kernel launch (context creation and module loading come before). Otherwise the whole
    trace."""
    t0, t1 = trace_span(rep)
    r = work_ranges(rep)
    if len(r):
        key = domains(r).astype(str) + ":" + r["name"].astype(str)
        if "depth" in r.columns:  # a recursive range counts once per outermost instance, not per level
            shallow = r["depth"] == r["depth"].groupby(key).transform("min")
            r, key = r[shallow], key[shallow]
        counts = key.value_counts()
        rep_keys = counts[counts >= MIN_REPEATS].index
        if len(rep_keys):
            dur = r["duration_ns"].groupby(key).sum().reindex(rep_keys)
            best = dur.idxmax()
            inst = r[key == best].sort_values("start_ns")
            n = len(inst)
            k = int(min(MAX_WARMUP, max(1, round(n * WARMUP_SHARE))))
            # instances that overlap (one per rank or thread, at once) keep the start of the next one
            w0 = min(int(inst["end_ns"].iloc[:k].max()), int(inst["start_ns"].iloc[k]))
            w1 = int(inst["end_ns"].max())
            name = best.split(":", 1)[1] if best.startswith(":") else best
            if w1 > w0:
                return (w0, w1), (f"steady window: range '{name}', instances {k + 1}-{n} of {n} (the first {k} left "
                                  f"out as warm-up: start-up, compilation, first iterations)")
    k = rep.kernels
    if len(k):
        launch = launch_calls(rep)
        w0 = int(launch["start_ns"].min()) if len(launch) else int(k["start_ns"].min())
        if t0 < w0 < t1:
            return (w0, t1), ("steady window: from the first kernel launch (CUDA context creation, module loading "
                              "and set-up before it left out)")
    return (t0, t1), "whole trace (no repeated range and no GPU work to tell start-up by)"


def chosen_window(rep, *, window=None, within=None, steady: bool = True, warmup: int = 0):
    """(window, why): the window a judgement reads. The caller's choice (``window``, ``within``, a
    ``warmup``, or ``steady=False`` for the whole trace) stands, and why is None; otherwise the
    :func:`steady_window_of` and its why, with window None where that is the whole trace."""
    if window is not None or within is not None or not steady or warmup:
        return window, None
    span, why = steady_window_of(rep)
    return (None if span == trace_span(rep) else span), why


@dataclass
class Accounting:
    """Where the time of one window went; see the module docstring."""

    window: tuple[int, int]
    why: str
    threads: pd.DataFrame
    sm_ms: float
    copy_ms: float
    copies: pd.DataFrame = field(default_factory=pd.DataFrame)
    cores: int | None = None
    oversubscribed_ms: float = 0.0

    @property
    def window_ms(self) -> float:
        return (self.window[1] - self.window[0]) / 1e6

    @property
    def sm_frac(self) -> float:
        return self.sm_ms / self.window_ms if self.window_ms > 0 else 0.0

    @property
    def busiest(self) -> pd.Series | None:
        """The busiest thread's row, or None."""
        t = self.threads
        return None if t.empty else t.loc[t["busy_ms"].idxmax()]

    @property
    def limiter(self) -> str:
        """The busiest resource: ``"gpu"`` (the SMs), ``"copies"`` (the copy engines) or ``"thread"``
        (the busiest thread); ``"none"`` when nothing was traced. A tie goes to the thread."""
        b = self.busiest
        host = float(b["busy_ms"]) if b is not None else 0.0
        best = max(host, self.sm_ms, self.copy_ms)
        if best <= 0:
            return "none"
        if host >= best:
            return "thread"
        return "gpu" if self.sm_ms >= self.copy_ms else "copies"

    def floor_ms(self, *, without_thread: int | None = None, gpu: bool = True, less: dict | None = None) -> float:
        """The least the window can shrink to when one thread's busy time goes: the busiest other
        resource (the other threads and, with ``gpu``, the SMs). ``less``: ms (tid -> ms) that goes
        from other threads with it (a worker pool's time inside the stage that changes)."""
        t = self.threads
        busy = t["busy_ms"] - t["global_tid"].map(lambda g: float((less or {}).get(int(g), 0.0)))
        others = busy[t["global_tid"] != without_thread] if without_thread is not None else busy
        return float(max(others.max() if len(others) else 0.0, self.sm_ms if gpu else 0.0))

    def sentence(self) -> str:
        b = self.busiest
        w = self.window_ms
        gpu = f"SMs busy {self.sm_ms:.1f} ms ({self.sm_frac:.0%})" if self.sm_ms or self.copy_ms else "no GPU work"
        if b is None:
            return f"Nothing traced on any thread in {w:.1f} ms; {gpu}. ({self.why})"
        lim = self.limiter
        head = (f"The GPU limited progress: {gpu} of {w:.1f} ms, more than any thread was busy" if lim == "gpu" else
                f"Copies limited progress: the copy engines were busy {self.copy_ms:.1f} ms of {w:.1f} ms, more than "
                f"the SMs or any thread" if lim == "copies"
                else f"Thread {b['thread']} limited progress: busy {b['busy_ms']:.1f} ms of {w:.1f} ms "
                     f"({b['busy_frac']:.0%}; {b['busy_basis']})")
        return (f"{head}; it was blocked {b['blocked_ms']:.1f} ms and untraced {b['untraced_ms']:.1f} ms; {gpu}"
                + (f"; copies {self.copy_ms:.1f} ms apart" if self.copy_ms else "") + f". ({self.why})")


def account(rep, *, window: tuple[int, int] | None = None, steady: bool = True) -> Accounting:
    """The :class:`Accounting` of ``rep`` over ``window`` (default: :func:`steady_window_of` with
    ``steady``, else the whole trace)."""
    if window is not None:
        (w0, w1), why = (int(window[0]), int(window[1])), "window as given"
    elif steady:
        (w0, w1), why = steady_window_of(rep)
    else:
        (w0, w1), why = trace_span(rep), "whole trace (steady=False)"
    blocked = blocked_intervals(rep)
    nv = rep.nvtx
    work = work_ranges(rep)
    if len(work):
        egt = work["end_global_tid"].astype("float64") if "end_global_tid" in work.columns else None
        if egt is not None:  # a start/end range ended on another thread is a span across threads, not work
            crossed = (work["kind"] != "push_pop") & egt.notna() & (egt >= 0) & (egt != work["global_tid"])
            work = work[~crossed]
    api = rep.cuda_api
    events = [f[["global_tid", "start_ns", "end_ns"]] for f in (nv, api, osrt_calls(rep.osrt)) if len(f)]
    allev = pd.concat(events, ignore_index=True) if events else pd.DataFrame(columns=["global_tid", "start_ns",
                                                                                       "end_ns"])
    allev = allev[(allev["end_ns"] > w0) & (allev["start_ns"] < w1)]
    names = thread_names(rep)
    cores = rep.meta.get("cpu_cores")
    crowd = cores if cores and osrt_traced(rep) else None  # else who was ready to run is unknown
    runtime = runtime_threads(rep) if crowd else set()
    ready: list[tuple[np.ndarray, np.ndarray]] = []
    rows = []
    for g, ev in allev.groupby("global_tid", sort=False):
        g = int(g)
        x0, x1 = max(w0, int(ev["start_ns"].min())), min(w1, int(ev["end_ns"].max()))
        if x1 <= x0:
            continue
        b = _clip(*blocked.get(g, (np.array([], np.int64), np.array([], np.int64))), x0, x1)
        if crowd and g not in runtime:  # ready to run: its extent less its blocked time
            ready.append((np.r_[x0, b[1]], np.r_[b[0], x1]))
        wr = work[work["global_tid"] == g] if len(work) else work
        w = busy_intervals(*_clip(wr["start_ns"].to_numpy(np.int64), wr["end_ns"].to_numpy(np.int64), x0, x1)) \
            if len(wr) else (np.array([], np.int64), np.array([], np.int64))
        ar = api[api["global_tid"] == g] if len(api) else api
        c = busy_intervals(*_clip(ar["start_ns"].to_numpy(np.int64), ar["end_ns"].to_numpy(np.int64), x0, x1)) \
            if len(ar) else (np.array([], np.int64), np.array([], np.int64))
        blocked_ns = _intervals_total(*b)
        work_ns = _minus(w, b)
        wb = busy_intervals(np.r_[w[0], b[0]], np.r_[w[1], b[1]])
        cuda_ns = _minus(c, wb)
        extent = x1 - x0
        untraced = max(extent - blocked_ns - work_ns - cuda_ns, 0)
        if len(wr):
            busy, basis = work_ns + cuda_ns, "work ranges and CUDA calls"
        else:
            busy, basis = extent - blocked_ns, "no NVTX ranges: everything not blocked counts"
        rows.append({"global_tid": g, "tid": g & 0xFFFFFF, "thread": names.get(g, f"tid {g & 0xFFFFFF}"),
                     "extent_ms": extent / 1e6, "work_ms": work_ns / 1e6, "blocked_ms": blocked_ns / 1e6,
                     "cuda_ms": cuda_ns / 1e6, "untraced_ms": untraced / 1e6, "busy_ms": busy / 1e6,
                     "busy_frac": busy / (w1 - w0) if w1 > w0 else 0.0, "busy_basis": basis})
    threads = pd.DataFrame(rows, columns=THREAD_COLUMNS)
    threads = threads.sort_values("busy_ms", ascending=False, ignore_index=True)
    sm, se = engine_busy(rep, "sm")
    cs, ce = engine_busy(rep, "copy")
    return Accounting(window=(w0, w1), why=why, threads=threads,
                      sm_ms=busy_in(sm, se, w0, w1) / 1e6 if len(sm) else 0.0,
                      copy_ms=busy_in(cs, ce, w0, w1) / 1e6 if len(cs) else 0.0,
                      copies=_copies(rep, w0, w1), cores=int(cores) if cores else None,
                      oversubscribed_ms=_over(ready, crowd) / 1e6 if crowd else 0.0)


def _over(ready: list[tuple[np.ndarray, np.ndarray]], cores: int) -> int:
    """ns during which more of the intervals ``ready`` (one list per thread) overlap than ``cores``."""
    if not ready:
        return 0
    s = np.concatenate([r[0] for r in ready])
    e = np.concatenate([r[1] for r in ready])
    keep = e > s
    dt, n = depth(s[keep], e[keep])
    return int(np.sum(dt[n > cores]))


def thread_label(name: pd.Series, tid: pd.Series) -> np.ndarray:
    """Threads' labels: the name and tid ("python3 (tid 665)"), or "tid 665" where the name is empty."""
    name, tid = name.fillna("").astype(str), tid.astype(str)
    return np.where(name != "", name + " (tid " + tid + ")", "tid " + tid)


def thread_names(rep) -> dict[int, str]:
    """Each thread's :func:`thread_label`, by global tid, from the export's thread names."""
    t = rep.threads
    if len(t) == 0 or "global_tid" not in t.columns:
        return {}
    name = t["thread_name"] if "thread_name" in t.columns else pd.Series("", index=t.index)
    return dict(zip(t["global_tid"].astype("int64"), thread_label(name, t["global_tid"].astype("int64") & 0xFFFFFF)))


def _copies(rep, w0: int, w1: int) -> pd.DataFrame:
    """Copy-engine time and bytes per copy kind (direction) inside the window."""
    m = rep.memcpy
    cols = ["kind", "count", "ms", "bytes"]
    if len(m) == 0:
        return pd.DataFrame(columns=cols)
    m = m[(m["end_ns"] > w0) & (m["start_ns"] < w1)]
    if len(m) == 0:
        return pd.DataFrame(columns=cols)
    kind = m["name"].astype(str) if "name" in m.columns else pd.Series("copy", index=m.index)
    g = m.assign(kind=kind).groupby("kind", sort=True)
    return pd.DataFrame({"count": g.size(), "ms": g["duration_ns"].sum() / 1e6,
                         "bytes": g["bytes"].sum()}).reset_index()[cols]
