"""Kernel statistics as nsys recipes and HTA give them: duration percentiles per kernel name, launch
latency and queueing, per-stream totals, and copy bandwidth.

- :func:`kernel_percentiles`: per kernel name, count, total, mean, min, p50, p90, p99, max and
  deviation of durations (``nsys stats -r cuda_gpu_kern_sum`` and the ``cuda_gpu_kern_sum`` /
  ``kernel_duration`` recipes; count, total, min, median and max equal nsys's figures).
- :func:`launch_latency`: per kernel name, the time from the start of the CUDA API call that
  launched each kernel to the kernel's start (HTA's launch delay), nsys's "API time" and "queue
  time" (``kernexecsum``/``cuda_kern_exec_sum``: the call's end to the kernel's start, counted
  where positive), and how many kernels were waiting on the same stream at each launch.
- :func:`queue_depth`: per stream, kernels launched but not yet started at each launch, summarised.
- :func:`stream_summary`: per process, device and stream: kernels, copies and memsets, their
  counts and busy time.
- :func:`copy_bandwidth`: per copy kind (direction), bytes, time and GB/s (bytes / duration, as
  ``gpumemsizesum`` over ``gpumemtimesum``), optionally split by source and destination memory.

Times are in ns, sizes in bytes, bandwidth in GB/s (10**9 bytes/s = bytes/ns). Percentiles
interpolate linearly between the two nearest durations (numpy's and pandas' default, as HTA);
p50 is the median nsys prints. Each function takes ``window=``/``within=``
(:mod:`labkit.report.window`). Vectorized: one sort per table.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.report.launch import launching_call
from labkit.report.window import windowed

__all__ = ["kernel_percentiles", "launch_latency", "queue_depth", "stream_summary", "copy_bandwidth",
           "PERCENTILE_COLUMNS", "LATENCY_COLUMNS", "QUEUE_COLUMNS", "STREAM_COLUMNS", "BANDWIDTH_COLUMNS"]

PERCENTILE_COLUMNS = ["name", "count", "total_ns", "mean_ns", "min_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns",
                      "stddev_ns", "time_pct"]
LATENCY_COLUMNS = ["name", "launches", "latency_med_ns", "latency_p90_ns", "latency_max_ns", "api_mean_ns",
                   "api_med_ns", "api_max_ns", "queued", "queue_mean_ns", "queue_med_ns", "queue_max_ns",
                   "depth_mean", "depth_max"]
QUEUE_COLUMNS = ["pid", "device_id", "stream_id", "launches", "depth_mean", "depth_p50", "depth_p90", "depth_max"]
STREAM_COLUMNS = ["pid", "device_id", "stream_id", "kernels", "kernel_ns", "copies", "copy_ns", "copy_bytes",
                  "memsets", "memset_ns", "busy_ns", "first_ns", "last_ns", "busy_pct"]
BANDWIDTH_COLUMNS = ["name", "count", "total_bytes", "total_ns", "gb_per_s", "med_gb_per_s", "max_gb_per_s"]
_STREAM_KEYS = ["pid", "device_id", "stream_id"]


# ----------------------------------------------------------------------------- grouped statistics
def _grouped(codes: np.ndarray, values: np.ndarray, qs=(0.5,)) -> dict[str, np.ndarray]:
    """Statistics of ``values`` per integer group code, from one sort: ``group`` (the codes present,
    ascending), count, total, mean, min, max, stddev (sample; 0 for one value) and ``q<q>`` per
    quantile in ``qs`` (linear interpolation, numpy's default)."""
    codes = np.asarray(codes, dtype=np.int64)
    values = np.asarray(values)
    o = np.lexsort((values, codes))
    c, v = codes[o], values[o].astype(np.float64)
    if len(c) == 0:
        out = {k: np.empty(0) for k in ("count", "total", "mean", "min", "max", "stddev")}
        out["group"] = np.empty(0, dtype=np.int64)
        out.update({f"q{q}": np.empty(0) for q in qs})
        return out
    first = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    count = np.diff(np.r_[first, len(c)])
    total = np.add.reduceat(v, first)
    mean = total / count
    dev = v - np.repeat(mean, count)
    std = np.sqrt(np.add.reduceat(dev * dev, first) / np.maximum(count - 1, 1))
    out = {"group": c[first], "count": count, "total": total, "mean": mean, "min": v[first],
           "max": v[first + count - 1], "stddev": np.where(count > 1, std, 0.0)}
    for q in qs:
        pos = first + q * (count - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, first + count - 1)
        out[f"q{q}"] = v[lo] + (v[hi] - v[lo]) * (pos - lo)
    return out


def _at(stats: dict, groups: np.ndarray, key: str, fill=np.nan) -> np.ndarray:
    """``stats[key]`` (of :func:`_grouped`, over some groups) for each of ``groups``; ``fill`` where absent."""
    have = stats["group"]
    out = np.full(len(groups), fill, dtype=np.float64)
    if len(have):
        where = np.minimum(np.searchsorted(have, groups), len(have) - 1)
        hit = have[where] == groups
        out[hit] = stats[key][where[hit]]
    return out


def _codes(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """One integer code per distinct row of ``frame[keys]`` (numbered in order of first appearance)
    and the distinct rows (row i = code i). Each key is factorized alone (a categorical by its
    codes) and the codes combined, re-factorized after each key so they stay below the row count."""
    code = None
    for k in keys:
        c = pd.factorize(frame[k], use_na_sentinel=False)[0].astype(np.int64)
        code = c if code is None else pd.factorize(code * (int(c.max(initial=0)) + 1) + c)[0].astype(np.int64)
    if code is None or not len(code):
        return np.empty(0, dtype=np.int64), frame[keys].iloc[:0].reset_index(drop=True)
    top = np.maximum.accumulate(code)  # codes number first appearances: a new one raises the running max
    first = np.flatnonzero(np.r_[True, top[1:] > top[:-1]])
    uniq = frame[keys].iloc[first].reset_index(drop=True)
    return code, uniq.astype({k: object for k in keys if isinstance(uniq[k].dtype, pd.CategoricalDtype)})


def _kernel_frame(rep, names: str) -> pd.DataFrame:
    """Kernels (and whole CUDA graphs, named "[CUDA graph N]", as :func:`kernel_summary`): name,
    duration, start, end, pid, device_id, stream_id, correlation_id."""
    if names not in ("demangled", "short"):
        from labkit.errors import LabkitError

        raise LabkitError(f"names={names!r}: give 'demangled' or 'short'")
    k = rep.kernels
    cols = ["pid", "device_id", "stream_id", "correlation_id", "start_ns", "end_ns", "duration_ns"]
    col = "demangled" if names == "demangled" else "name"
    df = k[cols].assign(name=k[col].array)  # a categorical stays one (factorized by its codes)
    g = rep.graphs
    if len(g):
        df = pd.concat([df, g[cols].assign(name=np.asarray(g["name"], dtype=object))], ignore_index=True)
    return df


# ----------------------------------------------------------------------------- percentiles
@windowed
def kernel_percentiles(rep, *, names: str = "demangled") -> pd.DataFrame:
    """Per kernel name: the distribution of kernel durations (nsys's ``cuda_gpu_kern_sum``, with
    percentiles as its ``kernel_duration`` recipe and HTA give them).

    Args:
        names: "demangled" (nsys's default) or "short" (``:base``).
    Returns: :data:`PERCENTILE_COLUMNS`: name, count, total_ns, mean_ns, min_ns, p50_ns (the
        median), p90_ns, p99_ns, max_ns, stddev_ns (sample), time_pct (of all kernel time);
        sorted by total time, descending.
    """
    df = _kernel_frame(rep, names)
    codes, uniq = _codes(df, ["name"])
    s = _grouped(codes, df["duration_ns"].to_numpy(), qs=(0.5, 0.9, 0.99))
    total = s["total"].sum()
    out = pd.DataFrame({
        "name": uniq["name"].to_numpy(dtype=object)[s["group"]], "count": s["count"].astype(np.int64),
        "total_ns": s["total"].astype(np.int64), "mean_ns": s["mean"], "min_ns": s["min"].astype(np.int64),
        "p50_ns": s["q0.5"], "p90_ns": s["q0.9"], "p99_ns": s["q0.99"], "max_ns": s["max"].astype(np.int64),
        "stddev_ns": s["stddev"], "time_pct": s["total"] * 100.0 / total if total else s["total"] * 0.0})
    return out.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable", ignore_index=True)


# ----------------------------------------------------------------------------- launches and queues
def _launched(rep, names: str) -> pd.DataFrame:
    """Each kernel joined to the CUDA API call that launched it (by process and correlation id):
    the kernel frame plus call_start, call_end, tid, api (nsys's spelling of the call's name) and
    depth (kernels on the same stream launched earlier and not yet started at this launch).
    ``attrs["unmatched"]``: kernels whose call the report lacks (left out)."""
    k = _kernel_frame(rep, names)
    api = rep.cuda_api
    out = k.iloc[:0].assign(call_start=np.empty(0, np.int64), call_end=np.empty(0, np.int64),
                            tid=np.empty(0, np.int64), api=np.empty(0, object))
    if len(k) and len(api):
        row = launching_call(api["pid"], api["correlation_id"])(k["pid"], k["correlation_id"])
        found = row >= 0
        rows = row[found]
        names_col = "nsys_name" if "nsys_name" in api else "name"
        out = k[found].reset_index(drop=True).assign(
            call_start=api["start_ns"].to_numpy(np.int64)[rows], call_end=api["end_ns"].to_numpy(np.int64)[rows],
            tid=api["tid"].to_numpy(np.int64)[rows], api=np.asarray(api[names_col], dtype=object)[rows])
    out["depth"] = _depth(out)
    out.attrs["unmatched"] = int(len(k) - len(out))
    return out


def _depth(launches: pd.DataFrame) -> np.ndarray:
    """For each launch: kernels of the same stream whose call started before it and which had not
    started by then (a kernel seen to start before its own call started counts from the call)."""
    n = len(launches)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    codes, _ = _codes(launches, _STREAM_KEYS)
    t = launches["call_start"].to_numpy(np.int64)
    started = np.maximum(launches["start_ns"].to_numpy(np.int64), t)
    t0 = min(t.min(), started.min())
    span = int(max(t.max(), started.max()) - t0) + 1
    if span * (int(codes.max()) + 1) < 2**62:  # one sorted key per (stream, time): one searchsorted for all
        base = codes * span - t0
        q, a, b = t + base, np.sort(t + base), np.sort(started + base)
        return np.searchsorted(a, q, side="left") - np.searchsorted(b, q, side="left")
    depth = np.empty(n, dtype=np.int64)  # timestamps too far apart to pack: per stream
    for c in np.unique(codes):
        m = codes == c
        depth[m] = (np.searchsorted(np.sort(t[m]), t[m], side="left")
                    - np.searchsorted(np.sort(started[m]), t[m], side="left"))
    return depth


@windowed
def launch_latency(rep, *, names: str = "demangled", by_call: bool = False) -> pd.DataFrame:
    """Per kernel name: how long kernels took to start once launched, and how deep the queue was.

    For each kernel joined to its launching CUDA API call (process and correlation id): latency =
    kernel start - call start (HTA's launch delay); API time = the call's duration; queue time =
    kernel start - call end, counted only where positive (``queued`` launches), as nsys's
    ``kernexecsum``/``cuda_kern_exec_sum``; depth = kernels of the same stream launched earlier and
    not yet started when this one was launched.

    Args:
        names: "demangled" or "short".
        by_call: also split by pid, tid, device_id and api (the launching call), as ``kernexecsum``
            does (those columns come first).
    Returns: :data:`LATENCY_COLUMNS` (ns; depth in kernels), sorted by launches, then name.
        ``attrs["unmatched"]``: kernels left out because the report lacks their launching call.
    """
    ln = _launched(rep, names)
    keys = (["pid", "tid", "device_id", "api"] if by_call else []) + ["name"]
    codes, uniq = _codes(ln, keys) if len(ln) else \
        (np.empty(0, np.int64), pd.DataFrame({k: pd.Series(dtype=object if k in ("api", "name") else "int64")
                                              for k in keys}))
    start = ln["start_ns"].to_numpy(np.int64)
    lat = _grouped(codes, start - ln["call_start"].to_numpy(np.int64), qs=(0.5, 0.9))
    apit = _grouped(codes, ln["call_end"].to_numpy(np.int64) - ln["call_start"].to_numpy(np.int64))
    wait = start - ln["call_end"].to_numpy(np.int64)
    pos = wait > 0
    q = _grouped(codes[pos], wait[pos])
    dep = _grouped(codes, ln["depth"].to_numpy())
    g = lat["group"]
    out = uniq.iloc[g].reset_index(drop=True)
    out["launches"] = lat["count"].astype(np.int64)
    out["latency_med_ns"], out["latency_p90_ns"], out["latency_max_ns"] = lat["q0.5"], lat["q0.9"], lat["max"]
    out["api_mean_ns"], out["api_med_ns"], out["api_max_ns"] = apit["mean"], apit["q0.5"], apit["max"]
    out["queued"] = _at(q, g, "count", 0).astype(np.int64)
    out["queue_mean_ns"], out["queue_med_ns"], out["queue_max_ns"] = (_at(q, g, k) for k in ("mean", "q0.5", "max"))
    out["depth_mean"], out["depth_max"] = dep["mean"], dep["max"].astype(np.int64)
    out = out[keys[:-1] + LATENCY_COLUMNS]
    out = out.sort_values(["launches", "name"], ascending=[False, True], kind="stable", ignore_index=True)
    out.attrs["unmatched"] = ln.attrs["unmatched"]
    return out


@windowed
def queue_depth(rep) -> pd.DataFrame:
    """Per stream: how many kernels were launched but not yet started at each kernel launch
    (kernels whose launching call the report lacks are left out).

    Returns: :data:`QUEUE_COLUMNS`: pid, device_id, stream_id, launches, depth_mean, depth_p50,
        depth_p90, depth_max; sorted by deepest mean queue.
    """
    ln = _launched(rep, "short")
    if not len(ln):
        return pd.DataFrame({c: pd.Series(dtype="float64" if c.startswith("depth_") and c != "depth_max"
                                          else "int64") for c in QUEUE_COLUMNS})
    codes, uniq = _codes(ln, _STREAM_KEYS)
    d = _grouped(codes, ln["depth"].to_numpy(), qs=(0.5, 0.9))
    out = uniq.iloc[d["group"]].reset_index(drop=True)
    out["launches"] = d["count"].astype(np.int64)
    out["depth_mean"], out["depth_p50"], out["depth_p90"] = d["mean"], d["q0.5"], d["q0.9"]
    out["depth_max"] = d["max"].astype(np.int64)
    return out.sort_values(["depth_mean", "launches"], ascending=False, kind="stable", ignore_index=True)[QUEUE_COLUMNS]


# ----------------------------------------------------------------------------- streams and copies
@windowed
def stream_summary(rep) -> pd.DataFrame:
    """Per process, device and stream: kernels (whole CUDA graphs included), copies and memsets, their
    counts and summed durations, copy bytes, and busy_ns: the union of all of them (what the stream
    had in flight; on one stream operations run in order, so it is at most the sum).

    Returns: :data:`STREAM_COLUMNS`; first_ns/last_ns: first operation start, last operation end;
        busy_pct: busy_ns of that span. Sorted by busy time, descending.
    """
    ops = rep.gpu_ops()
    if not len(ops):
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "busy_pct" else "int64") for c in STREAM_COLUMNS})
    cat = ops["category"].to_numpy(dtype=object)
    cat = np.where(cat == "graph", "kernel", cat)
    codes, uniq = _codes(ops, _STREAM_KEYS)
    n = len(uniq)
    out = uniq.copy()
    dur = ops["duration_ns"].to_numpy(np.int64)
    for c, label in (("kernel", "kernels"), ("memcpy", "copies"), ("memset", "memsets")):
        m = cat == c
        out[label] = np.bincount(codes[m], minlength=n).astype(np.int64)
        out[{"kernels": "kernel_ns", "copies": "copy_ns", "memsets": "memset_ns"}[label]] = \
            np.bincount(codes[m], weights=dur[m], minlength=n).astype(np.int64)
    mc = rep.memcpy
    out["copy_bytes"] = 0
    if len(mc):
        mcodes = pd.MultiIndex.from_frame(uniq).get_indexer(pd.MultiIndex.from_frame(mc[_STREAM_KEYS]))
        out["copy_bytes"] = np.bincount(mcodes, weights=mc["bytes"].to_numpy(np.float64), minlength=n).astype(np.int64)
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    o = np.lexsort((s, codes))
    c, s, e = codes[o], s[o], e[o]
    first = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    # union per stream: a run starts where an op begins after every earlier op of its stream ended
    reach = pd.Series(e).groupby(c).cummax().to_numpy()
    prev = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    new = np.r_[True, c[1:] != c[:-1]] | (s > prev)
    run = np.flatnonzero(new)
    run_len = np.maximum.reduceat(e, run) - s[run]
    out["busy_ns"] = np.bincount(c[run], weights=run_len.astype(np.float64), minlength=n).astype(np.int64)
    for col, vals in (("first_ns", s[first]), ("last_ns", np.maximum.reduceat(e, first))):
        full = np.zeros(n, dtype=np.int64)
        full[c[first]] = vals  # sorted by start within each stream: its first row starts first
        out[col] = full
    span = (out["last_ns"] - out["first_ns"]).to_numpy(np.float64)
    out["busy_pct"] = np.where(span > 0, out["busy_ns"] * 100.0 / np.where(span > 0, span, 1), 0.0)
    out = out.sort_values(["busy_ns"] + _STREAM_KEYS, ascending=[False, True, True, True], kind="stable",
                          ignore_index=True)
    return out[STREAM_COLUMNS]


@windowed
def copy_bandwidth(rep, *, by_memory: bool = False) -> pd.DataFrame:
    """Per copy kind (``[CUDA memcpy Host-to-Device]``... and ``[CUDA memset]``, the names of
    :func:`labkit.memcpy_summary`): operations, bytes, time and bandwidth.

    gb_per_s = total bytes / total duration (bytes per ns = GB/s): what ``gpumemsizesum``'s total
    over ``gpumemtimesum``'s total gives. med_gb_per_s and max_gb_per_s: of single operations (those
    with a positive duration). Pageable host memory shows as lower bandwidth: ``by_memory=True``
    splits each kind by source and destination memory (``src_kind``, ``dst_kind`` columns after
    the name; a memset's memory is its destination).

    Returns: :data:`BANDWIDTH_COLUMNS` (+ src_kind, dst_kind), sorted by total time, descending.
    """
    mc, ms = rep.memcpy, rep.memset
    df = pd.concat([
        pd.DataFrame({"name": np.asarray(mc["name"], dtype=object), "src_kind": np.asarray(mc["src_kind"], dtype=object),
                      "dst_kind": np.asarray(mc["dst_kind"], dtype=object), "bytes": mc["bytes"].to_numpy(np.int64),
                      "duration_ns": mc["duration_ns"].to_numpy(np.int64)}),
        pd.DataFrame({"name": np.asarray(ms["name"], dtype=object), "src_kind": "",
                      "dst_kind": np.asarray(ms["mem_kind"], dtype=object), "bytes": ms["bytes"].to_numpy(np.int64),
                      "duration_ns": ms["duration_ns"].to_numpy(np.int64)})], ignore_index=True)
    keys = ["name", "src_kind", "dst_kind"] if by_memory else ["name"]
    cols = keys + BANDWIDTH_COLUMNS[1:]
    if not len(df):
        return pd.DataFrame({c: pd.Series(dtype=object if c in keys else "float64" if "gb" in c else "int64")
                             for c in cols})
    df[keys] = df[keys].fillna("")
    codes, uniq = _codes(df, keys)
    dur = df["duration_ns"].to_numpy(np.int64)
    by = df["bytes"].to_numpy(np.int64)
    t = _grouped(codes, dur)
    b = _grouped(codes, by)
    ok = dur > 0
    rate = _grouped(codes[ok], by[ok] / dur[ok])
    out = uniq.iloc[t["group"]].reset_index(drop=True)
    out["count"] = t["count"].astype(np.int64)
    out["total_bytes"] = b["total"].astype(np.int64)
    out["total_ns"] = t["total"].astype(np.int64)
    out["gb_per_s"] = np.where(t["total"] > 0, b["total"] / np.where(t["total"] > 0, t["total"], 1), np.nan)
    out["med_gb_per_s"], out["max_gb_per_s"] = _at(rate, t["group"], "q0.5"), _at(rate, t["group"], "max")
    return out.sort_values(["total_ns"] + keys, ascending=[False] + [True] * len(keys), kind="stable",
                           ignore_index=True)[cols]
