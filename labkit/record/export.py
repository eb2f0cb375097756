"""Export an Nsight Systems report to SQLite once, and know an export by its report's identity.

``export_sqlite`` writes the export beside the report (or in the per-user cache when that folder is
read-only), marks it with the report's identity (size, mtime, version) and reuses it while the mark
matches; ``report_version`` reads the version that wrote a report.
"""
from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path

from labkit.env import cache_dir, nsys_version
from labkit.errors import check_writable
from labkit.paths import bounded_name
from labkit.record.proc import child_setup, exit_reason
from labkit.record.tool import NsysError, NsysNotFoundError, _nsys_or_raise

__all__ = ["export_cache_dir", "export_is_complete", "report_version", "export_sqlite", "report_identity"]


# A finished export, by schema: nsys 2021+ exporters write a metadata table (2022.4 / 2025.x
# names) and, for captures of nsys 2020.3 or later, TARGET_INFO_SESSION_START_TIME; older
# captures (.qdrep of 2019.6, 2020.1) have no session-start table; a 2020.5 exporter wrote no
# metadata table at all, and its data tables are the proof. A failed export leaves StringIds and
# ProcessStreams only.
_META_TABLES = {"EXPORT_META_DATA", "META_DATA_EXPORT"}


_SESSION_START_FROM = (2020, 3)


_LEFT_BY_FAILURE = {"StringIds", "ProcessStreams", "sqlite_sequence"}


_VERSION = re.compile(rb"20[1-3]\d\.\d+\.\d+(?:\.\d+)?")


_HEADER_VERSION = re.compile(rb"Profiler Report (20[1-3]\d)@(\d+)@(\d+)@(\d+)")  # nsys 2025 on, in the header


def export_cache_dir() -> Path:
    """Per-user folder for exports of reports in read-only folders (mode 0700):
    ``labkit.env.cache_dir() / "exports"``."""
    path = cache_dir() / "exports"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.chmod(0o700)
    except OSError as exc:
        where = "LABKIT_CACHE_DIR" if os.environ.get("LABKIT_CACHE_DIR") else "HOME"
        raise NsysError(f"cannot create the per-user export cache {path} ({exc.strerror}): set LABKIT_CACHE_DIR "
                        f"to a writable folder (it comes from {where} now)") from None
    return path


def _tables(db: Path) -> set | None:
    try:
        con = sqlite3.connect(Path(db).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except sqlite3.Error:
        return None


def export_is_complete(db: Path, capture_version: str | None = None) -> bool:
    """Whether ``db`` is a finished SQLite export, not a failed export's remains; the tables
    required follow the schema (see above). ``capture_version``: the nsys that recorded the report
    (:func:`report_version`), when known."""
    tables = _tables(db)
    if tables is None or "StringIds" not in tables:
        return False
    if not _META_TABLES & tables:  # nsys <= 2020.5's exporter
        return bool({t for t in tables if not t.startswith("ENUM_")} - _LEFT_BY_FAILURE)
    need = {"ANALYSIS_DETAILS"}
    if capture_version is None or _major_minor(capture_version) >= _SESSION_START_FROM:
        need.add("TARGET_INFO_SESSION_START_TIME")
    return need <= tables


def report_version(rep_path: Path) -> str | None:
    """The nsys version that wrote a ``.nsys-rep`` (it is stored near the start of the file)."""
    try:
        with open(rep_path, "rb") as f:
            head = f.read(4 << 20)
    except OSError:
        return None
    h = _HEADER_VERSION.search(head[:4096])  # newer reports: "2026@1@2@63" (a path later may hold other dates)
    m = h or _VERSION.search(head)
    return (".".join(x.decode() for x in h.groups()) if h else m.group().decode()) if m else None


def _major_minor(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


def report_identity(rep_path) -> dict:
    """What identifies a report's content: its size and a SHA-256 of its first MiB and last 64 KiB
    (a copy with another mtime, from rsync -a or tar, is the same report; a new run is not)."""
    h = hashlib.sha256()
    with open(rep_path, "rb") as f:
        h.update(f.read(1 << 20))
        size = os.fstat(f.fileno()).st_size
        if size > (1 << 20):
            f.seek(max(1 << 20, size - (64 << 10)))
            h.update(f.read())
    return {"size": size, "sha256": h.hexdigest()}


def _read_mark(db: Path) -> dict | None:
    """The report an export of labkit's was made from (its ``labkit_export`` table), or None for
    a file labkit did not write."""
    try:
        con = sqlite3.connect(Path(db).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            row = con.execute("SELECT report_size, report_sha256 FROM labkit_export").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return {"report": {"size": row[0], "sha256": row[1]}} if row else None


def _write_mark(db: Path, ident: dict, rep: Path) -> None:
    """Say, inside the export itself, that labkit made it and from which report."""
    con = sqlite3.connect(db)
    try:
        con.execute("CREATE TABLE IF NOT EXISTS labkit_export (report_name TEXT, report_size INTEGER, "
                    "report_sha256 TEXT)")
        con.execute("DELETE FROM labkit_export")
        con.execute("INSERT INTO labkit_export VALUES (?, ?, ?)", (rep.name, ident["size"], ident["sha256"]))
        con.commit()
    finally:
        con.close()


def _failed_export(db: Path) -> bool:
    """nsys's own remains of an unfinished export (StringIds, not the rest): replaceable."""
    return "StringIds" in (_tables(db) or ()) and not export_is_complete(db)


def _reusable(db: Path, rep: Path, ident: dict, version: str | None) -> bool:
    mark = _read_mark(db) if db.is_file() else {"report": None}
    if mark is not None:  # labkit's export: of this very report?
        return mark.get("report") == ident and export_is_complete(db, version)
    # nsys's own export (--export=sqlite, a committed pair): newer than the report and finished
    return db.stat().st_mtime >= rep.stat().st_mtime and export_is_complete(db, version)


def _cached(rep: Path) -> Path:
    key = hashlib.sha1(str(rep.resolve()).encode()).hexdigest()[:12]
    return export_cache_dir() / bounded_name(f"{rep.stem}-{key}", ".sqlite", spare=len(_JOURNAL))


def _failure_hint(rep: Path, status: int, output: str) -> str:
    """Why nsys export failed, in the words a user can act on."""
    if status < 0 or 128 < status < 160:
        return f"nsys export {exit_reason(status)} before it finished (nothing was kept): run it again"
    nospace = next((ln.strip() for ln in output.splitlines() if "No space left on device" in ln), None)
    if nospace:
        return f"the disk is full ({nospace}): free some space, or set TMPDIR to a folder with room"
    size = rep.stat().st_size
    with open(rep, "rb") as f:
        head = f.read(4096)
    if size == 0:
        return f"{rep.name} is empty (0 bytes): it was never written; record it again"
    if not _VERSION.search(head) and (not head or sum(32 <= b < 127 or b in (9, 10, 13) for b in head) > 0.95 * len(head)):
        return f"{rep.name} is not an nsys report (it holds text): record it again or pass the right file"
    return (f"{rep.name} is damaged or truncated ({size} bytes; a copy cut short?): copy it again, or "
            f"record it again")


_PARTIAL = ".partial.sqlite"
_JOURNAL = "-journal"  # SQLite writes <db>-journal beside a database it changes (labkit's mark)


def _partial_name(db: Path, pid: int) -> str:
    """The name of the file nsys exports ``db`` into before the rename: ``.<stem>.<pid>.partial.sqlite``
    (bounded: :func:`labkit.paths.bounded_name`), the exporting process's pid in it."""
    return bounded_name(f".{db.stem}", f".{pid}{_PARTIAL}", spare=len(_JOURNAL))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _remove_stale_partials(db: Path) -> None:
    """Delete the partial exports of ``db`` that an export killed outright (kill -9, a power cut) left:
    named as :func:`_partial_name` names them, owned by this user, and of a process that is gone. One
    whose process lives (an export under way) and any other file stay."""
    pattern = re.compile(r"\.(\d+)" + re.escape(_PARTIAL) + "$")
    try:
        entries = list(os.scandir(db.parent))
    except OSError:
        return
    for e in entries:
        m = pattern.search(e.name)
        if not m or e.name != _partial_name(db, int(m.group(1))):
            continue
        try:
            mine = e.stat(follow_symlinks=False).st_uid == os.getuid() and e.is_file(follow_symlinks=False)
            if mine and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
                os.unlink(e.path)
        except OSError:
            continue


def export_sqlite(rep_path, *, nsys: str | None = None, progress: bool = False, force: bool = False) -> Path:
    """Export a ``.nsys-rep`` to ``.sqlite`` beside it; into the per-user export cache when its
    folder is read-only or the ``.sqlite`` there is not labkit's (never written over).

    An export is reused when it is of this very report (:func:`report_identity`, kept in its
    ``labkit_export`` table), whatever the mtimes; nsys's own export (no sidecar) when newer
    than the report. nsys writes to a temporary file renamed into place, so a failed export
    never leaves a partial ``.sqlite``. Raises NsysError (one line with the cause and fix).
    """
    rep_path = Path(rep_path)
    ident, version = report_identity(rep_path), report_version(rep_path)
    beside = rep_path.with_suffix(".sqlite")
    if not force and _reusable(beside, rep_path, ident, version):
        return beside
    ours = not beside.exists() or _read_mark(beside) is not None or _failed_export(beside)
    db = beside if ours and os.access(rep_path.parent, os.W_OK) else _cached(rep_path)
    if db != beside and not force and _reusable(db, rep_path, ident, version):
        return db
    exe = _nsys_or_raise(nsys)
    need = (16 << 20) + 10 * ident["size"]  # an export is a few times its report
    check_writable(db.parent, need_bytes=need, what="export the report into")
    _remove_stale_partials(db)
    tmp = db.with_name(_partial_name(db, os.getpid()))
    argv = [exe, "export", "--type=sqlite", f"--output={tmp}", "--force-overwrite=true", str(rep_path)]
    t0 = time.monotonic()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=3600, preexec_fn=child_setup())
        if out.returncode != 0 or not tmp.exists() or not export_is_complete(tmp, version):
            ours_v = nsys_version(exe)
            if version and ours_v and _major_minor(version) > _major_minor(ours_v):
                mm = ".".join(map(str, _major_minor(version))), ".".join(map(str, _major_minor(ours_v)))
                raise NsysError(f"{rep_path} was written by nsys {mm[0]}; the installed {mm[1]} cannot read it: "
                                f"export it with a newer nsys, or pass the .sqlite")
            check_writable(db.parent, need_bytes=need, what="export the report into")  # a disk filled meanwhile
            raise NsysError(f"nsys export of {rep_path} failed: {_failure_hint(rep_path, out.returncode, out.stdout + out.stderr)}")
        _write_mark(tmp, ident, rep_path)
        os.replace(tmp, db)
    except OSError as exc:
        raise NsysNotFoundError(f"cannot run {exe} ({exc}): install nsys with scripts/install-nsys "
                                f"or set LABKIT_NSYS") from None
    finally:
        tmp.unlink(missing_ok=True)
    if progress:
        print(f"nsys export {rep_path.name}: {time.monotonic() - t0:.1f} s", flush=True)  # stdout: not an error
    return db
