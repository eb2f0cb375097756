"""Summaries that mirror ``nsys stats`` row for row, as functions of a :class:`labkit.report.Report`.

``nvtx_summary`` (``nvtxsum``/``nvtx_sum``), ``kernel_summary`` (``gpukernsum``/``cuda_gpu_kern_sum``),
``memcpy_summary`` (``gpumemtimesum``/``cuda_gpu_mem_time_sum``), ``gpu_projection``
(``nvtxgpuproj``/``nvtx_gpu_proj_trace``), ``gpu_projection_summary`` (``nvtx_gpu_proj_sum``),
``cuda_api_summary`` (``cudaapisum``/``cuda_api_sum``), ``memcpy_size_summary``
(``gpumemsizesum``/``cuda_gpu_mem_size_sum``) and ``osrt_summary`` (``osrtsum``/``osrt_sum``);
the tests compare them with nsys's own output for the same files. Every summary takes
``window=(start_ns, end_ns)`` or ``within="<NVTX range>"`` (:mod:`labkit.report.window`).
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from labkit.report.launch import call_key, launching_call
from labkit.report.reader import PROJECTION_COLUMNS, SUMMARY_COLUMNS, _empty, _lookup, parse_ints
from labkit.report.nvtx import range_durations
from labkit.report.window import windowed
from labkit.stats.lean import nsys_api_name

__all__ = ["nvtx_summary", "kernel_summary", "memcpy_summary", "gpu_projection", "gpu_projection_summary",
           "cuda_api_summary", "memcpy_size_summary", "osrt_summary", "SIZE_COLUMNS"]

SIZE_COLUMNS = ["name", "count", "total_bytes", "avg_bytes", "med_bytes", "min_bytes", "max_bytes", "stddev_bytes"]


def _summarize(df: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """nsys-style statistics of ``value`` per ``keys``: sum/count/mean/median/min/max/sample stdev."""
    if len(df) == 0:
        out = _empty(keys + SUMMARY_COLUMNS[1:])
        return out.astype({c: "float64" for c in ("avg_ns", "med_ns", "stddev_ns", "time_pct")})
    g = df.groupby(keys, sort=False, dropna=False, observed=True)[value]
    out = g.agg(instances="count", total_ns="sum", avg_ns="mean", med_ns="median", min_ns="min",
                max_ns="max", stddev_ns="std").reset_index()
    out["stddev_ns"] = out["stddev_ns"].fillna(0.0)  # nsys prints 0 for a single instance
    for k in keys:  # categorical keys (large exports) come back as plain text, as from every other path
        if isinstance(out[k].dtype, pd.CategoricalDtype):
            out[k] = out[k].astype(str)
    total = out["total_ns"].sum()
    out["time_pct"] = out["total_ns"] * 100.0 / total if total else 0.0
    for c in ("instances", "total_ns", "min_ns", "max_ns"):
        out[c] = out[c].astype("int64")
    return out.sort_values("total_ns", ascending=False, kind="stable", ignore_index=True)


@windowed
def nvtx_summary(rep) -> pd.DataFrame:
    """As ``nsys stats -r nvtx_sum`` (2022.4: ``nvtxsum``): one row per (domain, range, style).

    Returns: ``name`` (message, without the domain), ``domain`` ('' for the default one),
    ``style`` (PushPop/StartEnd), instances, total/avg/med/min/max/stddev in ns, time_pct;
    sorted by total time, descending.
    """
    if "nvtx" not in rep._frames and rep._db is not None:
        # durations only: no nesting, no payloads (kept in the columnar cache for later loads)
        df = rep._derived("nvtx_durations", lambda: range_durations(rep._db, rep._strings), "NVTX_EVENTS")
        out = _coded_nvtx_summary(df)
        if out is not None:
            return _by_total(out[["name", "domain", "style"] + SUMMARY_COLUMNS[1:]])
    else:
        r = rep.nvtx[rep.nvtx["kind"] != "mark"]
        style = np.where(r["kind"].to_numpy() == "start_end", "StartEnd", "PushPop")
        df = pd.DataFrame({"name": r["name"].to_numpy(), "domain": r["domain"].to_numpy(), "style": style,
                           "duration_ns": r["duration_ns"].to_numpy()})
    out = _summarize(df, ["domain", "name", "style"], "duration_ns")
    return _by_total(out[["name", "domain", "style"] + SUMMARY_COLUMNS[1:]])


def _by_total(out: pd.DataFrame) -> pd.DataFrame:
    """Ranges by total time, descending; equal totals by domain, name and style, so every reading of
    an export (grouped, one pass, labkit.stats.lean) lists them in one order."""
    if len(out) < 2:
        return out
    return out.sort_values(["total_ns", "domain", "name", "style"], ascending=[False, True, True, True],
                           kind="stable", ignore_index=True)


@windowed
def kernel_summary(rep, *, names: str = "demangled", by_launch: bool = False) -> pd.DataFrame:
    """As ``cuda_gpu_kern_sum`` (one row per kernel name), demangled names by default. Whole CUDA
    graphs (a report traced with --cuda-graph-trace=graph) count as kernels named "[CUDA graph N]".

    Args:
        names: "demangled" or "short" (nsys's ``:base``).
        by_launch: also split by grid and block size, as 2022.4's ``gpukernsum`` does
            (adds ``grid`` and ``block`` columns, "X Y Z").
    Returns: name, instances, total/avg/med/min/max/stddev ns, time_pct (+ grid, block).
    """
    t = "CUPTI_ACTIVITY_KIND_KERNEL"
    graphs = rep.graphs
    if (not by_launch and not len(graphs) and "kernels" not in rep._frames and rep._db is not None
            and rep._db.has(t, "start")):
        out = _kernel_summary_sql(rep, t, names)
        if out is not None:
            return out
    k = rep.kernels
    col = "demangled" if names == "demangled" else "name"
    df = pd.DataFrame({"name": np.asarray(k[col], dtype=object), "duration_ns": k["duration_ns"].to_numpy()})
    keys = ["name"]
    if by_launch:
        df["grid"] = k["grid_x"].astype(str) + " " + k["grid_y"].astype(str) + " " + k["grid_z"].astype(str)
        df["block"] = k["block_x"].astype(str) + " " + k["block_y"].astype(str) + " " + k["block_z"].astype(str)
        keys = ["name", "grid", "block"]
    if len(graphs):  # graph-level trace: a graph's kernels are one row, "[CUDA graph N]", not absent
        df = pd.concat([df, graphs[["name", "duration_ns"]].assign(**{c: "" for c in keys[1:]})],
                       ignore_index=True)
    out = _summarize(df, keys, "duration_ns")
    return out[keys + SUMMARY_COLUMNS[1:]]


_DUR_BITS = 40  # a kernel shorter than 2**40 ns (18 minutes): name id and duration share one integer


def _kernel_summary_sql(rep, t: str, names: str) -> pd.DataFrame | None:
    """kernel_summary from one column read (see :func:`_packed_summary`), grouped by name id as nsys does."""
    db = rep._db
    if names == "short":
        key = "[shortName]"
    elif "demangledName" in db.notnull(t):
        key = "[demangledName]"
    else:
        key = "coalesce([demangledName], [shortName])"
    return _packed_summary(rep, t, key)


def _packed_summary(rep, t: str, key: str, where: str = "", label=None) -> pd.DataFrame | None:
    """A summary per string id from one column read: SQLite packs (id, duration) into one integer per
    row, numpy sorts them, and groups, medians and deviations come from the sorted run. ``label``
    turns the StringIds values into names. None when the packing does not fit (the frame path is used)."""
    digest = hashlib.sha1(f"{t}|{key}|{where}".encode()).hexdigest()[:12]
    got = rep._derived(f"packed-{digest}", lambda: _packed(rep, t, key, where), t)  # kept in the columnar cache
    if got is None:
        return None
    packed = got["packed"].to_numpy()
    if len(packed) == 0:
        return _summarize(pd.DataFrame({"name": [], "duration_ns": []}), ["name"], "duration_ns")
    ids, out = _sorted_run_stats(packed)
    names = _lookup(rep._strings, ids)
    names[pd.isna(names)] = ""  # an id StringIds lacks (a trimmed export): blank, as the frame path reads it
    if label is not None:
        names = np.array([label(x) for x in names], dtype=object)
    out.insert(0, "name", names)
    return out.sort_values("total_ns", ascending=False, kind="stable", ignore_index=True)[SUMMARY_COLUMNS]


def _packed(rep, t: str, key: str, where: str) -> pd.DataFrame | None:
    """The sorted ``(id << 40) | duration`` integers of :func:`_packed_summary` (column ``packed``) of
    the rows where SQL condition ``where`` holds (all when empty), or None when they do not fit."""
    db = rep._db
    if db.rows_at_most(t) > 20_000_000:  # group_concat's text is capped at 1 GB
        return None
    # no ORDER BY: the order does not matter once sorted, and SQLite's sort would cost more than numpy's
    if len(rep._strings) >= 2**(62 - _DUR_BITS):
        return None
    parts = [r for r in db.in_parts(f"group_concat(({key} << {_DUR_BITS}) | ([end] - [start])), count(*), "
                                    f"sum([end] - [start])", t, where or "1") if r[1]]
    joined = ",".join(r[0] or "" for r in parts)
    n, want = sum(int(r[1]) for r in parts), sum(r[2] or 0 for r in parts)
    if n == 0:
        return pd.DataFrame({"packed": np.empty(0, dtype=np.int64)})
    try:
        packed = np.sort(parse_ints(joined or ""))
    except ValueError:  # not integers: the frame path reads the table and says what is wrong
        return None
    # a negative duration or a NULL id makes a packed value negative, a duration of 2**40 ns or more
    # loses bits (so the decoded total falls short): either way the frame path takes over
    if len(packed) != n or packed[0] < 0 or int((packed & (2**_DUR_BITS - 1)).sum()) != want:
        return None
    return pd.DataFrame({"packed": packed})


def _sorted_run_stats(packed: np.ndarray) -> tuple[np.ndarray, pd.DataFrame]:
    """Statistics per key of sorted ``(key << 40) | duration`` integers, as nsys computes them:
    the keys, and instances, total/avg/med/min/max/stddev (sample) ns and time_pct per key."""
    ids, dur = packed >> _DUR_BITS, packed & (2**_DUR_BITS - 1)
    first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    count = np.diff(np.r_[first, len(ids)])
    total = np.add.reduceat(dur, first)
    mean = total / count
    dev = dur - np.repeat(mean, count)
    std = np.sqrt(np.add.reduceat(dev * dev, first) / np.maximum(count - 1, 1))
    med = (dur[first + (count - 1) // 2] + dur[first + count // 2]) / 2
    out = pd.DataFrame({"instances": count.astype(np.int64), "total_ns": total.astype(np.int64), "avg_ns": mean,
                        "med_ns": med, "min_ns": dur[first], "max_ns": dur[first + count - 1],
                        "stddev_ns": np.where(count > 1, std, 0.0)})
    out["time_pct"] = out["total_ns"] * 100.0 / total.sum()
    return ids[first], out


def _coded_nvtx_summary(df: pd.DataFrame) -> pd.DataFrame | None:
    """nvtx_summary of a large export's ranges (categorical name, domain, style): one integer code per
    (domain, name, style) packed with the duration, sorted once. None where the codes do not fit."""
    cols = [df[c] for c in ("domain", "name", "style")]
    if not all(isinstance(c.dtype, pd.CategoricalDtype) for c in cols) or not len(df):
        return None
    sizes = [len(c.cat.categories) for c in cols]
    if sizes[0] * sizes[1] * sizes[2] >= 2**(62 - _DUR_BITS):
        return None
    dur = df["duration_ns"].to_numpy()
    if dur.min() < 0 or dur.max() >= 2**_DUR_BITS:
        return None
    code = (cols[0].cat.codes.to_numpy(np.int64) * sizes[1] + cols[1].cat.codes.to_numpy(np.int64)) * sizes[2] \
        + cols[2].cat.codes.to_numpy(np.int64)
    keys, out = _sorted_run_stats(np.sort((code << _DUR_BITS) | dur))
    cats = [np.asarray(c.cat.categories, dtype=object) for c in cols]
    out.insert(0, "style", cats[2][keys % sizes[2]])
    out.insert(0, "domain", cats[0][keys // sizes[2] // sizes[1]])
    out.insert(0, "name", cats[1][keys // sizes[2] % sizes[1]])
    out = out.sort_values("total_ns", ascending=False, kind="stable", ignore_index=True)
    for k in ("name", "domain", "style"):
        out[k] = out[k].astype(str)
    return out


@windowed
def memcpy_summary(rep) -> pd.DataFrame:
    """As ``cuda_gpu_mem_time_sum``: one row per copy kind (``[CUDA memcpy Host-to-Device]``)
    plus ``[CUDA memset]``; columns as :data:`SUMMARY_COLUMNS`, sorted by total time."""
    df = pd.concat([rep.memcpy[["name", "duration_ns"]], rep.memset[["name", "duration_ns"]]],
                   ignore_index=True)
    return _summarize(df, ["name"], "duration_ns")[SUMMARY_COLUMNS]


@windowed
def gpu_projection(rep) -> pd.DataFrame:
    """GPU work of each NVTX range instance, as ``nvtx_gpu_proj_trace`` (2022.4 ``nvtxgpuproj``).

    A GPU operation (kernel, memcpy, memset) belongs to a range when the CUDA API call that
    launched it lies inside the range on the same thread; ranges that end on another thread
    are left out, as nsys does. Only ranges with at least one GPU operation are returned.

    Returns: name, domain, style, start_ns/end_ns/duration_ns (the CPU range),
    proj_start_ns/proj_end_ns/proj_duration_ns (first op start to last op end, as nsys),
    proj_busy_ns (the union of the range's GPU op intervals: the GPU busy with it), num_gpu_ops
    (distinct launching calls), tid, pid, depth, parent and nvtx_index (rows of ``nvtx``);
    sorted by projected start.
    """
    return _project(rep)


@windowed
def gpu_projection_summary(rep) -> pd.DataFrame:
    """Per range name: statistics of projected GPU durations (as ``nvtx_gpu_proj_sum``).

    Returns: name, domain, style, instances, total/avg/med/min/max/stddev ns (projected),
    time_pct, range_total_ns (CPU time of the same instances), gpu_ops.
    """
    p = gpu_projection(rep)
    out = _summarize(p.rename(columns={"proj_duration_ns": "d"}), ["domain", "name", "style"], "d")
    extra = p.groupby(["domain", "name", "style"], sort=False).agg(
        range_total_ns=("duration_ns", "sum"), gpu_ops=("num_gpu_ops", "sum"))
    out = out.merge(extra.reset_index(), on=["domain", "name", "style"], how="left")
    for c in ("range_total_ns", "gpu_ops"):
        out[c] = out[c].fillna(0).astype("int64")
    return out[["name", "domain", "style"] + SUMMARY_COLUMNS[1:] + ["range_total_ns", "gpu_ops"]]


# ----------------------------------------------------------------------------- projection
def _launches(rep) -> dict[str, np.ndarray]:
    """One entry per CUDA API call that launched GPU work: global_tid, call start/end, first op
    start, last op end (ops joined to calls by process and correlation id), sorted by
    (global_tid, call start). Pure numpy: sort + reduceat + searchsorted."""
    ops = rep.gpu_arrays()
    api = rep.api_arrays()
    empty = {c: np.empty(0, dtype=np.int64) for c in ("global_tid", "call_start", "call_end", "op_start", "op_end",
                                                      "ops_start", "ops_end")}
    empty["op_offset"] = np.zeros(1, dtype=np.int64)
    if len(ops["start_ns"]) == 0 or len(api["start_ns"]) == 0:
        return empty
    okey = call_key(ops["pid"], ops["correlation_id"])  # the ops of one call together
    o = np.argsort(okey, kind="stable")
    ok = okey[o]
    first = np.flatnonzero(np.r_[True, ok[1:] != ok[:-1]])
    op_s = np.minimum.reduceat(ops["start_ns"][o], first)
    op_e = np.maximum.reduceat(ops["end_ns"][o], first)
    row = launching_call(api["pid"], api["correlation_id"])(ops["pid"][o][first], ops["correlation_id"][o][first])
    found = row >= 0
    rows = row[found]
    g = api["global_tid"][rows]
    cs = api["start_ns"][rows]
    srt = np.lexsort((cs, g))
    # every op, in the calls' order: call k's ops are ops_start/ops_end[op_offset[k]:op_offset[k + 1]]
    group = np.flatnonzero(found)[srt]
    sizes = np.diff(np.r_[first, len(ok)])[group]
    offset = np.r_[0, np.cumsum(sizes)]
    at = np.repeat(first[group] - offset[:-1], sizes) + np.arange(offset[-1])
    return {"global_tid": g[srt], "call_start": cs[srt], "call_end": api["end_ns"][rows][srt],
            "op_start": op_s[found][srt], "op_end": op_e[found][srt],
            "ops_start": ops["start_ns"][o][at], "ops_end": ops["end_ns"][o][at], "op_offset": offset}


def _busy(calls: dict, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per range (its calls ``lo:hi``): the union of its GPU operations' intervals, ns: the time the
    GPU was doing the range's work, gaps between its kernels left out (a launch-bound range's
    first-to-last span is mostly such gaps). Segmented: sort by (range, start), running end per range."""
    off = calls["op_offset"]
    n = off[hi] - off[lo]
    seg = np.repeat(np.arange(len(lo)), n)
    idx = np.repeat(off[lo] - np.r_[0, np.cumsum(n)[:-1]], n) + np.arange(n.sum())
    if len(idx) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    s, e = calls["ops_start"][idx], calls["ops_end"][idx]
    base = s.min()
    s, e = s - base, e - base
    order = np.lexsort((s, seg))
    seg, s, e = seg[order], s[order], e[order]
    big = int(e.max()) + 1
    if big * (len(lo) + 1) >= 2 ** 62:  # the segment offset would overflow: one range at a time
        busy = np.zeros(len(lo), dtype=np.int64)
        for k in np.unique(seg):
            m = seg == k
            ends = np.maximum.accumulate(e[m])
            prev = np.r_[-1, ends[:-1]]
            busy[k] = int(np.maximum(0, e[m] - np.maximum(s[m], prev)).sum())
        return busy
    key = seg.astype(np.int64) * big
    ends = np.maximum.accumulate(key + e)  # the running end, never carried into the next range
    prev = np.r_[-1, ends[:-1] - key[1:]]  # before a range's first op: negative, below its start
    part = np.maximum(0, e - np.maximum(s, prev))
    return np.bincount(seg, weights=part, minlength=len(lo)).round().astype(np.int64)


def _project(rep) -> pd.DataFrame:
    """The projection itself: see :func:`gpu_projection`."""
    nv = rep.nvtx
    calls = _launches(rep)
    sel = (nv["kind"] != "mark").to_numpy().copy()
    if "end_global_tid" in nv:
        egt = nv["end_global_tid"].to_numpy()
        sel &= (egt < 0) | (egt == nv["global_tid"].to_numpy())
    ridx = np.flatnonzero(sel)
    if len(calls["global_tid"]) == 0 or len(ridx) == 0:
        return _empty(PROJECTION_COLUMNS)
    r_g = nv["global_tid"].to_numpy()[ridx]
    r_s = nv["start_ns"].to_numpy()[ridx]
    r_e = nv["end_ns"].to_numpy()[ridx]
    c_g, c_s, c_e = calls["global_tid"], calls["call_start"], calls["call_end"]
    lo = np.zeros(len(ridx), dtype=np.int64)
    hi = np.zeros(len(ridx), dtype=np.int64)
    # calls of a thread are sequential: those inside [start, end] are one contiguous slice
    bounds = np.searchsorted(c_g, np.unique(c_g))
    bounds = np.append(bounds, len(c_g))
    for i, g in enumerate(np.unique(c_g)):
        a, b = bounds[i], bounds[i + 1]
        mine = np.flatnonzero(r_g == g)
        if len(mine) == 0:
            continue
        ends = np.maximum.accumulate(c_e[a:b])
        lo[mine] = a + np.searchsorted(c_s[a:b], r_s[mine], side="left")
        hi[mine] = a + np.searchsorted(ends, r_e[mine], side="right")
    n_ops = np.maximum(hi - lo, 0)
    keep = n_ops > 0
    lo, hi, n_ops, ridx = lo[keep], hi[keep], n_ops[keep], ridx[keep]
    if len(ridx) == 0:
        return _empty(PROJECTION_COLUMNS)
    op_s = np.append(calls["op_start"], 0)
    op_e = np.append(calls["op_end"], 0)
    idx = np.empty(2 * len(lo), dtype=np.int64)
    idx[0::2], idx[1::2] = lo, hi
    p_s = np.minimum.reduceat(op_s, idx)[0::2]
    p_e = np.maximum.reduceat(op_e, idx)[0::2]
    busy = _busy(calls, lo, hi)
    sub = nv.iloc[ridx]
    out = pd.DataFrame({
        "name": sub["name"].to_numpy(), "domain": sub["domain"].to_numpy(),
        "style": np.where(sub["kind"].to_numpy() == "start_end", "StartEnd", "PushPop").astype(object),
        "start_ns": sub["start_ns"].to_numpy(), "end_ns": sub["end_ns"].to_numpy(),
        "duration_ns": sub["duration_ns"].to_numpy(),
        "proj_start_ns": p_s, "proj_end_ns": p_e, "proj_duration_ns": p_e - p_s, "proj_busy_ns": busy,
        "num_gpu_ops": n_ops,
        "tid": sub["tid"].to_numpy(), "pid": sub["pid"].to_numpy(), "depth": sub["depth"].to_numpy(),
        "parent": sub["parent"].to_numpy(), "nvtx_index": ridx,
    })
    out = out.sort_values(["proj_start_ns", "proj_duration_ns"], ascending=[True, False], kind="stable",
                          ignore_index=True)
    return out[PROJECTION_COLUMNS]


@windowed
def cuda_api_summary(rep) -> pd.DataFrame:
    """As ``nsys stats -r cuda_api_sum`` (2022.4: ``cudaapisum``): one row per CUDA runtime/driver
    call name, synchronizing calls (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ...) included.

    Returns: name (nsys's spelling), instances (nsys's "Num Calls"), total/avg/med/min/max/stddev
    in ns, time_pct; sorted by total time, descending.
    """
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if "cuda_api" not in rep._frames and rep._db is not None and rep._db.has(t, "start", "nameId"):
        out = _packed_summary(rep, t, "[nameId]", label=nsys_api_name)
        if out is not None:
            return out
    a = rep.cuda_api
    col = "nsys_name" if "nsys_name" in a else "name"
    df = pd.DataFrame({"name": np.asarray(a[col], dtype=object), "duration_ns": a["duration_ns"].to_numpy()})
    return _summarize(df, ["name"], "duration_ns")[SUMMARY_COLUMNS]


@windowed
def osrt_summary(rep) -> pd.DataFrame:
    """As ``nsys stats -r osrt_sum`` (2022.4: ``osrtsum``): one row per OS runtime call name
    (event class 27, as nsys counts them). Empty where ``osrt`` was not traced (``rep.notes`` do not
    change: an untraced kind is not a fault).

    Returns: name, instances (nsys's "Num Calls"), total/avg/med/min/max/stddev ns, time_pct.
    """
    t = "OSRT_API"
    if "osrt" not in rep._frames and rep._db is not None and rep._db.has(t, "start", "nameId"):
        where = "eventClass == 27" if "eventClass" in rep._db.columns(t) else ""
        out = _packed_summary(rep, t, "[nameId]", where)
        if out is not None:
            return out
    o = rep.osrt
    if "event_class" in o and (o["event_class"] >= 0).any():
        o = o[o["event_class"] == 27]
    df = pd.DataFrame({"name": np.asarray(o["name"], dtype=object), "duration_ns": o["duration_ns"].to_numpy()})
    return _summarize(df, ["name"], "duration_ns")[SUMMARY_COLUMNS]


@windowed
def memcpy_size_summary(rep) -> pd.DataFrame:
    """As ``nsys stats -r cuda_gpu_mem_size_sum`` (2022.4: ``gpumemsizesum``): bytes moved per copy
    kind and by memsets, with the names of :func:`memcpy_summary` (``[CUDA memcpy Host-to-Device]``,
    ``[CUDA memset]``).

    Returns: name, count, total/avg/med/min/max/stddev in bytes (:data:`SIZE_COLUMNS`); sorted by
    total bytes, descending.
    """
    df = pd.concat([rep.memcpy[["name", "bytes"]], rep.memset[["name", "bytes"]]], ignore_index=True)
    if len(df) == 0:
        return _empty(SIZE_COLUMNS).astype({c: "float64" for c in ("avg_bytes", "med_bytes", "stddev_bytes")})
    df["name"] = df["name"].astype(object)
    g = df.groupby("name", sort=True)["bytes"]
    out = g.agg(count="count", total_bytes="sum", avg_bytes="mean", med_bytes="median", min_bytes="min",
                max_bytes="max", stddev_bytes="std").reset_index()
    out["stddev_bytes"] = out["stddev_bytes"].fillna(0.0)
    for c in ("count", "total_bytes", "min_bytes", "max_bytes"):
        out[c] = out[c].astype("int64")
    return out.sort_values("total_bytes", ascending=False, kind="stable", ignore_index=True)[SIZE_COLUMNS]
