"""Load an Nsight Systems report (``.nsys-rep`` or its SQLite export) as pandas DataFrames.

The loader reads the export's own schema: every table and column is checked before use,
because exports of different nsys versions differ (2022.4 has ``EXPORT_META_DATA``, 2025.3
``META_DATA_EXPORT`` and more columns; tables vanish when nothing of their kind ran).
All times are integer nanoseconds on the report's own clock; names are resolved from
``StringIds`` with numpy indexing (no Python loop over rows). The CUDA frames are read on first
use, one integer column at a time (SQLite joins a column into one text that numpy parses, about
twice as fast as row tuples), and each summary reads only the columns it needs: a report with
1.4 million kernels and 200,000 NVTX ranges is loaded and summarized in about 6 s of CPU here.

Summaries mirror ``nsys stats`` (``nvtxsum``/``nvtx_sum``, ``gpukernsum``/``cuda_gpu_kern_sum``,
``gpumemtimesum``/``cuda_gpu_mem_time_sum``, ``nvtxgpuproj``/``nvtx_gpu_proj_trace``) row for
row; the tests compare them with nsys's own output for the same files.
"""
from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from labkit.errors import LabkitError

__all__ = [
    "Report",
    "load_report",
    "ReportError",
    "ReportWarning",
    "NVTX_COLUMNS",
    "KERNEL_COLUMNS",
    "MEMCPY_COLUMNS",
    "MEMSET_COLUMNS",
    "CUDA_API_COLUMNS",
    "SYNC_COLUMNS",
    "SUMMARY_COLUMNS",
    "cli_summary",
]


class ReportError(LabkitError):
    """A report file is missing, unreadable or not an Nsight Systems export."""


class ReportWarning(UserWarning):
    """Something expected is absent from a report (no NVTX, no CUDA tables, ...)."""


# Event types of NVTX_EVENTS (stable across 2022.4 .. 2025.3; re-read from
# ENUM_NSYS_EVENT_TYPE when the export carries it).
_NVTX_TYPES = {
    "NvtxMark": 34,
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtMark": 65,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
    "NvtxDomainCreate": 75,
}

# copyKind -> label, as ENUM_CUDA_MEMCPY_OPER of 2025.3 spells it (used when the enum is absent)
_MEMCPY_KIND = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device",
}
_MEM_KIND = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
    5: "Device Static", 6: "Managed Static", 7: "Unknown",
}
_SYNC_KIND = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}

NVTX_COLUMNS = ["name", "domain", "start_ns", "end_ns", "duration_ns", "tid", "pid", "global_tid",
                "thread_name", "depth", "parent", "kind", "payload", "color", "category", "ended"]
KERNEL_COLUMNS = ["name", "demangled", "device_id", "context_id", "stream_id", "correlation_id",
                  "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                  "start_ns", "end_ns", "duration_ns", "pid"]
MEMCPY_COLUMNS = ["name", "kind", "bytes", "src_kind", "dst_kind", "pageable", "pinned", "device_id",
                  "context_id", "stream_id", "correlation_id", "start_ns", "end_ns", "duration_ns", "pid"]
MEMSET_COLUMNS = ["name", "bytes", "mem_kind", "device_id", "context_id", "stream_id", "correlation_id",
                  "start_ns", "end_ns", "duration_ns", "pid"]
CUDA_API_COLUMNS = ["name", "tid", "pid", "global_tid", "correlation_id", "start_ns", "end_ns",
                    "duration_ns", "return_value"]
SYNC_COLUMNS = ["kind", "device_id", "context_id", "stream_id", "correlation_id", "start_ns", "end_ns",
                "duration_ns", "pid"]
SUMMARY_COLUMNS = ["name", "instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns",
                   "time_pct"]
PROJECTION_COLUMNS = ["name", "domain", "style", "start_ns", "end_ns", "duration_ns", "proj_start_ns",
                      "proj_end_ns", "proj_duration_ns", "num_gpu_ops", "tid", "pid", "depth", "parent",
                      "nvtx_index"]

_TID_MASK = 0xFFFFFF


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c in _TEXT_COLUMNS else "int64") for c in columns})


_TEXT_COLUMNS = {"name", "demangled", "domain", "thread_name", "kind", "color", "src_kind", "dst_kind",
                 "mem_kind", "style"}


# ----------------------------------------------------------------------------- SQLite access
class _Db:
    """Schema-aware reader over one export (tables and columns looked up, never assumed)."""

    def __init__(self, path: Path):
        try:
            # immutable=1: never write, never take locks (fixtures are read-only files)
            self.con = sqlite3.connect(Path(path).resolve().as_uri() + "?immutable=1", uri=True)
            rows = self.con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        except sqlite3.DatabaseError as exc:
            raise ReportError(f"{path}: not a readable SQLite export ({exc}); re-export it with "
                              f"`nsys export --type sqlite` or load the .nsys-rep") from None
        self.tables = {r[0] for r in rows}
        self._cols: dict[str, list[str]] = {}
        self._notnull: dict[str, set[str]] = {}
        self._count: dict[str, int] = {}
        self._cache: dict[tuple[str, str], np.ndarray] = {}

    def columns(self, table: str) -> list[str]:
        if table not in self.tables:
            return []
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self.con.execute(f"PRAGMA table_info([{table}])")]
        return self._cols[table]

    def has(self, table: str, *cols: str) -> bool:
        have = self.columns(table)
        return bool(have) and all(c in have for c in cols)

    def notnull(self, table: str) -> set[str]:
        if table not in self._notnull:
            self._notnull[table] = {r[1] for r in self.con.execute(f"PRAGMA table_info([{table}])") if r[3]}
        return self._notnull[table]

    def count(self, table: str) -> int:
        if table not in self._count:
            self._count[table] = int(self.scalar_rows(f"SELECT count(*) FROM [{table}]")[0][0]) \
                if table in self.tables else 0
        return self._count[table]

    def cols(self, table: str, names: list[str]) -> dict[str, np.ndarray]:
        """Integer columns of ``table`` in rowid order as int64 arrays (NULL and absent: -1).

        Columns are cached: asking again, or for a superset, reads only what is new. Python's
        sqlite3 costs about 0.2 us per value here, so callers ask only for what they use.
        """
        have = self.columns(table)
        missing = [c for c in dict.fromkeys(names) if c in have and (table, c) not in self._cache]
        if missing:
            n = self.count(table)
            nn = self.notnull(table)
            for c in missing:
                expr = f"[{c}]" if c in nn else f"coalesce([{c}], -1)"
                self._cache[(table, c)] = self._column(table, expr, n)
        n = self.count(table)
        return {c: self._cache[(table, c)] if (table, c) in self._cache else np.full(n, -1, dtype=np.int64)
                for c in names}

    _CHUNK = 4_000_000  # rows per group_concat string (SQLite caps a string at 1 GB)

    def _column(self, table: str, expr: str, n: int, where: str = "") -> np.ndarray:
        """One integer column in rowid order. SQLite joins it into one text (group_concat) and
        numpy parses that: about twice as fast as fetchall(), which builds a tuple per row."""
        if n == 0:
            return np.empty(0, dtype=np.int64)
        try:
            lo, hi = self.con.execute(f"SELECT min(rowid), max(rowid) FROM [{table}]").fetchone()
            lo, hi = int(lo), int(hi)
            step = self._CHUNK
            if (hi - lo) // step > 2 + 4 * n // step:  # sparse rowids: one pass, no chunks
                lo, step = -(2**62), 2**63
            parts = []
            for a in range(lo, hi + 1, step):
                text = self.con.execute(
                    f"SELECT group_concat(v) FROM (SELECT {expr} AS v FROM [{table}] "
                    f"WHERE rowid >= {a} AND rowid < {a + step} {where} ORDER BY rowid)").fetchone()[0]
                if text:
                    parts.append(np.fromstring(text, dtype=np.int64, sep=","))
        except sqlite3.DatabaseError as exc:
            raise ReportError(f"reading {table} failed ({exc}): the export looks truncated or corrupt; "
                              f"export it again from the .nsys-rep") from None
        out = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        if len(out) != n:  # a non-integer value stops the parser early
            raise ReportError(f"{table}: column {expr} holds non-integer values; not an nsys export "
                              f"this loader knows")
        return out

    def scalar_rows(self, sql: str) -> list[tuple]:
        try:
            return self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise ReportError(f"query failed ({exc}): the export looks truncated or corrupt") from None

    def enum(self, table: str, default: dict[int, str]) -> dict[int, str]:
        if self.has(table, "id", "label"):
            out = dict(default)
            out.update({int(i): str(label) for i, label in self.scalar_rows(f"SELECT id, label FROM [{table}]")})
            return out
        return dict(default)


def _lookup(strings: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """StringIds values for ids (-1 or out of range -> None), vectorized."""
    ok = (ids >= 0) & (ids < len(strings))
    out = np.full(len(ids), None, dtype=object)
    out[ok] = strings[ids[ok]]
    return out


def _map_codes(codes: np.ndarray, table: dict[int, str]) -> np.ndarray:
    uniq, inv = np.unique(codes, return_inverse=True)
    labels = np.array([table.get(int(u), "Unknown") for u in uniq], dtype=object)
    return labels[inv] if len(codes) else np.array([], dtype=object)


# ----------------------------------------------------------------------------- the Report
@dataclass(eq=False)
class Report:
    """One profile as DataFrames (times in ns on the report clock).

    Frames (columns listed in ``NVTX_COLUMNS``, ``KERNEL_COLUMNS``, ...): ``nvtx``, ``kernels``,
    ``memcpy``, ``memset``, ``cuda_api``, ``sync``, ``gpu`` (one row per GPU), ``threads``.
    The CUDA frames are read from the export on first use (and kept), so a summary that needs
    two columns of a million kernels reads only those. ``meta`` holds nsys/schema versions,
    capture time and trace span; ``warnings`` lists what the report lacks.
    """

    path: Path
    nvtx: pd.DataFrame
    gpu: pd.DataFrame
    threads: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    log_path: Path | None = None
    _db: _Db | None = field(default=None, repr=False)
    _strings: np.ndarray | None = field(default=None, repr=False)
    _frames: dict = field(default_factory=dict, repr=False)

    _LOADERS = {
        "kernels": lambda r: _read_kernels(r._db, r._strings),
        "memcpy": lambda r: _read_memcpy(r._db),
        "memset": lambda r: _read_memset(r._db),
        "cuda_api": lambda r: _read_cuda_api(r._db, r._strings),
        "sync": lambda r: _read_sync(r._db),
    }

    def _frame(self, name: str) -> pd.DataFrame:
        if name not in self._frames:
            self._frames[name] = self._LOADERS[name](self)
        return self._frames[name]

    kernels = property(lambda self: self._frame("kernels"), doc="Kernels: see KERNEL_COLUMNS.")
    memcpy = property(lambda self: self._frame("memcpy"), doc="Memory copies: see MEMCPY_COLUMNS.")
    memset = property(lambda self: self._frame("memset"), doc="Memsets: see MEMSET_COLUMNS.")
    cuda_api = property(lambda self: self._frame("cuda_api"), doc="CUDA runtime/driver calls: CUDA_API_COLUMNS.")
    sync = property(lambda self: self._frame("sync"), doc="CUDA synchronization activity: SYNC_COLUMNS.")

    @classmethod
    def from_frames(cls, *, nvtx: pd.DataFrame | None = None, kernels: pd.DataFrame | None = None,
                    memcpy: pd.DataFrame | None = None, memset: pd.DataFrame | None = None,
                    cuda_api: pd.DataFrame | None = None, path="(frames)", meta: dict | None = None) -> "Report":
        """A Report over frames built in memory (tests, synthetic data); missing frames are empty."""
        nv = _nvtx_frame_empty() if nvtx is None else nvtx
        frames = {"kernels": _empty(KERNEL_COLUMNS) if kernels is None else kernels,
                  "memcpy": _empty(MEMCPY_COLUMNS) if memcpy is None else memcpy,
                  "memset": _empty(MEMSET_COLUMNS) if memset is None else memset,
                  "cuda_api": _empty(CUDA_API_COLUMNS) if cuda_api is None else cuda_api,
                  "sync": _empty(SYNC_COLUMNS)}
        return cls(path=Path(path), nvtx=nv, gpu=pd.DataFrame({"device_id": pd.Series(dtype="int64")}),
                   threads=pd.DataFrame({"global_tid": pd.Series(dtype="int64")}), meta=dict(meta or {}),
                   _frames=frames)

    def load_all(self) -> "Report":
        """Read every frame now (otherwise each is read on first use)."""
        for name in self._LOADERS:
            self._frame(name)
        return self

    def _gpu_core(self) -> dict[str, np.ndarray]:
        """start_ns, end_ns, correlation_id, pid of every GPU operation, as arrays (reads at most
        4 columns; the pid column is skipped when only one process had a CUDA context)."""
        cols = ("start_ns", "end_ns", "correlation_id", "pid")
        parts = []
        single_pid = self._single_cuda_pid()
        for name, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                            ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
            if name in self._frames:
                f = self._frames[name]
                parts.append({c: f[c].to_numpy() for c in cols})
            elif self._db is not None and self._db.has(table, "start", "end"):
                want = ["start", "end", "correlationId"] + ([] if single_pid is not None else ["globalPid"])
                c = self._db.cols(table, want)
                pid = np.full(len(c["start"]), single_pid, dtype=np.int64) if single_pid is not None \
                    else _pid(c["globalPid"])
                parts.append({"start_ns": c["start"], "end_ns": c["end"], "correlation_id": c["correlationId"],
                              "pid": pid})
        return {c: np.concatenate([np.asarray(p[c], dtype=np.int64) for p in parts])
                if parts else np.empty(0, dtype=np.int64) for c in cols}

    def _single_cuda_pid(self) -> int | None:
        """The pid when exactly one process had a CUDA context (2025.3 exports say so), else None."""
        t = "TARGET_INFO_CUDA_CONTEXT_INFO"
        if self._db is None or not self._db.has(t, "processId"):
            return None
        pids = self._db.scalar_rows(f"SELECT DISTINCT processId FROM {t}")
        return int(pids[0][0]) if len(pids) == 1 and pids[0][0] is not None else None

    def _api_core(self) -> dict[str, np.ndarray]:
        """start_ns, end_ns, global_tid, pid, correlation_id of CUDA API calls, as arrays."""
        cols = ["start_ns", "end_ns", "global_tid", "pid", "correlation_id"]
        if "cuda_api" in self._frames or self._db is None:
            return {c: self.cuda_api[c].to_numpy() for c in cols}
        t = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if not self._db.has(t, "start", "end", "correlationId"):
            return {c: np.empty(0, dtype=np.int64) for c in cols}
        c = self._db.cols(t, ["start", "end", "globalTid", "correlationId"])
        g = c["globalTid"]
        return {"start_ns": c["start"], "end_ns": c["end"], "global_tid": g, "pid": (g >> 24) & _TID_MASK,
                "correlation_id": c["correlationId"]}

    # -- basics
    @property
    def nsys_version(self) -> str | None:
        """Version of the nsys that exported this file (e.g. ``"2022.4.2.1"``)."""
        return self.meta.get("nsys_version")

    @property
    def log(self) -> str:
        """The profiled program's stdout/stderr as saved beside the report ('' if none)."""
        if self.log_path and Path(self.log_path).exists():
            return Path(self.log_path).read_text(errors="replace")
        return ""

    def __repr__(self) -> str:  # DataFrames make the default repr unreadable
        n = {t: self._db.count(f"CUPTI_ACTIVITY_KIND_{t.upper()}") if self._db else 0
             for t in ("kernel", "memcpy", "memset", "runtime")}
        return (f"Report({str(self.path)!r}, nsys {self.nsys_version}, nvtx={len(self.nvtx)}, "
                f"kernels={n['kernel']}, memcpy={n['memcpy']}, memset={n['memset']}, cuda_api={n['runtime']})")

    def gpu_ops(self) -> pd.DataFrame:
        """Kernels, copies and memsets together: name, category, device_id, stream_id,
        correlation_id, pid, start_ns, end_ns, duration_ns; sorted by start (built once and
        shared: copy it before changing it)."""
        if "_gpu_ops" in self._frames:  # built once: concatenating a million rows is not free
            return self._frames["_gpu_ops"]
        cols = ["name", "device_id", "stream_id", "correlation_id", "pid", "start_ns", "end_ns", "duration_ns"]
        parts = []
        for cat, df in (("kernel", self.kernels), ("memcpy", self.memcpy), ("memset", self.memset)):
            if len(df):
                parts.append(df[cols].assign(category=cat))
        if not parts:
            return _empty(cols + ["category"]).astype({"category": object})
        out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
        self._frames["_gpu_ops"] = out.sort_values("start_ns", kind="stable", ignore_index=True)
        return self._frames["_gpu_ops"]

    # -- summaries mirroring nsys stats
    def nvtx_summary(self) -> pd.DataFrame:
        """As ``nsys stats -r nvtx_sum`` (2022.4: ``nvtxsum``): one row per (domain, range, style).

        Returns: ``name`` (message, without the domain), ``domain`` ('' for the default one),
        ``style`` (PushPop/StartEnd), instances, total/avg/med/min/max/stddev in ns, time_pct;
        sorted by total time, descending.
        """
        r = self.nvtx[self.nvtx["kind"] != "mark"]
        style = np.where(r["kind"].to_numpy() == "start_end", "StartEnd", "PushPop")
        df = pd.DataFrame({"name": r["name"].to_numpy(), "domain": r["domain"].to_numpy(), "style": style,
                           "duration_ns": r["duration_ns"].to_numpy()})
        out = _summarize(df, ["domain", "name", "style"], "duration_ns")
        return out[["name", "domain", "style"] + SUMMARY_COLUMNS[1:]]

    def kernel_summary(self, *, names: str = "demangled", by_launch: bool = False) -> pd.DataFrame:
        """As ``cuda_gpu_kern_sum`` (one row per kernel name), demangled names by default.

        Args:
            names: "demangled" or "short" (nsys's ``:base``).
            by_launch: also split by grid and block size, as 2022.4's ``gpukernsum`` does
                (adds ``grid`` and ``block`` columns, "X Y Z").
        Returns: name, instances, total/avg/med/min/max/stddev ns, time_pct (+ grid, block).
        """
        t = "CUPTI_ACTIVITY_KIND_KERNEL"
        if not by_launch and "kernels" not in self._frames and self._db is not None and self._db.has(t, "start"):
            # fast path: group the name ids (as nsys does), resolve names once per group
            if names == "short":
                c = self._db.cols(t, ["start", "end", "shortName"])
                ids = c["shortName"]
            elif "demangledName" in self._db.notnull(t):
                c = self._db.cols(t, ["start", "end", "demangledName"])
                ids = c["demangledName"]
            else:
                c = self._db.cols(t, ["start", "end", "shortName", "demangledName"])
                ids = np.where(c["demangledName"] >= 0, c["demangledName"], c["shortName"])
            out = _summarize(pd.DataFrame({"id": ids, "duration_ns": c["end"] - c["start"]}), ["id"], "duration_ns")
            out.insert(0, "name", _lookup(self._strings, out["id"].to_numpy()))
            return out[SUMMARY_COLUMNS]
        k = self.kernels
        col = "demangled" if names == "demangled" else "name"
        df = pd.DataFrame({"name": np.asarray(k[col], dtype=object), "duration_ns": k["duration_ns"].to_numpy()})
        keys = ["name"]
        if by_launch:
            df["grid"] = k["grid_x"].astype(str) + " " + k["grid_y"].astype(str) + " " + k["grid_z"].astype(str)
            df["block"] = k["block_x"].astype(str) + " " + k["block_y"].astype(str) + " " + k["block_z"].astype(str)
            keys = ["name", "grid", "block"]
        out = _summarize(df, keys, "duration_ns")
        return out[keys + SUMMARY_COLUMNS[1:]]

    def memcpy_summary(self) -> pd.DataFrame:
        """As ``cuda_gpu_mem_time_sum``: one row per copy kind (``[CUDA memcpy Host-to-Device]``)
        plus ``[CUDA memset]``; columns as :data:`SUMMARY_COLUMNS`, sorted by total time."""
        df = pd.concat([self.memcpy[["name", "duration_ns"]], self.memset[["name", "duration_ns"]]],
                       ignore_index=True)
        return _summarize(df, ["name"], "duration_ns")[SUMMARY_COLUMNS]

    def gpu_projection(self) -> pd.DataFrame:
        """GPU work of each NVTX range instance, as ``nvtx_gpu_proj_trace`` (2022.4 ``nvtxgpuproj``).

        A GPU operation (kernel, memcpy, memset) belongs to a range when the CUDA API call that
        launched it lies inside the range on the same thread; ranges that end on another thread
        are left out, as nsys does. Only ranges with at least one GPU operation are returned.

        Returns: name, domain, style, start_ns/end_ns/duration_ns (the CPU range),
        proj_start_ns/proj_end_ns/proj_duration_ns (first op start to last op end), num_gpu_ops
        (distinct launching calls), tid, pid, depth, parent and nvtx_index (rows of ``nvtx``);
        sorted by projected start.
        """
        from labkit.analysis import project_ranges

        return project_ranges(self)

    def gpu_projection_summary(self) -> pd.DataFrame:
        """Per range name: statistics of projected GPU durations (as ``nvtx_gpu_proj_sum``).

        Returns: name, domain, style, instances, total/avg/med/min/max/stddev ns (projected),
        time_pct, range_total_ns (CPU time of the same instances), gpu_ops.
        """
        p = self.gpu_projection()
        out = _summarize(p.rename(columns={"proj_duration_ns": "d"}), ["domain", "name", "style"], "d")
        extra = p.groupby(["domain", "name", "style"], sort=False).agg(
            range_total_ns=("duration_ns", "sum"), gpu_ops=("num_gpu_ops", "sum"))
        out = out.merge(extra.reset_index(), on=["domain", "name", "style"], how="left")
        for c in ("range_total_ns", "gpu_ops"):
            out[c] = out[c].fillna(0).astype("int64")
        return out[["name", "domain", "style"] + SUMMARY_COLUMNS[1:] + ["range_total_ns", "gpu_ops"]]

    # -- lab analyses (labkit.analysis)
    def stage_table(self, stages=None, **kwargs) -> pd.DataFrame:
        """Per stage: CPU and projected GPU time, per item, share of wall time (see labkit.analysis)."""
        from labkit.analysis import stage_table

        return stage_table(self, stages, **kwargs)

    def batches(self, *, warmup: int = 0, **kwargs) -> pd.DataFrame:
        """Per-batch rows from ranges whose payload is the batch index (see labkit.analysis)."""
        from labkit.analysis import batches

        return batches(self, warmup=warmup, **kwargs)

    def gpu_utilization(self, *, bin_ms: float = 10.0, **kwargs) -> pd.DataFrame:
        """GPU busy fraction per time bin (see labkit.analysis)."""
        from labkit.analysis import gpu_utilization

        return gpu_utilization(self, bin_ms=bin_ms, **kwargs)

    def gpu_idle_gaps(self, *, min_gap_ms: float = 1.0, **kwargs) -> pd.DataFrame:
        """Stretches with no GPU work at least ``min_gap_ms`` long (see labkit.analysis)."""
        from labkit.analysis import gpu_idle_gaps

        return gpu_idle_gaps(self, min_gap_ms=min_gap_ms, **kwargs)

    def bottleneck(self, **kwargs):
        """Which stage on which thread bound throughput, as a sentence plus numbers."""
        from labkit.analysis import bottleneck

        return bottleneck(self, **kwargs)

    def steady_window(self, *, stage: str = "infer", warmup: int = 0, count: int = 3) -> tuple[int, int]:
        """(start_ns, end_ns) about ``count`` batches wide past the warm-up (see labkit.analysis)."""
        from labkit.analysis import steady_window

        return steady_window(self, stage=stage, warmup=warmup, count=count)

    def stage_overlap(self, stages, *, warmup: int = 0) -> dict:
        """How much the named stage ranges ran at the same time (see labkit.analysis)."""
        from labkit.analysis import stage_overlap

        return stage_overlap(self, stages, warmup=warmup)

    def copy_table(self, *, warmup: int = 0) -> pd.DataFrame:
        """Host-device copies made inside batch ranges from ``warmup`` on, per direction and host
        memory kind (pinned or pageable): see :func:`labkit.analysis.copy_table`."""
        from labkit.analysis import copy_table

        return copy_table(self, warmup=warmup)

    def pageable_copies(self) -> pd.DataFrame:
        """Async memcpys from/to pageable memory (what ``nsys analyze -r cuda_memcpy_async`` flags)."""
        from labkit.analysis import pageable_copies

        return pageable_copies(self)


# ----------------------------------------------------------------------------- summaries
def _summarize(df: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """nsys-style statistics of ``value`` per ``keys``: sum/count/mean/median/min/max/sample stdev."""
    if len(df) == 0:
        out = _empty(keys + SUMMARY_COLUMNS[1:])
        return out.astype({c: "float64" for c in ("avg_ns", "med_ns", "stddev_ns", "time_pct")})
    g = df.groupby(keys, sort=False, dropna=False, observed=True)[value]
    out = g.agg(instances="count", total_ns="sum", avg_ns="mean", med_ns="median", min_ns="min",
                max_ns="max", stddev_ns="std").reset_index()
    out["stddev_ns"] = out["stddev_ns"].fillna(0.0)  # nsys prints 0 for a single instance
    total = out["total_ns"].sum()
    out["time_pct"] = out["total_ns"] * 100.0 / total if total else 0.0
    for c in ("instances", "total_ns", "min_ns", "max_ns"):
        out[c] = out[c].astype("int64")
    return out.sort_values("total_ns", ascending=False, kind="stable", ignore_index=True)


# ----------------------------------------------------------------------------- loading
def load_report(path, *, nsys: str | None = None) -> Report:
    """Load a ``.nsys-rep`` (exported to SQLite beside it, once) or a ``.sqlite`` export.

    Args:
        path: the report; a ``.sqlite`` needs no nsys, a ``.nsys-rep`` does (for the export).
        nsys: nsys executable to export with (default: ``labkit.env.find_nsys()``).
    Returns: a :class:`Report`; absent parts are empty frames with their columns, and each
        absence is also issued as a :class:`ReportWarning`.
    """
    path = Path(path)
    if not path.exists():
        raise ReportError(f"report not found: {path} (profile with labkit.profile(...) or "
                          f"`python -m labkit profile`, or check the path)")
    if path.is_dir():
        raise ReportError(f"{path} is a folder: pass the .nsys-rep or .sqlite file inside it")
    with open(path, "rb") as f:
        head = f.read(16)
    log_path = None
    if head.startswith(b"SQLite format 3"):
        db_path = path
    elif path.suffix in (".nsys-rep", ".qdrep"):
        from labkit.nsys import export_sqlite

        db_path = export_sqlite(path, nsys=nsys)
    elif path.suffix == ".qdstrm":
        raise ReportError(f"{path} is an unimported .qdstrm: nsys could not finish the report; "
                          f"run scripts/install-nsys (it fixes the importer link) and profile again")
    else:
        raise ReportError(f"{path} is neither an Nsight Systems report (.nsys-rep) nor an SQLite export")
    for cand in (path.with_suffix(".log"), db_path.with_suffix(".log")):
        if cand.exists():
            log_path = cand
            break
    rep = _load_sqlite(db_path)
    rep.log_path = log_path
    rep.path = path
    return rep


def _load_sqlite(path: Path) -> Report:
    db = _Db(path)
    notes: list[str] = []
    if "StringIds" not in db.tables:
        raise ReportError(f"{path} is an SQLite file but not an Nsight Systems export (no StringIds table)")
    # StringIds -> dense lookup array (ids are small and dense in nsys exports)
    ids_vals = db.scalar_rows("SELECT id, value FROM StringIds")
    max_id = max((i for i, _ in ids_vals), default=-1)
    strings = np.full(max_id + 1, None, dtype=object)
    if ids_vals:
        ids, vals = zip(*ids_vals)
        strings[np.fromiter(ids, dtype=np.int64, count=len(ids))] = vals

    meta = _read_meta(db)
    threads = _read_threads(db, strings)
    thread_names = dict(zip(threads["global_tid"], threads["thread_name"]))
    nvtx = _read_nvtx(db, strings, thread_names, notes)
    gpu = _read_gpu(db)
    cuda_tables = [t for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL") if t in db.tables]
    gpu_rows = sum(db.count(t) for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                         "CUPTI_ACTIVITY_KIND_MEMSET"))
    if not cuda_tables:
        notes.append(f"{path.name}: no CUDA tables (was the run traced with -t cuda, and did it use the GPU?)")
    elif gpu_rows == 0:
        notes.append(f"{path.name}: no GPU activity recorded (CUDA API only); with nsys 2022.4 on CUDA 13 "
                     f"this is expected: profile on the GPU machine with a newer nsys")
    for n in notes:
        warnings.warn(n, ReportWarning, stacklevel=3)
    return Report(path=path, nvtx=nvtx, gpu=gpu, threads=threads, meta=meta, warnings=notes,
                  _db=db, _strings=strings)


def _read_meta(db: _Db) -> dict:
    meta: dict = {}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(table, "name", "value"):
            kv = dict(db.scalar_rows(f"SELECT name, value FROM [{table}]"))
            meta["nsys_version"] = kv.get("EXPORT_PRODUCT_VERSION")
            meta["schema_version"] = kv.get("EXPORT_SCHEMA_VERSION")
            meta["export_time_utc"] = kv.get("EXPORT_TIME_UTC")
            meta["export_source"] = kv.get("EXPORT_PARAM_INPUT_FILE")
            break
    if db.has("TARGET_INFO_SESSION_START_TIME", "utcTime"):
        row = db.scalar_rows("SELECT utcTime, utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        if row:
            meta["capture_time_utc"], meta["capture_epoch_ns"] = row[0]
    if db.has("ANALYSIS_DETAILS", "startTime", "stopTime", "duration"):
        row = db.scalar_rows("SELECT startTime, stopTime, duration FROM ANALYSIS_DETAILS LIMIT 1")
        if row:
            meta["start_ns"], meta["stop_ns"], meta["duration_ns"] = (int(x) for x in row[0])
    if db.has("META_DATA_CAPTURE", "name", "value"):
        kv = db.scalar_rows("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_0:%'")
        d = dict(kv)
        if "PROCESS_0:COMMAND" in d:
            args = [v for k, v in kv if k.startswith("PROCESS_0:ARGUMENT_")]
            meta["command"] = " ".join([d["PROCESS_0:COMMAND"], *args])
    return meta


def _read_threads(db: _Db, strings: np.ndarray) -> pd.DataFrame:
    if not db.has("ThreadNames", "nameId", "globalTid"):
        return pd.DataFrame({"global_tid": pd.Series(dtype="int64"), "tid": pd.Series(dtype="int64"),
                             "pid": pd.Series(dtype="int64"), "thread_name": pd.Series(dtype=object)})
    c = db.cols("ThreadNames", ["globalTid", "nameId"])
    df = pd.DataFrame({"global_tid": c["globalTid"], "thread_name": _lookup(strings, c["nameId"])})
    df = df.drop_duplicates("global_tid", keep="last").reset_index(drop=True)
    g = df["global_tid"].to_numpy()
    df.insert(1, "tid", g & _TID_MASK)
    df.insert(2, "pid", (g >> 24) & _TID_MASK)
    return df


def _read_nvtx(db: _Db, strings: np.ndarray, thread_names: dict, notes: list) -> pd.DataFrame:
    t = "NVTX_EVENTS"
    if not db.has(t, "start", "eventType"):
        notes.append("no NVTX_EVENTS table: the run had no NVTX ranges (trace with -t nvtx and annotate "
                     "the program, e.g. with labkit.annotate)")
        return _nvtx_frame_empty()
    types = dict(_NVTX_TYPES)
    if db.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
        for i, n in db.scalar_rows("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE WHERE name LIKE 'Nvtx%'"):
            if n in types:
                types[n] = int(i)
    pp = [types["NvtxPushPopRange"], types["NvtxtPushPopRange"]]
    se = [types["NvtxStartEndRange"], types["NvtxtStartEndRange"]]
    mk = [types["NvtxMark"], types["NvtxtMark"]]
    wanted = pp + se + mk
    cols = db.columns(t)
    payload_int = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in cols]
    exprs = {"rowid": "rowid", "start": "start", "end": "end", "type": "eventType", "gtid": "globalTid",
             "end_gtid": "endGlobalTid", "text_id": "textId", "domain_id": "domainId", "color": "color",
             "category": "category"}
    for i, c in enumerate(payload_int):
        exprs[f"p{i}"] = c
    nn = db.notnull(t)
    sql_of = {name: ("rowid" if col == "rowid" else (f"[{col}]" if col in nn else f"coalesce([{col}], -1)"))
              for name, col in exprs.items() if col == "rowid" or col in cols}
    # payload NULL must stay distinguishable from -1: a null flag per payload column
    for i, col in enumerate(payload_int):
        sql_of[f"null{i}"] = f"([{col}] IS NULL)"
    where = f"AND eventType IN ({','.join(map(str, wanted))})"
    n = int(db.scalar_rows(f"SELECT count(*) FROM [{t}] WHERE 1 {where}")[0][0])
    if n == 0:
        notes.append("NVTX_EVENTS has no ranges or marks (only domain events?): with nsys 2022.4 use "
                     "nvtx==0.2.11, newer nvtx packages are not recorded")
        return _nvtx_frame_empty()
    c = {name: db._column(t, expr, n, where) for name, expr in sql_of.items()}
    for name in exprs:
        c.setdefault(name, np.full(n, -1, dtype=np.int64))
    nulls = np.stack([c[f"null{i}"] for i in range(len(payload_int))], axis=1) if payload_int \
        else np.zeros((n, 0), dtype=np.int64)

    # names: textId -> StringIds, else the inline text column
    name = _lookup(strings, c["text_id"])
    if "text" in cols and (name == None).any():  # noqa: E711 - elementwise
        txt = dict(db.scalar_rows(f"SELECT rowid, text FROM [{t}] WHERE text IS NOT NULL"))
        missing = np.flatnonzero(name == None)  # noqa: E711
        name[missing] = [txt.get(int(r)) for r in c["rowid"][missing]]
    name[name == None] = ""  # noqa: E711

    # domains: NvtxDomainCreate rows name them, per process (as nsys stats joins them)
    domain = np.full(n, "", dtype=object)
    dom_rows = db.scalar_rows(f"SELECT domainId, globalTid, text FROM [{t}] "
                              f"WHERE eventType = {types['NvtxDomainCreate']} AND text IS NOT NULL") \
        if {"domainId", "globalTid", "text"} <= set(cols) else []
    if dom_rows:
        dmap = {(int(d), (int(g) >> 24) & _TID_MASK): s for d, g, s in dom_rows if d is not None and g is not None}
        pid = (c["gtid"] >> 24) & _TID_MASK
        keys = pd.MultiIndex.from_arrays([c["domain_id"], pid])
        ser = pd.Series(list(dmap.values()), index=pd.MultiIndex.from_tuples(list(dmap.keys())), dtype=object)
        domain = np.array(ser.reindex(keys).to_numpy(dtype=object), dtype=object)  # a writable copy (pandas 3: read-only view)
        domain[pd.isna(domain)] = ""

    typ = c["type"]
    kind = np.where(np.isin(typ, pp), "push_pop", np.where(np.isin(typ, se), "start_end", "mark")).astype(object)
    start = c["start"]
    end = c["end"].copy()
    is_mark = kind == "mark"
    ended = (end >= 0) | is_mark
    # nsys stats closes an unended range at the last timestamp of NVTX_EVENTS
    maxts = db.scalar_rows(f"SELECT max(max(start), coalesce(max(end), 0)) FROM [{t}]")[0][0]
    end[is_mark] = start[is_mark]
    end[~ended] = int(maxts)

    # payload: first non-NULL integer payload column, else a floating one
    payload = np.full(n, np.nan)
    for i in range(len(payload_int) - 1, -1, -1):
        ok = nulls[:, i] == 0
        payload[ok] = c[f"p{i}"][ok]
    fl = [x for x in ("doubleValue", "floatValue") if x in cols]
    float_payload = False
    if fl:
        frows = db.scalar_rows(f"SELECT rowid, coalesce({', '.join(fl)}) FROM [{t}] "
                               f"WHERE " + " OR ".join(f"{x} IS NOT NULL" for x in fl))
        if frows:
            pos = pd.Index(c["rowid"]).get_indexer([r for r, _ in frows])
            keep = pos >= 0
            payload[pos[keep]] = np.array([v for _, v in frows], dtype=float)[keep]
            float_payload = True
    payload_s = pd.Series(payload)
    if not float_payload:
        payload_s = payload_s.astype("Int64")

    gtid = c["gtid"]
    color = np.full(n, None, dtype=object)
    has_color = c["color"] >= 0
    if has_color.any():
        uc, inv = np.unique(c["color"][has_color], return_inverse=True)
        color[has_color] = np.array([f"#{int(v) & 0xFFFFFF:06x}" for v in uc], dtype=object)[inv]
    tname = pd.Series(gtid).map(thread_names).to_numpy(dtype=object)
    tname[pd.isna(tname)] = None

    df = pd.DataFrame({
        "name": name, "domain": domain, "start_ns": start, "end_ns": end, "duration_ns": end - start,
        "tid": gtid & _TID_MASK, "pid": (gtid >> 24) & _TID_MASK, "global_tid": gtid,
        "thread_name": tname, "depth": np.zeros(n, dtype=np.int64), "parent": np.full(n, -1, dtype=np.int64),
        "kind": kind, "payload": payload_s, "color": color, "category": c["category"], "ended": ended,
        # ranges ending on another thread are left out of GPU projection, as nsys does
        "end_global_tid": c["end_gtid"],
    })
    df = df.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable", ignore_index=True)
    _nest(df)
    return df


def _nvtx_frame_empty() -> pd.DataFrame:
    df = _empty(NVTX_COLUMNS + ["end_global_tid"])
    df["payload"] = df["payload"].astype("Int64")
    df["ended"] = df["ended"].astype(bool)
    return df


def _nest(df: pd.DataFrame) -> None:
    """Fill ``depth`` and ``parent`` in place: push/pop ranges nested per thread; a mark's
    parent is the innermost push/pop range open on its thread. Vectorized per thread."""
    kind = df["kind"].to_numpy()
    gtid = df["global_tid"].to_numpy()
    start = df["start_ns"].to_numpy()
    end = df["end_ns"].to_numpy()
    depth = np.zeros(len(df), dtype=np.int64)
    parent = np.full(len(df), -1, dtype=np.int64)
    is_pp = kind == "push_pop"
    is_mark = kind == "mark"
    for g in np.unique(gtid[is_pp | is_mark]):
        on = gtid == g
        rows = np.flatnonzero(on & is_pp)  # already sorted by (start, -end)
        s, e = start[rows], end[rows]
        if len(rows):
            # depth = ranges opened before me (in start order) minus those closed by my start
            closed = np.searchsorted(np.sort(e), s, side="right") - (e <= s)
            d = np.arange(len(rows)) - closed
            d = np.maximum(d, 0)
            par = np.full(len(rows), -1, dtype=np.int64)
            for lvl in range(1, int(d.max()) + 1 if len(d) else 1):
                cand = np.flatnonzero(d == lvl - 1)
                me = np.flatnonzero(d == lvl)
                j = np.searchsorted(cand, me) - 1
                ok = j >= 0
                p = np.where(ok, cand[np.maximum(j, 0)], -1)
                ok &= (s[np.maximum(p, 0)] <= s[me]) & (e[np.maximum(p, 0)] >= e[me])
                par[me[ok]] = p[ok]
            depth[rows] = d
            parent[rows] = np.where(par >= 0, rows[np.maximum(par, 0)], -1)
        marks = np.flatnonzero(on & is_mark)
        if len(marks) and len(rows):
            # innermost open range: walk up from the last range started at or before the mark
            t = start[marks]
            cand = np.searchsorted(s, t, side="right") - 1
            found = np.full(len(marks), -1, dtype=np.int64)
            pending = cand >= 0
            local_par = np.full(len(rows), -1, dtype=np.int64)
            # map parent rows back to local positions
            row_to_local = np.full(len(df), -1, dtype=np.int64)
            row_to_local[rows] = np.arange(len(rows))
            lp = parent[rows]
            local_par[lp >= 0] = row_to_local[lp[lp >= 0]]
            cur = cand.copy()
            while pending.any():
                c = cur[pending]
                inside = e[c] >= t[pending]
                idx = np.flatnonzero(pending)
                found[idx[inside]] = c[inside]
                up = local_par[c[~inside]]
                cur[idx[~inside]] = up
                pending[idx[inside]] = False
                pending[idx[~inside][up < 0]] = False
            ok = found >= 0
            parent[marks[ok]] = rows[found[ok]]
            depth[marks[ok]] = depth[rows[found[ok]]] + 1
    df["depth"] = depth
    df["parent"] = parent


def _pid(global_pid: np.ndarray) -> np.ndarray:
    return (global_pid >> 24) & _TID_MASK


def _names(strings: np.ndarray, ids: np.ndarray) -> pd.Categorical | np.ndarray:
    """Strings for StringIds as a Categorical (a million rows share a few hundred names)."""
    uniq, inv = np.unique(ids, return_inverse=True)
    cats = _lookup(strings, uniq)
    cats[cats == None] = ""  # noqa: E711
    if len(set(cats)) == len(cats):
        return pd.Categorical.from_codes(inv.astype(np.int32), categories=pd.Index(cats, dtype=object))
    return cats[inv]


KERNEL_SQL = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "shortName",
              "demangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]


def _read_kernels(db: _Db, strings: np.ndarray) -> pd.DataFrame:
    t = "CUPTI_ACTIVITY_KIND_KERNEL"
    if not db.has(t, "start", "end"):
        return _empty(KERNEL_COLUMNS)
    c = db.cols(t, KERNEL_SQL)
    dem_ids = np.where(c["demangledName"] >= 0, c["demangledName"], c["shortName"])
    return pd.DataFrame({
        "name": _names(strings, c["shortName"]), "demangled": _names(strings, dem_ids),
        "device_id": c["deviceId"], "context_id": c["contextId"],
        "stream_id": c["streamId"], "correlation_id": c["correlationId"],
        "grid_x": c["gridX"], "grid_y": c["gridY"], "grid_z": c["gridZ"],
        "block_x": c["blockX"], "block_y": c["blockY"], "block_z": c["blockZ"],
        "start_ns": c["start"], "end_ns": c["end"], "duration_ns": c["end"] - c["start"],
        "pid": _pid(c["globalPid"]),
    })


def _read_memcpy(db: _Db) -> pd.DataFrame:
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if not db.has(t, "start", "end"):
        return _empty(MEMCPY_COLUMNS).astype({"pageable": bool, "pinned": bool})
    c = db.cols(t, ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes",
                    "copyKind", "srcKind", "dstKind"])
    kinds = db.enum("ENUM_CUDA_MEMCPY_OPER", _MEMCPY_KIND)
    memk = db.enum("ENUM_CUDA_MEM_KIND", _MEM_KIND)
    kind = _map_codes(c["copyKind"], kinds)
    src = _map_codes(c["srcKind"], memk)
    dst = _map_codes(c["dstKind"], memk)
    names = _map_codes(c["copyKind"], {k: f"[CUDA memcpy {v}]" for k, v in kinds.items()})
    return pd.DataFrame({
        "name": names, "kind": kind, "bytes": c["bytes"], "src_kind": src, "dst_kind": dst,
        "pageable": (src == "Pageable") | (dst == "Pageable"), "pinned": (src == "Pinned") | (dst == "Pinned"),
        "device_id": c["deviceId"], "context_id": c["contextId"], "stream_id": c["streamId"],
        "correlation_id": c["correlationId"], "start_ns": c["start"], "end_ns": c["end"],
        "duration_ns": c["end"] - c["start"], "pid": _pid(c["globalPid"]),
    })


def _read_memset(db: _Db) -> pd.DataFrame:
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    if not db.has(t, "start", "end"):
        return _empty(MEMSET_COLUMNS)
    c = db.cols(t, ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes",
                    "memKind"])
    memk = db.enum("ENUM_CUDA_MEM_KIND", _MEM_KIND)
    return pd.DataFrame({
        "name": np.full(len(c["start"]), "[CUDA memset]", dtype=object), "bytes": c["bytes"],
        "mem_kind": _map_codes(c["memKind"], memk), "device_id": c["deviceId"], "context_id": c["contextId"],
        "stream_id": c["streamId"], "correlation_id": c["correlationId"], "start_ns": c["start"],
        "end_ns": c["end"], "duration_ns": c["end"] - c["start"], "pid": _pid(c["globalPid"]),
    })


_API_SUFFIX = re.compile(r"_v\d+$")


def _read_cuda_api(db: _Db, strings: np.ndarray) -> pd.DataFrame:
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not db.has(t, "start", "end", "correlationId"):
        return _empty(CUDA_API_COLUMNS)
    c = db.cols(t, ["start", "end", "globalTid", "correlationId", "nameId", "returnValue"])
    # strip the ABI suffix once per distinct name ("cudaLaunchKernel_v7000" -> "cudaLaunchKernel")
    uniq, inv = np.unique(c["nameId"], return_inverse=True)
    names = _lookup(strings, uniq)
    names = pd.Index([_API_SUFFIX.sub("", n) if n else "" for n in names], dtype=object)
    cat_names, codes = names.unique(), None
    codes = cat_names.get_indexer(names)[inv] if len(inv) else np.array([], dtype=np.int64)
    g = c["globalTid"]
    return pd.DataFrame({
        "name": pd.Categorical.from_codes(codes.astype(np.int32), categories=cat_names),
        "tid": g & _TID_MASK, "pid": (g >> 24) & _TID_MASK,
        "global_tid": g, "correlation_id": c["correlationId"], "start_ns": c["start"], "end_ns": c["end"],
        "duration_ns": c["end"] - c["start"], "return_value": c["returnValue"],
    })


def _read_sync(db: _Db) -> pd.DataFrame:
    t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    if not db.has(t, "start", "end"):
        return _empty(SYNC_COLUMNS)
    c = db.cols(t, ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "syncType"])
    kinds = db.enum("ENUM_CUPTI_SYNC_TYPE", _SYNC_KIND)
    return pd.DataFrame({
        "kind": _map_codes(c["syncType"], kinds), "device_id": c["deviceId"], "context_id": c["contextId"],
        "stream_id": c["streamId"], "correlation_id": c["correlationId"], "start_ns": c["start"],
        "end_ns": c["end"], "duration_ns": c["end"] - c["start"], "pid": _pid(c["globalPid"]),
    })


_GPU_COLS = {"id": "device_id", "name": "name", "chipName": "chip", "busLocation": "bus",
             "totalMemory": "memory_bytes", "smCount": "sm_count", "clockRate": "clock_hz",
             "memoryBandwidth": "memory_bandwidth_bps", "computeMajor": "compute_major",
             "computeMinor": "compute_minor", "l2CacheSize": "l2_bytes", "uuid": "uuid"}


def _read_gpu(db: _Db) -> pd.DataFrame:
    have = [c for c in _GPU_COLS if c in db.columns("TARGET_INFO_GPU")]
    if not have:
        return pd.DataFrame({"device_id": pd.Series(dtype="int64"), "name": pd.Series(dtype=object)})
    rows = db.scalar_rows(f"SELECT {', '.join(f'[{c}]' for c in have)} FROM TARGET_INFO_GPU")
    return pd.DataFrame(rows, columns=[_GPU_COLS[c] for c in have])


# ----------------------------------------------------------------------------- CLI
_WHAT = ("nvtx", "kernels", "memcpy", "projection", "stages", "batches")


def trim_export(src, dst, start_ns: int, end_ns: int) -> Path:
    """Copy the SQLite export ``src`` to ``dst`` keeping only events that start in
    ``[start_ns, end_ns)``, to share a small slice of a long run (the full ``.nsys-rep`` stays
    the record). Every table with a ``start`` column is filtered; strings, threads, devices and
    metadata are kept whole. Refuses to overwrite an existing ``dst``. Returns ``dst``.
    """
    import shutil

    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise ReportError(f"{src}: no such export")
    if dst.exists():
        raise ReportError(f"{dst} exists: choose another path or remove it first")
    if start_ns >= end_ns:
        raise ValueError(f"empty window: start_ns {start_ns} >= end_ns {end_ns}")
    with open(src, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise ReportError(f"{src}: not an SQLite file (export a .nsys-rep with load_report or nsys export first)")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    shutil.copyfile(src, tmp)
    con = sqlite3.connect(tmp)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        if "StringIds" not in tables:
            raise sqlite3.DatabaseError("no StringIds table")
        # domain create/destroy rows name the domains of every range: keep them wherever they lie
        keep_types = [r[0] for r in con.execute("SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name IN "
                                                "('NvtxDomainCreate', 'NvtxDomainDestroy')")] \
            if "ENUM_NSYS_EVENT_TYPE" in tables else []
        for t in tables:
            cols = {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')}
            if "start" not in cols:
                continue
            keep = (f" AND eventType NOT IN ({', '.join(str(int(k)) for k in keep_types)})"
                    if keep_types and "eventType" in cols else "")
            con.execute(f'DELETE FROM "{t}" WHERE (start < ? OR start >= ?){keep}', (int(start_ns), int(end_ns)))
        con.commit()
        con.execute("VACUUM")
    except sqlite3.DatabaseError as e:
        con.close()
        tmp.unlink(missing_ok=True)
        raise ReportError(f"{src}: cannot trim ({e}); is it a complete nsys SQLite export?") from None
    con.close()
    tmp.replace(dst)
    return dst


def cli_summary(argv: list[str]) -> int:
    """``python -m labkit summary REPORT [--what ...] [--csv]``: print one summary table."""
    p = argparse.ArgumentParser(prog="python -m labkit summary",
                                description="Summarize an Nsight Systems report (.nsys-rep or .sqlite).")
    p.add_argument("report")
    p.add_argument("--what", choices=_WHAT, default="nvtx")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a text table")
    p.add_argument("--warmup", type=int, default=0, help="batches left out of --what batches")
    args = p.parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ReportWarning)
            rep = load_report(args.report)
            df = {
                "nvtx": rep.nvtx_summary,
                "kernels": rep.kernel_summary,
                "memcpy": rep.memcpy_summary,
                "projection": rep.gpu_projection_summary,
                "stages": rep.stage_table,
                "batches": lambda: rep.batches(warmup=args.warmup),
            }[args.what]()
    except LabkitError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    for w in caught:
        print(f"labkit: warning: {w.message}", file=sys.stderr)
    if args.csv:
        df.to_csv(sys.stdout, index=False)
    elif len(df) == 0:
        print(f"(no {args.what} data in {args.report})")
    else:
        with pd.option_context("display.max_rows", 200, "display.max_columns", 30, "display.width",
                               int(os.environ.get("COLUMNS", "160")), "display.max_colwidth", 60):
            print(df.to_string(index=False))
    return 0
