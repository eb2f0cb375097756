"""Host-device copies of a report: per-direction table and the pageable copies that pinned memory would speed up."""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.report.window import windowed

__all__ = ["copy_table", "pageable_copies"]


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
