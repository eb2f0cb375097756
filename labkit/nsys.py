"""Run Nsight Systems: record a command, export a report to SQLite; both return paths.

``record`` builds a safe ``nsys profile`` command line (no CPU sampling, no context-switch
trace: sampling hangs Debian's nsys 2022.4 here, and both bloat the report) and streams the
program's output to a log beside the report while showing elapsed time on one updating line.
Loading is :mod:`labkit.report`'s job (``labkit.profile`` = record + export + load).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from labkit.env import cache_dir, nsys_version
from labkit.errors import LabkitError, check_writable, output_error, output_tail as _tail
from labkit.proc import child_setup, exit_reason, process_reason, program_lines, remove_stream_files as _remove_stream_files
from labkit.proc import wait_with_progress as _wait_with_progress

__all__ = [
    "record",
    "Recording",
    "profile_command",
    "supports_option",
    "export_cache_dir",
    "export_is_complete",
    "report_version",
    "export_sqlite",
    "report_identity",
    "recording_notes",
    "NsysError",
    "NsysNotFoundError",
    "CaptureRangeError",
    "ProgramFailedError",
    "ReportExistsError",
    "PROFILE_SPACE",
]

PROFILE_SPACE = 64 << 20
"""Free bytes a profile needs before nsys starts, in the report's folder and in the temporary
folder (an estimate: a short run's .nsys-rep, its .sqlite and nsys's .qdstrm are a few MB each)."""


class NsysError(LabkitError):
    """nsys failed; the message carries its own output."""


class NsysNotFoundError(NsysError):
    """No usable nsys executable."""


class ProgramFailedError(NsysError):
    """The profiled program exited with a non-zero status (nsys passes it through)."""


class CaptureRangeError(NsysError):
    """The requested capture range never started, so nsys wrote no report."""


class ReportExistsError(LabkitError):
    """A report of that name is already there and overwrite was not asked for."""


def _nsys_or_raise(nsys: str | None = None) -> str:
    from labkit.env import find_nsys

    path = nsys or find_nsys()
    where = os.environ.get("LABKIT_NSYS") or os.environ.get("NSYS")
    if not path or not os.path.isfile(path):
        hint = f" (LABKIT_NSYS/NSYS is set to {where!r}, which is not an executable)" if where else ""
        raise NsysNotFoundError(f"nsys not found{hint}: install it with scripts/install-nsys, or set LABKIT_NSYS "
                                f"to the nsys executable")
    if nsys_version(path) is None:  # e.g. LABKIT_NSYS=/bin/false: it runs, but is no nsys
        given = f"nsys={nsys!r}" if nsys else (f"LABKIT_NSYS/NSYS={where!r}" if where else f"{path} on PATH")
        raise NsysNotFoundError(f"{path} (from {given}) is not a working nsys: `{path} --version` printed no "
                                f"Nsight Systems version: point LABKIT_NSYS at the nsys executable "
                                f"(scripts/install-nsys installs one)")
    return path


@functools.lru_cache(maxsize=8)
def supports_option(exe: str, option: str) -> bool:
    """Whether this nsys's ``nsys profile --help`` lists ``option`` (2022.4 has --cuda-graph-trace)."""
    try:
        out = subprocess.run([exe, "profile", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in out.stdout + out.stderr


def profile_command(command: Sequence[str], *, output: Path, trace=("cuda", "nvtx"), capture_range=None,
                    nsys_args: Sequence[str] = (), overwrite: bool = False, nsys: str = "nsys",
                    graph_nodes: bool = True) -> list[str]:
    """The ``nsys profile`` argv that :func:`record` runs (exposed for tests and notebooks).

    ``graph_nodes``: with CUDA traced, record each CUDA-graph node as its own kernel
    (``--cuda-graph-trace=node``; nsys's default records a whole graph as one row), unless
    ``nsys_args`` already choose.
    """
    trace = ",".join(trace) if not isinstance(trace, str) else trace
    argv = [nsys, "profile", f"--trace={trace}", "--sample=none", "--cpuctxsw=none",
            f"--output={output}", f"--force-overwrite={'true' if overwrite else 'false'}"]
    extra = list(nsys_args)
    if graph_nodes and "cuda" in trace.split(",") and not any(a.startswith("--cuda-graph-trace") for a in extra):
        argv.append("--cuda-graph-trace=node")
    if capture_range:
        if capture_range == "cudaProfilerApi":
            argv.append("--capture-range=cudaProfilerApi")
        else:
            # an NVTX range name, in any domain ("NAME@DOMAIN" passes through as given)
            name = capture_range if "@" in capture_range else f"{capture_range}@*"
            argv += ["--capture-range=nvtx", f"--nvtx-capture={name}"]
        if not any(a.startswith("--capture-range-end") for a in extra):
            # keep the program running to its end (its output and exit code stay whole)
            argv.append("--capture-range-end=stop")
    return argv + extra + list(command)


@dataclass(frozen=True)
class Recording:
    """What :func:`record` wrote: the report, the program's log, and how it was made."""

    nsys_rep: Path
    log: Path
    argv: list
    wall_s: float
    nsys: str


def record(command, *, name: str, trace=("cuda", "nvtx"), outdir="reports/profiles", capture_range=None,
           nsys_args: Sequence[str] = (), env: dict | None = None, overwrite: bool = False,
           progress: bool = True, nsys: str | None = None) -> Recording:
    """Run ``command`` under ``nsys profile``; return the paths written (nothing is loaded).

    Args:
        command: argv list, or a string split like a shell would.
        name: report name: writes ``outdir/name.nsys-rep`` and ``outdir/name.log``.
        trace: nsys ``--trace`` APIs (keep it small: osrt/cudnn/cublas make reports huge).
        capture_range: None (whole run), "cudaProfilerApi", or an NVTX range name
            (``"measure"`` or ``"measure@domain"``): only that range is recorded, so warm-up
            stays out. Unregistered NVTX strings are matched (NSYS_NVTX_PROFILER_REGISTER_ONLY=0).
        nsys_args: extra nsys options, added before the command.
        env: extra environment variables for the program.
        overwrite: replace an existing report of the same name.
        progress: one updating line with the elapsed time (a terminal, or a widget in Jupyter).
    Returns: :class:`Recording` (``nsys_rep``, ``log``, ``argv``, ``wall_s``, ``nsys``).
    Raises: NsysNotFoundError, ReportExistsError (also while another run records the same name),
        CaptureRangeError, ProgramFailedError, NsysError, OutputError (folder not writable, disk full);
        KeyboardInterrupt after Ctrl-C, once nsys has stopped the program and written what it could.
    """
    argv_cmd = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    if not argv_cmd:
        raise NsysError("empty command: pass the program to profile, e.g. ['python', 'app.py']")
    outdir = Path(outdir)
    base = outdir / name
    rep, db, log = base.with_suffix(".nsys-rep"), base.with_suffix(".sqlite"), base.with_suffix(".log")
    exe = _nsys_or_raise(nsys)
    run_env = {**os.environ, **(env or {})}
    tmp = run_env.get("TMPDIR") or tempfile.gettempdir()  # nsys's; Python's skips a full one for /tmp
    check_writable(outdir, need_bytes=PROFILE_SPACE, what="write the report into")
    check_writable(tmp, need_bytes=PROFILE_SPACE // 2, what="write nsys's temporary .qdstrm into")
    # the name is reserved for this run (see _reserve), so nsys may replace the placeholder
    # nsys 2022.4 starts its program with umask 0000 (every file it makes world-writable): restore 022
    argv = profile_command(["/bin/sh", "-c", 'umask 022 && exec "$@"', argv_cmd[0], *argv_cmd], output=base, trace=trace, capture_range=capture_range,
                           nsys_args=nsys_args, overwrite=True, nsys=exe,
                           graph_nodes=supports_option(exe, "--cuda-graph-trace"))
    if capture_range and capture_range != "cudaProfilerApi":
        run_env.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")
    t0 = time.monotonic()
    with _reserve(rep, db, log, overwrite) as logf:
        logf.write(f"# {shlex.join(argv)}\n")
        logf.flush()
        try:
            # its own session: a terminal's Ctrl-C reaches labkit only, which hands nsys one SIGINT
            # umask 022 for nsys and its program; nsys gets SIGTERM (it stops the program) if we die
            proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, env=run_env,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=child_setup(signal.SIGTERM))
        except OSError as exc:
            raise NsysNotFoundError(f"cannot run {exe} ({exc}): install nsys with scripts/install-nsys "
                                    f"or set LABKIT_NSYS") from None
        interrupted = _wait_with_progress(proc, f"nsys profile {name}", progress)
        output = log.read_text(errors="replace")
        _remove_stream_files(output, outdir)
        written = rep.exists() and rep.stat().st_size > 0
        if written:
            _write_note(logf, rep, proc.returncode, interrupted)
    if interrupted == 1:
        kept = f"the report nsys finished is kept: {rep}" if written else "nsys wrote no report"
        raise KeyboardInterrupt(f"interrupted: nsys stopped the program; {kept} (its output: {log})")
    if interrupted:
        kept = f"{rep} may be incomplete" if written else "no report was kept"
        raise KeyboardInterrupt(f"interrupted again: nsys was stopped before it finished; {kept} (its output: {log})")
    if proc.returncode != 0:
        if written:  # nsys passes the program's exit status through and still writes the report
            err = ProgramFailedError(f"the profiled program {exit_reason(proc.returncode)} (the report of its run so "
                                     f"far is kept: {rep}; full log: {log}); its last lines:\n"
                                     f"{program_lines(output) or '(it printed nothing)'}")
            err.reason = process_reason(proc.returncode, program_lines(output, 200), "the profiled program")
            raise err
        check_writable(outdir, need_bytes=PROFILE_SPACE, what="write the report into")  # a disk filled meanwhile
        raise NsysError(f"nsys profile {exit_reason(proc.returncode)} after "
                        f"{time.monotonic() - t0:.1f} s; its output (full log: {log}):\n{_tail(output)}")
    if not written:
        if capture_range:
            raise CaptureRangeError(
                f"capture range {capture_range!r} never started, so nsys wrote no report: check that the "
                f"program opens that NVTX range (or calls cudaProfilerStart) and that -t includes nvtx/cuda; "
                f"program output: {log}")
        check_writable(tmp, need_bytes=PROFILE_SPACE // 2,  # a full TMPDIR stops nsys's import
                       what="write nsys's temporary .qdstrm into (set TMPDIR to a folder with room)")
        qd = base.with_suffix(".qdstrm")
        hint = (" (only a .qdstrm was left: nsys's importer is missing; run scripts/install-nsys to fix it)"
                if qd.exists() else "")
        raise NsysError(f"nsys finished but wrote no {rep.name}{hint}; its output:\n{_tail(output)}")
    return Recording(nsys_rep=rep, log=log, argv=argv, wall_s=round(time.monotonic() - t0, 3), nsys=exe)


@contextlib.contextmanager
def _reserve(rep: Path, db: Path, log: Path, overwrite: bool):
    """Reserve a report name for one run and yield its log, open for writing.

    The log is locked (``flock``) for the whole run, so a second run of the same name is refused
    instead of writing over the first one's files; without ``overwrite`` the report name is
    also taken with ``O_EXCL`` (an empty placeholder nsys replaces), so an existing report is
    never touched. Raises ReportExistsError, OutputError.
    """
    try:
        try:
            fd, created = os.open(log, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            fd, created = os.open(log, os.O_RDWR), False
    except OSError as exc:
        raise output_error(log, exc, need_bytes=PROFILE_SPACE) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ReportExistsError(f"{rep} is being recorded by another run right now (its log {log} is in use): "
                                    f"choose another name, or wait for that run to finish") from None
        try:
            if overwrite:
                for p in (rep, db):
                    p.unlink(missing_ok=True)
            elif db.exists():
                raise FileExistsError(db)
            os.close(os.open(rep, os.O_WRONLY | os.O_CREAT | (0 if overwrite else os.O_EXCL), 0o644))
        except FileExistsError as exc:
            raise ReportExistsError(f"{exc.filename or rep} already exists: pass overwrite=True (CLI: --overwrite) "
                                    f"or choose another name") from None
        except OSError as exc:
            raise output_error(rep, exc, need_bytes=PROFILE_SPACE) from None
    except BaseException:
        if created:
            log.unlink(missing_ok=True)
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "w") as logf:  # closing it releases the lock
        try:
            yield logf
        finally:
            if rep.exists() and rep.stat().st_size == 0:
                rep.unlink()  # the reservation, never filled: whatever stopped the run


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
    return export_cache_dir() / f"{rep.stem}-{key}.sqlite"


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
    tmp = db.with_name(f".{db.stem}.{os.getpid()}.partial.sqlite")
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


_NOTE = "# labkit: "


def _write_note(logf, rep: Path, status: int, interrupted: int) -> None:
    """Record, as the log's last line, how the program ended (read by :func:`recording_notes`)."""
    i = report_identity(rep)
    logf.write(f"\n{_NOTE}exit_status={status} interrupted={interrupted} report={i['size']}:{i['sha256']}\n")
    logf.flush()


def recording_notes(rep_path) -> list[str]:
    """Notes a report must carry about how it was recorded: the program was killed or failed, or
    the run was interrupted, so the report covers only part of it. Read from the last line of
    the log :func:`record` wrote beside it; empty for a whole run, a report labkit did not
    record, or one replaced since."""
    rep_path = Path(rep_path).with_suffix(".nsys-rep")
    try:  # the log's last note, of this very report
        lines = rep_path.with_suffix(".log").read_text(errors="replace").splitlines()
        note = dict(kv.split("=", 1) for kv in next(x for x in reversed(lines) if x.startswith(_NOTE))
                    [len(_NOTE):].split())
        ident = report_identity(rep_path)
    except (OSError, StopIteration, ValueError):
        return []
    if note.get("report") != f"{ident['size']}:{ident['sha256']}":
        return []
    notes = []
    if int(note.get("interrupted", 0)):
        notes.append("the run was interrupted (Ctrl-C): this report covers only the part before it")
    status = int(note.get("exit_status", 0))
    if status:
        notes.append(f"the profiled program {exit_reason(status)}: this report covers only its run up to then, "
                     f"not a whole run")
    return notes
