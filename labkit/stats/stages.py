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


import numpy as np
import pandas as pd

from labkit.stats.idle import busy_intervals, depth, gpu_idle_breakdown, gpu_idle_gaps, gpu_utilization
from labkit.stats.blocked import blocked_in, blocked_intervals
from labkit.stats.calls import is_wait
from labkit.stats.summaries import gpu_projection
from labkit.report.cpu import osrt_calls
from labkit.report.window import windowed

__all__ = ["steady_window", "stage_overlap", "stage_table", "batches", "gpu_utilization", "gpu_idle_gaps", "gpu_idle_breakdown", "choose_stages", "busy_intervals", "ITEMS_MARK"]

ITEMS_MARK = "items"  # same value as labkit.annotate.ITEMS_MARK (not imported: keep this module light)


# ----------------------------------------------------------------------------- stages and batches
def _items_per_range(nv: pd.DataFrame) -> np.ndarray:
    """Item count of each nvtx row from its "items" marks (0 where none)."""
    items = np.zeros(len(nv), dtype=np.int64)
    m = nv[(nv["kind"] == "mark") & (nv["name"] == ITEMS_MARK) & (nv["parent"] >= 0)]
    if len(m):
        s = m.groupby("parent")["payload"].sum()
        items[s.index.to_numpy()] = s.to_numpy(dtype=np.float64).astype(np.int64)
    return items


def _in_flagged(nv: pd.DataFrame, flag: np.ndarray) -> np.ndarray:
    """True for rows that are flagged (``flag``) or nested, at any depth, in a flagged range."""
    out = flag.copy()
    parent = nv["parent"].to_numpy()
    for _ in range(int(nv["depth"].max()) if len(nv) else 0):  # one level per pass, vectorized
        has = parent >= 0
        out[has] |= out[parent[has]]
    return out


def _warmup_mask(nv: pd.DataFrame, warmup: int) -> np.ndarray:
    """True for rows of warm-up batches: payload below ``warmup``, or nested in such a range."""
    pay = nv["payload"].astype("float64").to_numpy()
    return _in_flagged(nv, ~np.isnan(pay) & (pay < warmup))


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


def _beside_marked(nv: pd.DataFrame, labels: pd.Series, ranges: np.ndarray, marked: np.ndarray) -> tuple[str, ...]:
    """The labels of the ``ranges`` that carry no ``items`` mark but stand beside the ``marked`` ones:
    repeated (two instances or more), neither holding a marked range (an envelope such as an epoch)
    nor nested in one (a part of a stage), and not named as a wait (:func:`labkit.stats.calls.is_wait`).
    A checkpoint every tenth step, in a loop whose steps carry the mark, is a stage too: leaving it
    out hid its time."""
    parent = nv["parent"].to_numpy(np.int64)
    holds = np.zeros(len(nv), dtype=bool)  # holds a marked range
    up = parent[marked]
    while len(up := up[up >= 0]):
        holds[up] = True
        up = parent[up]
    cand = ranges & ~_in_flagged(nv, marked)
    lab = labels.to_numpy()
    bad = set(lab[cand & holds]) | set(lab[marked])
    counts = pd.Series(lab[cand]).value_counts()
    return tuple(str(x) for x in dict.fromkeys(lab[cand]) if counts[x] > 1 and x not in bad and not is_wait(x))


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
        beside = _beside_marked(nv, labels, ranges, ranges & (items > 0))
        if beside:
            return marked + beside, ("stages: the ranges that carry an 'items' mark (labkit.annotate), and the "
                                     f"repeated ranges beside them without one ({', '.join(beside)})")
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
        stages: range names to include, in this order (default: all, by CPU time; in an annotated
            report, one whose ranges carry ``items`` marks, a range without items whose name says it
            waits (:data:`labkit.stats.calls.WAIT_WORDS`, a ``queue_wait``) is its thread's blocked
            time, not a stage, and is left out).
        warmup: instances whose payload (batch index) is below this are left out, with every
            range nested inside them.
    Ranges of the same name in different NVTX domains are different stages (one row each).

    Returns: stage, domain ('' for the default domain), instances, items, cpu_ms, blocked_ms (of cpu_ms, the time its
        thread was blocked inside its ranges: sleeps, waits, locks, syncs, blocking copies; :mod:`labkit.stats.blocked`),
        latency_ms (of blocked_ms, the time blocked on the outside world: sleeps, reads, polls),
        cpu_ms_per_instance, cpu_ms_per_item, gpu_ms
        (kernel-busy: the union of the GPU ops launched inside each instance, summed), gpu_ms_per_item,
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
    elif (r["items"] > 0).any():
        r = r[(r["items"] > 0) | ~r["name"].map(is_wait).astype(bool)]
    cols = ["stage", "domain", "instances", "items", "cpu_ms", "blocked_ms", "latency_ms", "cpu_ms_per_instance",
            "cpu_ms_per_item",
            "gpu_ms", "gpu_ms_per_item", "wall_share", "threads"]
    if len(r) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("stage", "domain") else "float64") for c in cols})
    proj = gpu_projection(rep)
    gpu = pd.Series(0, index=r.index, dtype="int64")
    if len(proj):
        pj = proj.set_index("nvtx_index")["proj_busy_ns"]  # the GPU busy with it, not its first-to-last span
        gpu = pj.reindex(r.index).fillna(0).astype("int64")
    r = r.assign(gpu_ns=gpu.to_numpy(), domain=domains(r), blocked_ns=blocked_in(r, blocked_intervals(rep)),
                 latency_ns=blocked_in(r, blocked_intervals(rep, kind="latency")))
    g = r.groupby(["domain", "name"], sort=False)
    out = pd.DataFrame({
        "instances": g.size(),
        "items": g["items"].sum(),
        "cpu_ms": g["duration_ns"].sum() / 1e6,
        "blocked_ms": g["blocked_ns"].sum() / 1e6,
        "latency_ms": g["latency_ns"].sum() / 1e6,
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


# ----------------------------------------------------------------------------- copies
def _stage_rows(rep, names, warmup: int) -> pd.DataFrame:
    nv = rep.nvtx
    r = nv[(nv["kind"] != "mark") & nv["name"].isin(list(names))]
    if warmup:
        pay = r["payload"].astype("float64")
        r = r[~(pay.notna() & (pay < warmup))]
    return r


def trace_span(rep) -> tuple[int, int]:
    """First start to last end over NVTX ranges, CUDA calls, OS runtime calls and GPU operations;
    inside the window of a restricted report (``labkit.report.window.restrict``), whose events may
    end past it (a call blocked in ``poll`` until the end of the run would stretch it)."""
    lo, hi = [], []
    for f in (rep.nvtx, rep.cuda_api, osrt_calls(rep.osrt), rep.gpu_ops()):
        if len(f):
            lo.append(int(f["start_ns"].min()))
            hi.append(int(f["end_ns"].max()))
    if not lo:
        return (0, 0)
    span = rep.meta.get("window") if isinstance(getattr(rep, "meta", None), dict) else None
    if span:
        return (max(min(lo), int(span[0][0])), max(min(max(hi), int(span[-1][1])), max(min(lo), int(span[0][0]))))
    return (min(lo), max(hi))


@windowed
def steady_window(rep, *, stage: str | None = "infer", warmup: int = 0, count: int = 3) -> tuple[int, int]:
    """(start_ns, end_ns) of a window about ``count`` iterations wide, past the warm-up.

    The window starts half a period before the first ``stage`` range whose payload (batch index)
    is at least ``warmup``, the period being the median time between consecutive ``stage``
    ranges, so it shows that many batches whether the stages run one after another or overlap.
    A report with no ``stage`` range at all (any program but the lab's) falls back, as stated
    here, to its outermost repeated NVTX range (a loop's iteration: the top-level name that
    repeats with the most time), and with none of those to the whole trace span. For
    ``plot_timeline(rep, window=...)`` and ``labkit.report.reader.trim_export``.

    Raises: ValueError when ``stage`` ranges exist but none is past the warm-up; ArgumentError
        (a ValueError) for a negative or non-whole ``warmup`` or a ``count`` below 1.
    """
    from labkit.errors import count as whole

    warmup, count = whole(warmup, "warmup"), whole(count, "count", minimum=1)
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
    dt, running = depth(r["start_ns"].to_numpy(), r["end_ns"].to_numpy())
    busy, two = float(dt[running >= 1].sum()), float(dt[running >= 2].sum())
    total = float((r["end_ns"] - r["start_ns"]).sum())
    nan = float("nan")
    return {"busy_ms": busy / 1e6, "stage_ms": total / 1e6, "concurrency": total / busy if busy else nan,
            "overlap_frac": two / busy if busy else nan}


