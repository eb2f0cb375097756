"""Cut a slice out of an Nsight Systems SQLite export (``trim_export``): a small file to share or to
test with, keeping only the events that start inside a window."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from labkit.report.reader import ReportError

__all__ = ["trim_export"]


def trim_export(src, dst, start_ns: int, end_ns: int) -> Path:
    """Copy the SQLite export ``src`` to ``dst`` keeping only events that start in
    ``[start_ns, end_ns)``, to share a small slice of a long run (the full ``.nsys-rep`` stays
    the record). Every table with a ``start`` column is filtered; strings, threads, devices and
    metadata are kept whole. Refuses to overwrite an existing ``dst``. Returns ``dst``.
    """
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
        _drop_orphans(con, tables)
        con.commit()
        con.execute("VACUUM")
    except sqlite3.DatabaseError as e:
        con.close()
        tmp.unlink(missing_ok=True)
        raise ReportError(f"{src}: cannot trim ({e}); is it a complete nsys SQLite export?") from None
    con.close()
    tmp.replace(dst)
    return dst


def _drop_orphans(con: sqlite3.Connection, tables: list[str]) -> None:
    """Rows without a time of their own that only kept events point to: the call stacks
    (``*_CALLCHAINS``, by ``id``) of the calls kept (their ``callchainId``) and the CUDA event rows
    (``CUPTI_ACTIVITY_KIND_CUDA_EVENT``, by ``correlationId``) of the CUDA calls kept. A trimmed
    export of a run traced with OS runtime backtraces was otherwise mostly the whole run's stacks."""
    cols = {t: {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')} for t in tables}
    users = [t for t in tables if "callchainId" in cols[t] and "start" in cols[t]]
    for t in tables:
        if t.endswith("_CALLCHAINS") and "id" in cols[t] and users:
            used = " UNION ".join(f'SELECT callchainId FROM "{u}" WHERE callchainId IS NOT NULL' for u in users)
            con.execute(f'DELETE FROM "{t}" WHERE id NOT IN ({used})')
    ev, api = "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "CUPTI_ACTIVITY_KIND_RUNTIME"
    if ev in cols and api in cols and "correlationId" in cols[ev] and "correlationId" in cols[api]:
        con.execute(f'DELETE FROM "{ev}" WHERE correlationId NOT IN (SELECT correlationId FROM "{api}")')

