"""Analyses of a :class:`labkit.report.Report`: stage and batch tables, GPU utilization, the
bottleneck sentence, steady window, stage overlap, host-device copies.

Everything is vectorized (searchsorted / reduceat over sorted arrays, loops only over threads
or nesting levels), so a report with a million kernels is analysed in about a second.
Functions return frames and never print.

Conventions read from the NVTX ranges (those of :mod:`labkit.annotate`): the range message is
the stage name, its integer payload the batch index, and a mark named ``"items"`` inside a
range carries that range's item count in its payload.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.idle import (busy_in, busy_intervals, engine_busy, gpu_idle_breakdown, gpu_idle_gaps,
                         gpu_utilization)
from labkit.summaries import gpu_projection
from labkit.window import windowed

__all__ = [
    "steady_window",
    "stage_overlap",
    "copy_table",
    "stage_table",
    "batches",
    "gpu_utilization",
    "gpu_idle_gaps",
    "gpu_idle_breakdown",
    "choose_stages",
    "bottleneck",
    "Bottleneck",
    "pageable_copies",
    "busy_intervals",
    "ITEMS_MARK",
]

ITEMS_MARK = "items"  # same value as labkit.annotate.ITEMS_MARK (not imported: keep this module light)
WAIT_WORDS = ("wait", "idle", "queue", "sleep", "sync")
"""Stage names containing one of these count as waiting, not as work, in :func:`bottleneck`."""


# ----------------------------------------------------------------------------- stages and batches
def _items_per_range(nv: pd.DataFrame) -> np.ndarray:
    """Item count of each nvtx row from its "items" marks (0 where none)."""
    items = np.zeros(len(nv), dtype=np.int64)
    m = nv[(nv["kind"] == "mark") & (nv["name"] == ITEMS_MARK) & (nv["parent"] >= 0)]
    if len(m):
        s = m.groupby("parent")["payload"].sum()
        items[s.index.to_numpy()] = s.to_numpy(dtype=np.float64).astype(np.int64)
    return items


def _warmup_mask(nv: pd.DataFrame, warmup: int) -> np.ndarray:
    """True for rows of warm-up batches: payload below ``warmup``, or nested in such a range."""
    pay = nv["payload"].astype("float64").to_numpy()
    warm = ~np.isnan(pay) & (pay < warmup)
    parent = nv["parent"].to_numpy()
    for _ in range(int(nv["depth"].max()) if len(nv) else 0):  # one level per pass, vectorized
        has = parent >= 0
        warm[has] |= warm[parent[has]]
    return warm


def _wall_ns(rep) -> int:
    nv = rep.nvtx
    if len(nv):
        return int(nv["end_ns"].max() - nv["start_ns"].min())
    return int(rep.meta.get("duration_ns") or 0)


def domains(nv: pd.DataFrame) -> pd.Series:
    """Each row's NVTX domain ('' for the default domain, and for all rows of a frame without one)."""
    if "domain" in nv.columns:
        return nv["domain"].fillna("").astype(str)
    return pd.Series("", index=nv.index, dtype=object)


def stage_labels(nv: pd.DataFrame) -> pd.Series:
    """A range's stage label: its name, prefixed ``domain:`` outside the default domain."""
    d = domains(nv)
    return pd.Series(np.where(d != "", d + ":" + nv["name"].astype(str), nv["name"].astype(str)), index=nv.index)


@windowed
def choose_stages(rep) -> tuple[tuple[str, ...], str]:
    """A program's stages and how they were chosen, without knowing the program.

    In order: the ranges that carry an ``items`` mark (:mod:`labkit.annotate`'s convention);
    otherwise the ranges nested directly in the outermost repeated range (a loop's iteration),
    by name; otherwise the top-level ranges. Returns (stage labels, a sentence saying which rule
    chose them); labels carry ``domain:`` outside the default domain (:func:`stage_labels`).
    """
    nv = rep.nvtx
    if len(nv) == 0:
        return (), "no NVTX ranges in this report"
    labels = stage_labels(nv)
    items = _items_per_range(nv)
    ranges = (nv["kind"] != "mark").to_numpy()
    marked = tuple(dict.fromkeys(labels[ranges & (items > 0)]))
    if marked:
        return marked, "stages: the ranges that carry an 'items' mark (labkit.annotate)"
    r = nv[ranges]
    if len(r) == 0:
        return (), "no NVTX ranges in this report (marks only)"
    lab = labels[r.index]
    top = r[r["depth"] == 0]
    counts = lab[top.index].value_counts()
    for name in sorted(counts.index[counts > 1], key=lambda n: -float(top.loc[lab[top.index] == n, "duration_ns"].sum())):
        inst = top.index[lab[top.index] == name]
        kids = r[r["parent"].isin(inst)]
        if len(kids):
            return (tuple(dict.fromkeys(lab[kids.index])),
                    f"stages: the ranges nested in the outermost repeated range '{name}' ({len(inst)} instances)")
    return tuple(dict.fromkeys(lab[top.index])), "stages: the top-level NVTX ranges (no repeated range holds others)"


@windowed
def stage_table(rep, stages=None, *, warmup: int = 0) -> pd.DataFrame:
    """Per stage (NVTX range name and domain, push/pop or start/end): CPU time, projected GPU time, items, share of wall.

    Args:
        stages: range names to include, in this order (default: all, by CPU time).
        warmup: instances whose payload (batch index) is below this are left out, with every
            range nested inside them.
    Ranges of the same name in different NVTX domains are different stages (one row each).

    Returns: stage, domain ('' for the default domain), instances, items, cpu_ms, cpu_ms_per_instance, cpu_ms_per_item, gpu_ms
        (projected: first to last GPU op launched inside each instance, summed), gpu_ms_per_item,
        wall_share (cpu_ms over the wall span of the ranges kept after the warm-up
        filter; above 1 when threads overlap), threads.
    """
    nv = rep.nvtx
    items = _items_per_range(nv)
    r = nv.assign(items=items)
    if warmup:
        r = r[~_warmup_mask(nv, warmup)]
    r = r[r["kind"] != "mark"]  # push/pop and start/end ranges alike, as nsys reports them
    wall_ns = int(r["end_ns"].max() - r["start_ns"].min()) if len(r) else 0
    if stages is not None:
        r = r[r["name"].isin(list(stages)) | stage_labels(r).isin(list(stages))]
    cols = ["stage", "domain", "instances", "items", "cpu_ms", "cpu_ms_per_instance", "cpu_ms_per_item", "gpu_ms",
            "gpu_ms_per_item", "wall_share", "threads"]
    if len(r) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("stage", "domain") else "float64") for c in cols})
    proj = gpu_projection(rep)
    gpu = pd.Series(0, index=r.index, dtype="int64")
    if len(proj):
        pj = proj.set_index("nvtx_index")["proj_duration_ns"]
        gpu = pj.reindex(r.index).fillna(0).astype("int64")
    r = r.assign(gpu_ns=gpu.to_numpy(), domain=domains(r))
    g = r.groupby(["domain", "name"], sort=False)
    out = pd.DataFrame({
        "instances": g.size(),
        "items": g["items"].sum(),
        "cpu_ms": g["duration_ns"].sum() / 1e6,
        "gpu_ms": g["gpu_ns"].sum() / 1e6,
        "threads": g["global_tid"].nunique(),
    })
    out["cpu_ms_per_instance"] = out["cpu_ms"] / out["instances"]
    per = out["items"].where(out["items"] > 0)
    out["cpu_ms_per_item"] = out["cpu_ms"] / per
    out["gpu_ms_per_item"] = out["gpu_ms"] / per
    wall = wall_ns / 1e6
    out["wall_share"] = out["cpu_ms"] / wall if wall else np.nan
    out = out.reset_index().rename(columns={"name": "stage"})
    out["domain"] = out["domain"].astype(str)
    if stages is not None:
        order = {s: i for i, s in enumerate(stages)}
        lab = stage_labels(out.rename(columns={"stage": "name"}))
        key = lab.map(order).fillna(out["stage"].map(order))
        out = out.iloc[np.argsort(key.to_numpy(), kind="stable")].reset_index(drop=True)
    else:
        out = out.sort_values("cpu_ms", ascending=False, ignore_index=True)
    out = out[cols]
    chosen, how = choose_stages(rep)
    out.attrs.update(stages=chosen, note=how)
    return out


@windowed
def batches(rep, *, warmup: int = 0, stages=None) -> pd.DataFrame:
    """One row per batch index (the payload of ranges), warm-up batches left out.

    Args:
        warmup: batches with index below this are dropped.
        stages: range names to use (default: every range name that carries a payload).
    Returns: batch, start_ns, end_ns (first start / last end over its ranges), wall_ms, items
        (largest item count among its ranges), ms_per_item, then ``<stage>_ms`` per stage
        (summed over that batch's ranges of the stage).
    """
    nv = rep.nvtx
    items = _items_per_range(nv)
    r = nv.assign(items=items)
    r = r[(r["kind"] != "mark") & r["payload"].notna()]
    if stages is not None:
        r = r[r["name"].isin(list(stages))]
    r = r.assign(batch=r["payload"].astype("float64").astype("int64"))
    r = r[r["batch"] >= warmup]
    base = ["batch", "start_ns", "end_ns", "wall_ms", "items", "ms_per_item"]
    if len(r) == 0:
        out = pd.DataFrame({c: pd.Series(dtype="float64") for c in base})
        out.attrs["note"] = ("no NVTX range carries a batch index (payload) past the warm-up: batches needs "
                             "ranges with an integer payload, as labkit.annotate.range(name, batch) emits")
        return out
    g = r.groupby("batch")
    out = pd.DataFrame({"start_ns": g["start_ns"].min(), "end_ns": g["end_ns"].max(), "items": g["items"].max()})
    out["wall_ms"] = (out["end_ns"] - out["start_ns"]) / 1e6
    out["ms_per_item"] = out["wall_ms"] / out["items"].where(out["items"] > 0)
    wide = r.pivot_table(index="batch", columns="name", values="duration_ns", aggfunc="sum", sort=False) / 1e6
    order = stages if stages is not None else list(dict.fromkeys(r["name"]))
    wide = wide[[s for s in order if s in wide.columns]]
    wide.columns = [f"{c}_ms" for c in wide.columns]
    out = out.join(wide).reset_index()[base + list(wide.columns)]
    out.attrs["note"] = f"{len(out)} batches: NVTX ranges grouped by their payload (batch index)"
    return out


# ----------------------------------------------------------------------------- bottleneck
@dataclass(frozen=True)
class Bottleneck:
    """The stage and thread that bound throughput; ``str()`` gives the sentence."""

    sentence: str
    stage: str | None
    thread: str | None
    tid: int | None
    thread_busy_frac: float
    stage_ms: float
    wall_ms: float
    gpu_busy_frac: float
    table: pd.DataFrame
    copy_busy_frac: float = 0.0
    gpu_bound: bool = False

    def __str__(self) -> str:
        return self.sentence


def _is_wait(name: str) -> bool:
    n = str(name).lower()
    return any(w in n for w in WAIT_WORDS)


@windowed
def bottleneck(rep, *, warmup: int = 0) -> Bottleneck:
    """Name the stage and the thread that bound throughput.

    With ``warmup``, where ranges carry batch indices (payloads), only those past it count, the
    wall span is theirs and it starts when the last warm-up batch has left the pipeline; without,
    every range counts over the span of all (as in :func:`stage_table`). The busiest thread is the one whose work (ranges, minus waiting ranges such as
    ``wait``/``queue``/``sync``, counted once where nested: self time) covers the largest share of
    the wall span; its stage with the most self time is the bottleneck. A range over half the span
    during which other ranges (of any thread) ran is an envelope (``main``, ``run``) and left
    out; one with no range inside it is the deepest range, the work itself, and counts. Stages in different NVTX domains stay apart (``domain:name``).
    The GPU is named only when kernels kept the SMs busier than any thread was busy; copy-engine
    time is reported apart (``copy_busy_frac``) and never counts as GPU busy.

    Returns: :class:`Bottleneck` (``str()`` is a sentence with the numbers; ``table`` has per
    thread and stage: thread, tid, stage, domain, self_ms, thread_busy_frac).
    """
    nv = rep.nvtx
    ranges = nv["kind"] != "mark"  # push/pop and start/end (a start/end range counts on the thread that opened it)
    pp = nv[ranges & ~_warmup_mask(nv, warmup)] if warmup else nv[ranges]
    pay = pp["payload"].astype("float64")
    if warmup and pay.notna().any():
        # steady state: the span of the batch-indexed ranges past warm-up, and every range inside
        # it (setup such as an engine build happens before and says nothing about throughput)
        # it starts when the last warm-up batch has left the pipeline (queued stages run ahead)
        steady = pp[pay.notna() & (pay >= warmup)]
        allpay = nv.loc[ranges, "payload"].astype("float64")
        warm = nv[ranges][allpay.notna() & (allpay < warmup)]
        w0, w1 = (int(steady["start_ns"].min()), int(steady["end_ns"].max())) if len(steady) else (0, 0)
        if len(warm) and len(steady):
            w0 = max(w0, int(warm["end_ns"].max()))
        pp = pp[(pp["start_ns"] >= w0) & (pp["end_ns"] <= w1) & ~(pay.notna() & (pay < warmup))]
    else:
        w0, w1 = (int(pp["start_ns"].min()), int(pp["end_ns"].max())) if len(pp) else (0, 0)
    wall_ns = w1 - w0
    empty = pd.DataFrame(columns=["thread", "tid", "stage", "domain", "self_ms", "thread_busy_frac"])
    if len(pp) == 0 or wall_ns <= 0:
        return Bottleneck("No NVTX ranges in this report: annotate the stages (labkit.annotate) and profile again.",
                          None, None, None, 0.0, 0.0, wall_ns / 1e6, 0.0, empty)
    # self time: own duration minus direct children's durations
    child = pp[pp["parent"] >= 0].groupby("parent")["duration_ns"].sum()
    self_ns = pp["duration_ns"] - child.reindex(pp.index).fillna(0).to_numpy()
    work = pp.assign(self_ns=self_ns.to_numpy(), wait=pp["name"].map(_is_wait).to_numpy(),
                     stage=stage_labels(pp).to_numpy(), domain=domains(pp).to_numpy())
    # envelopes such as "main" or "run" span most of the run and hold the work of others; a long
    # range with nothing nested in it is the work itself
    long = work.index[work["duration_ns"] >= 0.5 * wall_ns]
    st, en = work["start_ns"].to_numpy(), work["end_ns"].to_numpy()
    holds = [int(((st >= work.at[i, "start_ns"]) & (en <= work.at[i, "end_ns"])).sum()) > 1 for i in long]
    envelope = work.index.isin([i for i, h in zip(long, holds) if h])
    # a start/end range ended on another thread is a span across threads, not one thread's work
    egt = work["end_global_tid"].astype("float64") if "end_global_tid" in work.columns else None
    crossed = (work["kind"] != "push_pop") & egt.notna() & (egt >= 0) & (egt != work["global_tid"]) \
        if egt is not None else False
    work = work[~work["wait"] & ~envelope & ~crossed]
    tname = work["thread_name"].fillna("").astype(str)
    tid_s = work["tid"].astype(str)
    work = work.assign(thread=np.where(tname != "", tname + " (tid " + tid_s + ")", "tid " + tid_s))
    per = work.groupby(["global_tid", "thread", "tid", "stage", "domain"], sort=False)["self_ns"].sum().reset_index()
    # a thread's busy time: the union of its work ranges (start/end ranges may overlap on one thread)
    busy = pd.Series({g: int(np.sum(np.subtract(*busy_intervals(w["start_ns"].to_numpy(), w["end_ns"].to_numpy())[::-1])))
                      for g, w in work.groupby("global_tid", sort=False)}, dtype="int64")
    per["thread_busy_frac"] = per["global_tid"].map(busy) / wall_ns
    per["self_ms"] = per["self_ns"] / 1e6
    per = per.sort_values("self_ns", ascending=False, ignore_index=True)
    table = per[["thread", "tid", "stage", "domain", "self_ms", "thread_busy_frac"]]
    sm, se = engine_busy(rep, "sm")
    cs, ce = engine_busy(rep, "copy")
    gpu_frac = busy_in(sm, se, w0, w1) / wall_ns
    copy_frac = busy_in(cs, ce, w0, w1) / wall_ns
    wall_ms = wall_ns / 1e6
    copies = f"; copies kept the copy engines busy {copy_frac:.0%} (apart: not GPU busy)" if copy_frac else ""
    if len(per) == 0:
        return Bottleneck("Only waiting ranges or envelopes were found; no stage did measurable work"
                          f" (SM busy {gpu_frac:.0%}{copies}).", None, None, None,
                          0.0, 0.0, wall_ms, gpu_frac, table, copy_frac, False)
    top_tid = busy.idxmax()
    frac = float(busy.max() / wall_ns)
    row = per[per["global_tid"] == top_tid].iloc[0]
    gpu_bound = gpu_frac > frac
    if gpu_bound:
        sentence = (f"The GPU bound throughput: kernels kept the SMs busy {gpu_frac:.0%} of {wall_ms:.1f} ms, more "
                    f"than any thread was busy (busiest: {row['thread']} at {frac:.0%}, mostly '{row['stage']}')"
                    f"{copies}.")
    else:
        sentence = (f"Stage '{row['stage']}' on thread {row['thread']} bound throughput: that thread was busy "
                    f"{frac:.0%} of {wall_ms:.1f} ms, '{row['stage']}' itself {row['self_ns'] / 1e6:.1f} ms "
                    f"({row['self_ns'] / wall_ns:.0%}); SM busy {gpu_frac:.0%}{copies}.")
    return Bottleneck(sentence, str(row["stage"]), str(row["thread"]), int(row["tid"]), frac,
                      float(row["self_ns"] / 1e6), wall_ms, gpu_frac, table, copy_frac, gpu_bound)


# ----------------------------------------------------------------------------- copies
def _stage_rows(rep, names, warmup: int) -> pd.DataFrame:
    nv = rep.nvtx
    r = nv[(nv["kind"] != "mark") & nv["name"].isin(list(names))]
    if warmup:
        pay = r["payload"].astype("float64")
        r = r[~(pay.notna() & (pay < warmup))]
    return r


def trace_span(rep) -> tuple[int, int]:
    """First start to last end over NVTX ranges, CUDA calls and GPU operations."""
    lo, hi = [], []
    for f in (rep.nvtx, rep.cuda_api, rep.gpu_ops()):
        if len(f):
            lo.append(int(f["start_ns"].min()))
            hi.append(int(f["end_ns"].max()))
    return (min(lo), max(hi)) if lo else (0, 0)


@windowed
def steady_window(rep, *, stage: str | None = "infer", warmup: int = 0, count: int = 3) -> tuple[int, int]:
    """(start_ns, end_ns) of a window about ``count`` iterations wide, past the warm-up.

    The window starts half a period before the first ``stage`` range whose payload (batch index)
    is at least ``warmup``, the period being the median time between consecutive ``stage``
    ranges, so it shows that many batches whether the stages run one after another or overlap.
    A report with no ``stage`` range at all (any program but the lab's) falls back, as stated
    here, to its outermost repeated NVTX range (a loop's iteration: the top-level name that
    repeats with the most time), and with none of those to the whole trace span. For
    ``plot_timeline(rep, window=...)`` and ``labkit.report.trim_export``.

    Raises: ValueError when ``stage`` ranges exist but none is past the warm-up.
    """
    nv = rep.nvtx
    ranges = nv[nv["kind"] != "mark"] if len(nv) else nv
    if stage is None or not (ranges["name"] == stage).any():
        top = ranges[ranges["depth"] == 0] if len(ranges) else ranges
        counts = top["name"].value_counts() if len(top) else pd.Series(dtype="int64")
        repeated = counts.index[counts > 1]
        if len(repeated) == 0:
            return trace_span(rep)
        stage = str(top[top["name"].isin(repeated)].groupby("name")["duration_ns"].sum().idxmax())
    r = _stage_rows(rep, [stage], warmup)
    if len(r) == 0:
        raise ValueError(f"no '{stage}' ranges past the warm-up in this report: lower warmup (it is {warmup})")
    starts = np.sort(r["start_ns"].to_numpy())
    if len(starts) < 2:
        return int(r["start_ns"].min()), int(r["end_ns"].max())
    period = float(np.median(np.diff(starts)))
    return int(starts[0] - period / 2), int(starts[0] + (count - 0.5) * period)


@windowed
def stage_overlap(rep, stages, *, warmup: int = 0) -> dict:
    """How much the ranges named ``stages`` ran at the same time (any threads).

    Ranges of batches below ``warmup`` are left out. Returns ``busy_ms`` (time with at least one
    stage running), ``stage_ms`` (all stage time added up), ``concurrency`` (stage_ms / busy_ms:
    1.0 when stages never overlap) and ``overlap_frac`` (share of busy_ms with two or more
    stages running).
    """
    r = _stage_rows(rep, stages, warmup)
    if len(r) == 0:
        return {"busy_ms": 0.0, "stage_ms": 0.0, "concurrency": float("nan"), "overlap_frac": float("nan")}
    t = np.concatenate([r["start_ns"].to_numpy(), r["end_ns"].to_numpy()])
    step = np.concatenate([np.ones(len(r), dtype=np.int64), -np.ones(len(r), dtype=np.int64)])
    order = np.lexsort((step, t))  # at equal times an end comes before a start
    t, running = t[order], np.cumsum(step[order])[:-1]
    dt = np.diff(t)
    busy, two = float(dt[running >= 1].sum()), float(dt[running >= 2].sum())
    total = float((r["end_ns"] - r["start_ns"]).sum())
    nan = float("nan")
    return {"busy_ms": busy / 1e6, "stage_ms": total / 1e6, "concurrency": total / busy if busy else nan,
            "overlap_frac": two / busy if busy else nan}


@windowed
def pageable_copies(rep) -> pd.DataFrame:
    """Asynchronous memcpy calls that touch pageable host memory (they run synchronously and
    cannot overlap; pin the host buffer). Same rule as ``nsys analyze -r cuda_memcpy_async``.

    Returns: start_ns, duration_ns, name, bytes, src_kind, dst_kind, api, tid, correlation_id.
    """
    m = rep.memcpy
    cols = ["start_ns", "duration_ns", "name", "bytes", "src_kind", "dst_kind", "api", "tid", "correlation_id"]
    m = m[m["pageable"]] if len(m) else m
    api = rep.cuda_api
    if len(m) == 0 or len(api) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("name", "src_kind", "dst_kind", "api")
                                          else "int64") for c in cols})
    a = api[["pid", "correlation_id", "name", "tid"]].rename(columns={"name": "api"})
    j = m.merge(a, on=["pid", "correlation_id"], how="inner")
    j = j[j["api"].str.contains("Async", regex=False)]
    return j.sort_values("start_ns", ignore_index=True)[cols]


@windowed
def copy_table(rep, *, warmup: int = 0) -> pd.DataFrame:
    """Memory copies per direction and kind of host memory.

    Every copy counts. Where the report has batch ranges (NVTX ranges with a payload: the
    convention of :mod:`labkit.annotate`), only copies whose CUDA call was made inside one, on the
    calling thread, of index ``warmup`` or more count: start-up copies (model weights) and warm-up
    batches are left out. ``attrs["note"]`` says which rule counted, or why the frame is empty.

    Returns: kind, host ('Pinned', 'Pageable'; the source's kind for copies between devices),
    copies, mb, kb_per_copy, ms (GPU time of the copies); one row per (kind, host), largest MB first.
    """
    cols = ["kind", "host", "copies", "mb", "kb_per_copy", "ms"]
    empty = pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "host") else "float64") for c in cols})
    m, api, nv = rep.memcpy, rep.cuda_api, rep.nvtx
    ranges = nv[(nv["kind"] != "mark") & nv["payload"].notna()] if len(nv) else nv
    if len(m) == 0:
        empty.attrs["note"] = "no memory copies in this report (was CUDA traced?)"
        return empty
    j = m
    note = (f"all {len(m)} copies in the report counted: no NVTX range carries a batch index (payload), so "
            "start-up and warm-up copies are included")
    if len(ranges) and len(api):
        calls = m.merge(api[["pid", "correlation_id", "global_tid", "start_ns"]].rename(
            columns={"start_ns": "call_ns"}), on=["pid", "correlation_id"], how="inner")
        r = ranges[["global_tid", "start_ns", "end_ns", "payload"]].rename(
            columns={"start_ns": "range_start", "end_ns": "range_end"}).astype({"payload": "float64"})
        j = pd.merge_asof(calls.sort_values("call_ns"), r.sort_values("range_start"), left_on="call_ns",
                          right_on="range_start", by="global_tid", direction="backward")
        j = j[(j["call_ns"] <= j["range_end"]) & (j["payload"] >= warmup)]
        note = (f"{len(j)} of {len(m)} copies counted: those called inside a batch range (an NVTX range with a "
                f"payload) of index {warmup} or more")
    if len(j) == 0:
        empty.attrs["note"] = note
        return empty
    host = np.where(j["kind"] == "Device-to-Host", j["dst_kind"], j["src_kind"])
    out = (j.assign(host=host).groupby(["kind", "host"], sort=False)
           .agg(copies=("bytes", "size"), mb=("bytes", "sum"), ms=("duration_ns", "sum")).reset_index())
    out["kb_per_copy"] = out["mb"] / out["copies"] / 1e3
    out["mb"], out["ms"] = out["mb"] / 1e6, out["ms"] / 1e6
    out = out.sort_values("mb", ascending=False, ignore_index=True)[cols]
    out.attrs["note"] = note
    return out
