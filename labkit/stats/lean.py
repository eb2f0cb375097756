"""``summary``'s fast start: the NVTX, kernel, CUDA API, OS runtime and copy (time and size) summaries of a plain ``.sqlite`` export read with sqlite3
and plain Python (no numpy, no pandas), the same rows :mod:`labkit.stats.summaries` gives (which equal
``nsys stats``), for the command line's text output. Where an export holds anything the plain reading
does not cover (a window, CUDA graphs, ranges or kernels ending before they start, no NVTX ranges, a
labkit recording with its log, an odd schema), :func:`lean_summaries` returns None and the command
takes the full path, which also words every fault; the two paths print the same text."""
from __future__ import annotations

import math
import sqlite3
from pathlib import Path

__all__ = ["lean_summaries", "nsys_api_name", "NVTX_COLUMNS", "KERNEL_COLUMNS", "LEAN_ROWS"]

LEAN_ROWS = 200_000
"""NVTX and kernel rows above which the full path (numpy) is the faster one, import included."""

_STATS = ["instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "time_pct"]
NVTX_COLUMNS = ["name", "domain", "style"] + _STATS
KERNEL_COLUMNS = ["name"] + _STATS
# as labkit.report.nvtx._NVTX_TYPES (re-read from ENUM_NSYS_EVENT_TYPE where the export has it)
_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70, "NvtxtStartEndRange": 71,
          "NvtxDomainCreate": 75}
_GPU = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


class _NotHere(Exception):
    """The export holds something the plain reading leaves to the full path."""


def _stats(groups: dict) -> list[list]:
    """nsys's statistics per key (count, sum, mean, median, min, max, sample stdev, share of the
    total), the keys in first-seen order and then by total, descending (stable), as pandas gives them."""
    rows = []
    for key, d in groups.items():
        d.sort()
        n, total = len(d), sum(d)
        mean = total / n
        med = (d[(n - 1) // 2] + d[n // 2]) / 2
        std = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
        rows.append([*key, n, total, mean, med, d[0], d[-1], std])
    whole = sum(r[-6] for r in rows)
    for r in rows:
        r.append(r[-6] * 100.0 / whole if whole else 0.0)
    rows.sort(key=lambda r: -r[-7])
    return rows


def _columns(c: sqlite3.Connection, table: str) -> dict:
    return {r[1]: bool(r[3]) for r in c.execute(f"PRAGMA table_info([{table}])")}


def _nvtx(c: sqlite3.Connection, tables: set, strings: dict) -> list[list]:
    t = "NVTX_EVENTS"
    if t not in tables:  # a run traced without NVTX: an empty summary, as the full path gives
        return []
    cols = _columns(c, t)
    if not {"start", "end", "eventType", "textId", "text", "domainId", "globalTid"} <= set(cols):
        raise _NotHere("NVTX columns")
    types = dict(_TYPES)
    if "ENUM_NSYS_EVENT_TYPE" in tables:
        for i, n in c.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE WHERE name LIKE 'Nvtx%'"):
            if n in types:
                types[n] = int(i)
    pp = (types["NvtxPushPopRange"], types["NvtxtPushPopRange"])
    se = (types["NvtxStartEndRange"], types["NvtxtStartEndRange"])
    domains = {(int(d), (int(g) >> 24) & 0xFFFFFF): s for d, g, s in c.execute(
        f"SELECT domainId, globalTid, text FROM [{t}] WHERE eventType = ? AND text IS NOT NULL",
        (types["NvtxDomainCreate"],)) if d is not None and g is not None}
    maxts = c.execute(f"SELECT coalesce(max(max(start), coalesce(max([end]), 0)), 0) FROM [{t}]").fetchone()[0]
    groups: dict = {}
    kinds = ",".join(map(str, pp + se))
    for typ, tid, txt, did, g, start, end in c.execute(
            f"SELECT eventType, textId, text, domainId, globalTid, start, [end] FROM [{t}] "
            f"WHERE eventType IN ({kinds})"):
        end = maxts if end is None else end
        if not isinstance(start, int) or not isinstance(end, int) or end < start:
            raise _NotHere("a range without a start, or ending before it")
        name = strings.get(tid) if tid is not None else None
        name = (txt if name is None else name) or ""
        dom = domains.get((-1 if did is None else did, ((g or 0) >> 24) & 0xFFFFFF), "")
        key = (dom, name, "PushPop" if typ in pp else "StartEnd")
        groups.setdefault(key, []).append(end - start)
    if not groups:
        raise _NotHere("no NVTX ranges")
    rows = sorted(_stats(groups), key=lambda r: (-r[4], r[0], r[1], r[2]))  # ties as summaries._by_total
    return [[r[1], r[0], r[2], *r[3:]] for r in rows]


def _kernels(c: sqlite3.Connection, tables: set, strings: dict) -> list[list]:
    t = "CUPTI_ACTIVITY_KIND_KERNEL"
    if t not in tables:  # no kernel ran: an empty summary (the notes say whether CUDA was traced)
        return []
    cols = _columns(c, t)
    if not {"start", "end", "demangledName", "shortName"} <= set(cols):
        raise _NotHere("kernel columns")
    key = "demangledName" if cols["demangledName"] else "coalesce(demangledName, shortName)"
    groups: dict = {}
    for k, start, end in c.execute(f"SELECT {key}, start, [end] FROM [{t}]"):
        if not isinstance(k, int) or not isinstance(start, int) or not isinstance(end, int) or end < start:
            raise _NotHere("a kernel without a name id, or ending before it starts")
        groups.setdefault((k,), []).append(end - start)
    rows = _stats(dict(sorted(groups.items())))  # ties in total: by name id, as the packed path sorts
    for r in rows:
        r[0] = strings.get(r[0]) or ""
    return rows


def nsys_api_name(name) -> str:
    """A CUDA API name as nsys stats prints it: a 6-character ``_vNNNN`` ABI suffix cut
    (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``), shorter ones kept (``cuMemHostRegister_v2``)."""
    name = name or ""
    return name[:-6] if len(name) >= 6 and name[-6:-4] == "_v" else name


def _by_name_id(c: sqlite3.Connection, tables: set, strings: dict, t: str, where: str = "", label=None) -> list[list]:
    """The summary of table ``t`` per ``nameId`` (the rows where SQL ``where`` holds), as
    :func:`labkit.stats.summaries._packed_summary` gives it: ties in total by name id, names from
    StringIds (blank where it lacks one) through ``label``."""
    if t not in tables:  # a kind not traced: an empty summary, as the full path gives
        return []
    cols = _columns(c, t)
    if not {"start", "end", "nameId"} <= set(cols):
        raise _NotHere(f"{t} columns")
    groups: dict = {}
    for k, start, end in c.execute(f"SELECT nameId, start, [end] FROM [{t}]" + (f" WHERE {where}" if where else "")):
        if not isinstance(k, int) or k < 0 or not isinstance(start, int) or not isinstance(end, int) or end < start:
            raise _NotHere("a call without a name id, or ending before it starts")
        groups.setdefault((k,), []).append(end - start)
    rows = _stats(dict(sorted(groups.items())))
    for r in rows:
        name = strings.get(r[0]) or ""
        r[0] = label(name) if label is not None else name
    return rows


def _cuda_api(c: sqlite3.Connection, tables: set, strings: dict) -> list[list]:
    return _by_name_id(c, tables, strings, "CUPTI_ACTIVITY_KIND_RUNTIME", label=nsys_api_name)


def _osrt(c: sqlite3.Connection, tables: set, strings: dict) -> list[list]:
    t = "OSRT_API"
    where = "eventClass == 27" if t in tables and "eventClass" in _columns(c, t) else ""
    return _by_name_id(c, tables, strings, t, where)


def _enum(c: sqlite3.Connection, tables: set, table: str, default: dict) -> dict:
    """An export's own names of codes (its ``ENUM_*`` table of id and label) over ``default``."""
    out = dict(default)
    if table in tables and {"id", "label"} <= set(_columns(c, table)):
        out.update({int(i): str(label) for i, label in c.execute(f"SELECT id, label FROM [{table}]")})
    return out


_COPY_COLUMNS = {"start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes"}


def _copies(c: sqlite3.Connection, tables: set, columns: str):
    """``(name, [columns...])`` of every copy (``[CUDA memcpy Host-to-Device]``, by the export's own
    names of its kinds) and then every memset (``[CUDA memset]``), in table order, as
    :mod:`labkit.report.reader` names them."""
    from labkit.report.enums import MEMCPY_KIND

    for t, need, code in (("CUPTI_ACTIVITY_KIND_MEMCPY", {"copyKind", "srcKind", "dstKind"}, "copyKind"),
                          ("CUPTI_ACTIVITY_KIND_MEMSET", {"memKind"}, None)):
        if t not in tables:
            continue
        if not _COPY_COLUMNS | need <= set(_columns(c, t)):
            raise _NotHere(f"{t} columns")
        kinds = _enum(c, tables, "ENUM_CUDA_MEMCPY_OPER", MEMCPY_KIND) if code else {}
        for k, *values in c.execute(f"SELECT {code or 0}, {columns} FROM [{t}]"):
            if not isinstance(k, int):
                raise _NotHere("a copy without its kind")
            yield (f"[CUDA memcpy {kinds[k]}]" if k in kinds else "Unknown") if code else "[CUDA memset]", values


def _memcpy(c: sqlite3.Connection, tables: set, strings: dict) -> list[list]:
    """As :func:`labkit.stats.summaries.memcpy_summary`: time per copy kind, then ``[CUDA memset]``,
    names in first-seen order before the sort by total."""
    groups: dict = {}
    for name, (start, end) in _copies(c, tables, "start, [end]"):
        if not isinstance(start, int) or not isinstance(end, int) or end < start:
            raise _NotHere("a copy ending before it starts")
        groups.setdefault((name,), []).append(end - start)
    return _stats(groups)


SIZE_COLUMNS = ["name", "count", "total_bytes", "avg_bytes", "med_bytes", "min_bytes", "max_bytes", "stddev_bytes"]


def _memsize(c: sqlite3.Connection, tables: set, strings: dict) -> list[list]:
    """As :func:`labkit.stats.summaries.memcpy_size_summary`: bytes per copy kind and by memsets,
    names in alphabetical order before the sort by total bytes."""
    groups: dict = {}
    for name, (size,) in _copies(c, tables, "bytes"):
        if not isinstance(size, int):
            raise _NotHere("a copy without its size")
        groups.setdefault((name,), []).append(size)
    rows = _stats(dict(sorted(groups.items())))
    return [r[:-1] for r in rows]  # no share of a total: nsys's size summary has none


_READERS = {"nvtx": (_nvtx, NVTX_COLUMNS), "kernels": (_kernels, KERNEL_COLUMNS),
            "cuda_api": (_cuda_api, KERNEL_COLUMNS), "osrt": (_osrt, KERNEL_COLUMNS), "memcpy": (_memcpy, KERNEL_COLUMNS),
            "memsize": (_memsize, SIZE_COLUMNS)}
"""What the plain reading covers: each summary's reader and its columns."""
_COUNTED = ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API",
            "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _notes(c: sqlite3.Connection, tables: set, path: Path) -> list[str]:
    """The notes :func:`labkit.load_report` gives an export: no CUDA tables, or CUDA calls only."""
    if not any(t in tables for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")):
        return [f"{path.name}: no CUDA tables (was the run traced with -t cuda, and did it use the GPU?)"]
    if not any(t in tables and c.execute(f"SELECT 1 FROM [{t}] LIMIT 1").fetchone() for t in _GPU):
        raise _NotHere("CUDA calls only: the note names the nsys version")
    return []


def lean_summaries(report, what: list[str]):
    """``[(name, columns, rows), ...]`` for ``what`` (of "nvtx", "kernels", "cuda_api", "osrt", "memcpy", "memsize") and
    the report's notes, or None where the full path must take it (see the module)."""
    path = Path(report)
    if (path.suffix != ".sqlite" or not set(what) <= set(_READERS) or not path.is_file()
            or path.with_suffix(".log").exists()):
        return None
    with open(path, "rb") as f:
        if not f.read(16).startswith(b"SQLite format 3"):
            return None
    try:
        c = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "StringIds" not in tables or any("GRAPH" in t for t in tables if "KIND" in t):
            return None
        rows = sum(c.execute(f"SELECT coalesce(max(rowid), 0) FROM [{t}]").fetchone()[0]
                   for t in _COUNTED if t in tables)
        if rows > LEAN_ROWS:  # numpy's sorted runs beat plain Python there, and pandas' import is paid back
            return None
        notes = _notes(c, tables, path)
        strings = dict(c.execute("SELECT id, value FROM StringIds"))
        if any(not isinstance(i, int) or i < 0 for i in strings):
            return None
        out = []
        for w in what:
            read, columns = _READERS[w]
            out.append((w, columns, read(c, tables, strings)))
        return out, notes
    except (_NotHere, sqlite3.Error, TypeError, ValueError, OverflowError):
        return None
    finally:
        c.close()
