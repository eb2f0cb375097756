"""Read an Nsight Systems SQLite export: the schema-aware reader (`_Db`) and the table readers
(a slice of an export: :mod:`labkit.report.trim`).

The reader checks every table and column before use, because exports of different nsys versions
differ (2022.4 has ``EXPORT_META_DATA``, 2025.3 ``META_DATA_EXPORT`` and more columns; tables
vanish when nothing of their kind ran). All times are integer nanoseconds on the report's own
clock; names are resolved from ``StringIds`` with numpy indexing (no Python loop over rows).
Integer columns are read one at a time (SQLite joins a column into one text that numpy parses,
about twice as fast as row tuples), so callers read only the columns they need.
"""
from __future__ import annotations

import os
import re
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from labkit.report.enums import MEMCPY_KIND as _MEMCPY_KIND, MEM_KIND as _MEM_KIND, SYNC_KIND as _SYNC_KIND
from labkit.errors import LabkitError

__all__ = [
    "ReportError",
    "NVTX_COLUMNS",
    "KERNEL_COLUMNS",
    "MEMCPY_COLUMNS",
    "MEMSET_COLUMNS",
    "CUDA_API_COLUMNS",
    "SYNC_COLUMNS",
    "GRAPH_COLUMNS",
    "OSRT_COLUMNS",
    "SUMMARY_COLUMNS",
    "PROJECTION_COLUMNS",
    "pid_of",
]


class ReportError(LabkitError):
    """A report file is missing, unreadable or not an Nsight Systems export."""


NVTX_COLUMNS = ["name", "domain", "start_ns", "end_ns", "duration_ns", "tid", "pid", "global_tid",
                "thread_name", "depth", "parent", "kind", "payload", "color", "category", "category_name", "ended"]
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
GRAPH_COLUMNS = ["name", "graph_id", "device_id", "context_id", "stream_id", "correlation_id", "start_ns", "end_ns",
                 "duration_ns", "pid"]
OSRT_COLUMNS = ["name", "tid", "pid", "global_tid", "start_ns", "end_ns", "duration_ns", "return_value",
                "event_class", "name_id"]
OFFCPU_COLUMNS = ["tid", "pid", "global_tid", "start_ns", "end_ns", "duration_ns"]
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"  # whole-graph rows: nsys's default --cuda-graph-trace=graph
SUMMARY_COLUMNS = ["name", "instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns",
                   "time_pct"]
PROJECTION_COLUMNS = ["name", "domain", "style", "start_ns", "end_ns", "duration_ns", "proj_start_ns",
                      "proj_end_ns", "proj_duration_ns", "proj_busy_ns", "num_gpu_ops", "tid", "pid", "depth",
                      "parent", "nvtx_index"]

_TID_MASK = 0xFFFFFF


_NSYS_NAME = re.compile(r"(CUPTI_|NVTX_|OSRT_|TARGET_INFO_|META_DATA_|EXPORT_META|ANALYSIS_|ENUM_|CUDA_|PROFILER_|"
                        r"SCHED_|COMPOSITE_|GENERIC_|MPI_|PROCESSES$|StringIds$|ThreadNames$|ProcessStreams$)")
"""Names nsys gives its tables: a view of such a name is a crafted file; other views (a user's own, as
in real exports by others) are left alone, never read."""


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c in _TEXT_COLUMNS else "int64") for c in columns})


_TEXT_COLUMNS = {"name", "demangled", "domain", "category_name", "thread_name", "kind", "color", "src_kind", "dst_kind",
                 "mem_kind", "style"}


# ----------------------------------------------------------------------------- SQLite access
class _Db:
    """Schema-aware reader over one export (tables and columns looked up, never assumed)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            # immutable=1: never write, never take locks (fixtures are read-only files)
            self.con = sqlite3.connect(self.path.resolve().as_uri() + "?immutable=1", uri=True)
            rows = self.con.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise ReportError(f"{path}: not a readable SQLite export ({_first_line(exc)}); re-export it with "
                              f"`nsys export --type sqlite` or load the .nsys-rep") from None
        # nsys writes tables only: a view named like one of its tables is a crafted file (a view over
        # a recursive CTE never ends), refused by name; SQLite's work per query is bounded besides
        views = sorted(str(n) for n, t in rows if t == "view" and _NSYS_NAME.match(str(n)))
        if views:
            raise ReportError(f"{path}: {views[0]} is a view, not a table as nsys writes it: not an nsys export; "
                              f"export it again from the .nsys-rep")
        self.tables = {r[0] for r in rows if r[1] == "table"}
        budget = [max(2_000_000_000, 200 * self.path.stat().st_size) // 10_000]

        def bound() -> int:  # called every 10,000 SQLite steps; non-zero stops the query
            budget[0] -= 1
            return budget[0] < 0
        self.con.set_progress_handler(bound, 10_000)
        self._bound = bound
        self._cols: dict[str, list[str]] = {}
        self._notnull: dict[str, set[str]] = {}
        self._count: dict[str, int] = {}
        self._cache: dict[tuple[str, str], np.ndarray] = {}

    def fail(self, table: str, problem) -> ReportError:
        """The one-line error for a failed read of ``table``: SQLite's own check says whether the
        file is damaged (a flipped or truncated page) or merely not an export this reader knows."""
        try:
            check = self.con.execute("PRAGMA quick_check(1)").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            check = _first_line(exc)
        state = ("the file is damaged (SQLite quick_check: " + _first_line(check) + ")" if check != "ok"
                 else "the table is not as nsys writes it")
        return ReportError(f"{self.path}: reading {table} failed ({_first_line(problem)}): {state}; export it "
                           f"again from the .nsys-rep")

    def columns(self, table: str) -> list[str]:
        if table not in self.tables:
            return []
        if table not in self._cols:
            info = self.scalar_rows(f"PRAGMA table_info([{table}])", table)
            self._cols[table] = [r[1] for r in info]
            self._notnull[table] = {r[1] for r in info if r[3]}
        return self._cols[table]

    def has(self, table: str, *cols: str) -> bool:
        have = self.columns(table)
        return bool(have) and all(c in have for c in cols)

    def notnull(self, table: str) -> set[str]:
        self.columns(table)
        return self._notnull.get(table, set())

    def any_rows(self, table: str) -> bool:
        """True when ``table`` exists and holds a row (without counting a million of them)."""
        return table in self.tables and bool(self.scalar_rows(f"SELECT 1 FROM [{table}] LIMIT 1", table))

    def rows_at_most(self, table: str) -> int:
        """An upper bound on ``table``'s rows, at once: its largest rowid (nsys's tables are rowid
        tables, numbered from 1; ``count`` reads every page of a million-row table)."""
        if table not in self.tables:
            return 0
        return int(self.scalar_rows(f"SELECT coalesce(max(rowid), 0) FROM [{table}]", table)[0][0])

    PARTS_FROM = 250_000  # rows of a table from which in_parts splits an aggregate scan across cores

    def at_once(self, sqls: list[str], table: str) -> list[list[tuple]]:
        """The rows of each query in ``sqls`` (all reading ``table``), run at once: each on its
        own SQLite connection and thread (SQLite lets go of Python's lock while it scans). Any problem
        and they are run again one after the other, where an error names the table."""
        if len(sqls) < 2 or (os.cpu_count() or 1) < 2:
            return [self.scalar_rows(q, table) for q in sqls]

        def one(sql: str) -> list[tuple]:
            con = sqlite3.connect(self.path.resolve().as_uri() + "?immutable=1", uri=True)
            try:
                con.set_progress_handler(self._bound, 10_000)
                return con.execute(sql).fetchall()
            finally:
                con.close()
        try:
            with ThreadPoolExecutor(len(sqls)) as pool:
                return list(pool.map(one, sqls))
        except (sqlite3.DatabaseError, UnicodeDecodeError, RuntimeError):  # RuntimeError: no thread could start
            return [self.scalar_rows(q, table) for q in sqls]

    def in_parts(self, select: str, table: str, cond: str = "1") -> list[tuple]:
        """The one row of ``SELECT {select} FROM table WHERE {cond}`` for each of a few rowid ranges
        of ``table`` in rowid order, read at once (:meth:`at_once`): one range per core, up to four,
        on a large table; one range on a small table or one core. Each range is scanned in rowid
        order, so the caller joins its ranges' ``group_concat`` texts and sums their counts. For
        integer columns only: two threads each joining half of the NVTX names took three times as
        long as one thread joining all of them (measured on the llama benchmark export; the cause,
        in SQLite or the allocator, not isolated)."""
        whole = f"SELECT {select} FROM [{table}] WHERE ({cond})"
        k = min(os.cpu_count() or 1, 4, self.rows_at_most(table) // self.PARTS_FROM)
        if k < 2:
            return [self.scalar_rows(whole, table)[0]]
        lo = int(self.scalar_rows(f"SELECT min(rowid) FROM [{table}]", table)[0][0])
        hi = self.rows_at_most(table) + 1
        cuts = [lo + (hi - lo) * i // k for i in range(k)] + [hi]
        return [rows[0] for rows in self.at_once([f"{whole} AND rowid >= {cuts[i]} AND rowid < {cuts[i + 1]}"
                                                  for i in range(k)], table)]

    def count(self, table: str) -> int:
        if table not in self._count:
            self._count[table] = int(self.scalar_rows(f"SELECT count(*) FROM [{table}]", table)[0][0]) \
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
                    parts.append(parse_ints(text))
        except (sqlite3.DatabaseError, UnicodeDecodeError, TypeError, ValueError) as exc:
            raise self.fail(table, exc) from None
        out = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        if len(out) != n:  # a NULL row or a non-integer value
            raise self.fail(table, f"column {expr} holds {len(out)} integers for {n} rows")
        return out

    def scalar_rows(self, sql: str, table: str | None = None) -> list[tuple]:
        """Rows of ``sql``; text that is not UTF-8 (a Windows capture's Latin-1 user name) is read as
        Latin-1; any SQLite error is a ReportError naming the table."""
        try:
            try:
                return self.con.execute(sql).fetchall()
            except (UnicodeDecodeError, sqlite3.OperationalError) as exc:
                if "decode" not in str(exc):  # Python 3.11 says "Could not decode to UTF-8 column ..."
                    raise
                self.con.text_factory = _decode
                try:
                    return self.con.execute(sql).fetchall()
                finally:
                    self.con.text_factory = str
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            m = re.search(r"FROM \[?(\w+)", sql)
            raise self.fail(table or (m.group(1) if m else "the export"), exc) from None

    def enum(self, table: str, default: dict[int, str]) -> dict[int, str]:
        if self.has(table, "id", "label"):
            out = dict(default)
            out.update({int(i): str(label) for i, label in self.scalar_rows(f"SELECT id, label FROM [{table}]")})
            return out
        return dict(default)


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _first_line(problem, width: int = 160) -> str:
    text = " ".join(str(problem).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def parse_ints(text: str) -> np.ndarray:
    """Comma-joined integers (a group_concat) as int64; ValueError where a value is not an integer.

    numpy reads the text and raises where it cannot read on (it used to stop there with only a
    warning, which a filter elsewhere can hide: the count of values is checked too); what it
    would take that is no plain integer is refused first: signs without digits (a lone '-' reads
    as 0), '+' and white space. Each check is one scan in C: 0.08 s for 1.4M values (22 MB),
    where one regular expression over the text took 0.55 s."""
    if ("-," in text or text.endswith("-") or "+" in text or not text.isascii()
            or any(c in text for c in _BLANKS)):
        raise ValueError("a value is not an integer")
    out = np.fromstring(text, dtype=np.int64, sep=",")
    if len(out) != text.count(",") + 1:
        raise ValueError("a value is not an integer")
    return out


_BLANKS = (" ", "\t", "\n", "\r", "\v", "\f")


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


def read_strings(db: _Db) -> np.ndarray:
    """StringIds as a dense lookup array indexed by id (ids are small and dense in nsys exports)."""
    ids_vals = db.scalar_rows("SELECT id, value FROM StringIds")
    if any(not isinstance(i, int) for i, _ in ids_vals):
        raise db.fail("StringIds", "an id is not an integer")
    max_id = max((i for i, _ in ids_vals), default=-1)
    if max_id > 2 * len(ids_vals) + 1_000_000 or min((i for i, _ in ids_vals), default=0) < 0:
        raise ReportError(f"{db.path}: StringIds holds id {max_id} for {len(ids_vals):,} strings (nsys numbers them "
                          f"densely from 0): not an nsys export; export it again from the .nsys-rep")
    strings = np.full(max_id + 1, None, dtype=object)
    if ids_vals:
        ids, vals = zip(*ids_vals)
        strings[np.fromiter(ids, dtype=np.int64, count=len(ids))] = vals
    return strings


def pid_of(global_tid):
    """The process id in nsys's global thread (or process) id: its bits 24-47 (an int or an array)."""
    return (global_tid >> 24) & _TID_MASK


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
        "pid": pid_of(c["globalPid"]),
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
        "duration_ns": c["end"] - c["start"], "pid": pid_of(c["globalPid"]),
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
        "end_ns": c["end"], "duration_ns": c["end"] - c["start"], "pid": pid_of(c["globalPid"]),
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
    raw = pd.Index([n[:-6] if n and len(n) >= 6 and n[-6:-4] == "_v" else (n or "") for n in _lookup(strings, uniq)],
                   dtype=object)  # nsys stats' spelling: only a 6-character _vNNNN suffix is cut
    return pd.DataFrame({
        "name": pd.Categorical.from_codes(codes.astype(np.int32), categories=cat_names),
        "nsys_name": raw.to_numpy()[inv] if len(inv) else np.array([], dtype=object),
        "tid": g & _TID_MASK, "pid": pid_of(g),
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
        "end_ns": c["end"], "duration_ns": c["end"] - c["start"], "pid": pid_of(c["globalPid"]),
    })


def _read_graphs(db: _Db) -> pd.DataFrame:
    """Whole-graph executions (one row per CUDA graph launch, its nodes not traced one by one)."""
    if not db.has(GRAPH_TABLE, "start", "end"):
        return _empty(GRAPH_COLUMNS)
    c = db.cols(GRAPH_TABLE, ["start", "end", "graphId", "deviceId", "contextId", "streamId", "correlationId",
                              "globalPid"])
    uniq, inv = np.unique(c["graphId"], return_inverse=True)
    names = np.array([f"[CUDA graph {int(g)}]" for g in uniq], dtype=object)[inv] if len(uniq) \
        else np.empty(0, dtype=object)
    return pd.DataFrame({
        "name": names, "graph_id": c["graphId"], "device_id": c["deviceId"], "context_id": c["contextId"],
        "stream_id": c["streamId"], "correlation_id": c["correlationId"], "start_ns": c["start"], "end_ns": c["end"],
        "duration_ns": c["end"] - c["start"], "pid": pid_of(c["globalPid"]),
    })


_GPU_COLS = {"id": "device_id", "name": "name", "chipName": "chip", "busLocation": "bus",
             "totalMemory": "memory_bytes", "smCount": "sm_count", "clockRate": "clock_hz",
             "memoryBandwidth": "memory_bandwidth_bps", "computeMajor": "compute_major",
             "computeMinor": "compute_minor", "l2CacheSize": "l2_bytes", "uuid": "uuid",
             "maxWarpsPerSm": "max_warps_per_sm", "threadsPerWarp": "threads_per_warp"}


def _read_gpu(db: _Db) -> pd.DataFrame:
    have = [c for c in _GPU_COLS if c in db.columns("TARGET_INFO_GPU")]
    if not have:
        return pd.DataFrame({"device_id": pd.Series(dtype="int64"), "name": pd.Series(dtype=object)})
    rows = db.scalar_rows(f"SELECT {', '.join(f'[{c}]' for c in have)} FROM TARGET_INFO_GPU")
    df = pd.DataFrame(rows, columns=[_GPU_COLS[c] for c in have])
    for c in df.columns.difference(list(_GPU_TEXT)):  # a NULL (old nsys left computeMajor empty) is unknown: <NA>
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
    return df


_GPU_TEXT = ("name", "chip", "bus", "uuid")
"""The GPU table's text columns; the others are numbers, a NULL among them read as unknown (<NA>)."""
