"""Run Nsight Systems: record a command, export a report to SQLite; both return paths.

``record`` builds a safe ``nsys profile`` command line (no CPU sampling, no context-switch
trace: sampling hangs Debian's nsys 2022.4 here, and both bloat the report) and streams the
program's output to a log beside the report while showing elapsed time on one updating line.
Loading is :mod:`labkit.report`'s job (``labkit.profile`` = record + export + load).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from labkit.env import usable_cpus
from labkit.errors import LabkitError, check_writable, output_error, output_tail as _tail, record_written, written_by_labkit
from labkit.paths import nsys_output, report_base, report_files
from labkit.record.proc import (child_setup, profiled_env, exit_reason, process_reason, program_lines, remove_stream_files as
                                _remove_stream_files)
from labkit.record.proc import wait_with_progress as _wait_with_progress
from labkit.record.export import report_identity
from labkit.record.tool import NsysError, NsysNotFoundError, _nsys_or_raise, supports_option

__all__ = ["record", "Recording", "profile_command", "supports_option", "report_identity", "recording_notes", "NsysError",
           "NsysNotFoundError", "CaptureRangeError", "ProgramFailedError", "ProfileTimeoutError", "ReportExistsError",
           "PROFILE_SPACE", "TRACE", "START_TRIES", "start_race", "start_again"]

PROFILE_SPACE = 64 << 20
"""Free bytes a profile needs before nsys starts, in the report's folder and in the temporary
folder (an estimate: a short run's .nsys-rep, its .sqlite and nsys's .qdstrm are a few MB each)."""

TRACE = ("cuda", "nvtx", "osrt")
"""What labkit traces by default, as ``nsys profile``'s own default does: CUDA, NVTX and OS runtime
calls (sleeps, waits, locks and blocking reads are blocked time, not work: labkit.stats.blocked)."""
NO_STACKS_NS = 2**31 - 1
"""An OS runtime call must last this long (2.1 s) before nsys takes its call stack. It is the largest
value nsys takes: 2025.3.1 refuses 2**32 - 1 and 10**12 ("Illegal --osrt-backtrace-threshold
argument", H200 device, 2026-11-28); 2022.4 takes it too."""


class ProgramFailedError(NsysError):
    """The profiled program exited with a non-zero status (nsys passes it through)."""


class ProfileTimeoutError(NsysError):
    """The profile ran past the time limit it was given (``timeout_s``); nsys was stopped."""


class CaptureRangeError(NsysError):
    """The requested capture range never started, so nsys wrote no report."""


class ReportExistsError(LabkitError):
    """A report of that name is already there and overwrite was not asked for."""


def profile_command(command: Sequence[str], *, output: Path, trace=TRACE, capture_range=None,
                    nsys_args: Sequence[str] = (), overwrite: bool = False, nsys: str = "nsys",
                    graph_nodes: bool = True, osrt_stacks: bool = False, forks: bool = True) -> list[str]:
    """The ``nsys profile`` argv that :func:`record` runs (exposed for tests and notebooks).

    ``graph_nodes``: with CUDA traced, record each CUDA-graph node as its own kernel
    (``--cuda-graph-trace=node``; nsys's default records a whole graph as one row), unless
    ``nsys_args`` already choose. ``osrt_stacks``: with OS runtime calls traced, keep nsys's call
    stack of every call over 80 us; without it (the default, unless ``nsys_args`` choose) no stack
    is taken (``--osrt-backtrace-threshold`` past any call's length): no analysis reads them, each
    costs the traced thread its unwinding, and they were most of a GPU run's export (a 12-batch
    slice of the lab's queued pipeline on an H200: 29 MB, 0.9 MB without). Context switches are not
    traced (``--cpuctxsw=none``) unless ``nsys_args`` choose: with them (``--cpuctxsw=process-tree``,
    nsys's own default) a wait no traced call names reads as one
    (:func:`labkit.stats.blocked.untraced_waits`), but nsys 2022.4 hung generating the report in 2
    of 18 such profiles of the known-answer programs here (2026-11-28; none of 3 of the same program
    without). CPU sampling
    stays off. ``forks``: children that fork without exec are traced (``--trace-fork-before-exec=true``,
    unless ``nsys_args`` choose): a PyTorch DataLoader's workers and ``multiprocessing``'s fork
    children run the program's own code, and nsys's default leaves their ranges and calls out, so
    the parent's wait on their pipe would read as latency of its own.
    """
    trace = ",".join(trace) if not isinstance(trace, str) else trace
    extra = list(nsys_args)
    ctxsw = [] if any(a.startswith("--cpuctxsw") for a in extra) else ["--cpuctxsw=none"]
    argv = [nsys, "profile", f"--trace={trace}", "--sample=none", *ctxsw,
            f"--output={output}", f"--force-overwrite={'true' if overwrite else 'false'}"]
    if graph_nodes and "cuda" in trace.split(",") and not any(a.startswith("--cuda-graph-trace") for a in extra):
        argv.append("--cuda-graph-trace=node")
    if not osrt_stacks and "osrt" in trace.split(",") and not any(a.startswith("--osrt-backtrace") for a in extra):
        argv.append(f"--osrt-backtrace-threshold={NO_STACKS_NS}")
    if forks and not any(a.startswith("--trace-fork-before-exec") for a in extra):
        argv.append("--trace-fork-before-exec=true")
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


START_TRIES = 3
"""Times labkit starts nsys when it fails before its program ran with one of nsys 2022.4's start-up
races (:func:`start_race`: seen on the 2-core VM and in CI under load, with other nsys sessions running)."""


def start_race(output: str) -> bool:
    """Whether nsys's output is one of its start-up races under load: ``sem_open`` in
    ``ProcessWaiter``, or its agent's state machine shut down before its start completed ("No
    transition in ...ShutdownE ... for ...StartCompletedE", seen on the 2-core VM with ranks), or its
    client finding no endpoint of its daemon ("Local Endpoint is not available" from
    ``ClientProxy::GetLocalEndpoint``: CI, a by-hand profile started beside the lab's other sessions).
    Each ends nsys before the program ran, so starting it again loses nothing."""
    return ("ProcessWaiter" in output and "sem_open" in output) or (
        "No transition in" in output and "StartCompleted" in output) or (
        "GetLocalEndpoint" in output and "Local Endpoint is not available" in output)


def start_again(attempt: int, say, what: str = "its program") -> bool:
    """After start ``attempt`` (0-based) ended in :func:`start_race`: whether to start nsys again (a
    start is left of ``START_TRIES``); if so, says it through ``say`` (one line) and waits a little
    longer each time. Every place labkit starts nsys (a profile, the ranks, a by-hand line) goes
    through here, so they start again alike and say it in the same words."""
    if attempt >= START_TRIES - 1:
        return False
    say(f"nsys failed to start {what} (its start-up race beside other nsys sessions); "
        f"started again ({attempt + 2} of {START_TRIES})")
    time.sleep(0.5 * (attempt + 1))
    return True


_ESCAPED = "LABKIT_ESCAPED_ARGS"
_WRAPPER = ('umask 022; i=0; n=$#; for a do i=$((i+1)); case " $LABKIT_ESCAPED_ARGS " in *" $i "*) '
            'a=$(printf \'%b.\' "$a"); a=${a%.};; esac; set -- "$@" "$a"; done; shift "$n"; '
            'unset LABKIT_ESCAPED_ARGS; exec "$@"')
"""What nsys runs: the program under umask 022 (nsys 2022.4 gives it 0000: world-writable files), its
arguments that are not UTF-8 decoded back to their bytes: nsys passes its command line on as
protobuf text and fails on them ("Message parsing failed"), so they travel as ``\\0ooo`` escapes."""


def _wrapped(argv_cmd: list[str]) -> tuple[list[str], str]:
    """(the argv nsys runs, the value of ``LABKIT_ESCAPED_ARGS``): ``/bin/sh -c`` :data:`_WRAPPER`,
    each argument that is not UTF-8 (a Latin-1 file name, surrogate-escaped in argv) as octal escapes
    of its bytes and its position in the escaped list."""
    out, escaped = [], []
    for i, arg in enumerate(argv_cmd, 1):
        try:
            arg.encode("utf-8")
            out.append(arg)
        except UnicodeEncodeError:
            out.append("".join(f"\\0{b:03o}" for b in os.fsencode(arg)))
            escaped.append(str(i))
    name = out[0] if not escaped or escaped[0] != "1" else "program"  # $0: the shell's name for messages
    return ["/bin/sh", "-c", _WRAPPER, name, *out], " ".join(escaped)


def record(command, *, name: str, trace=TRACE, outdir="reports/profiles", capture_range=None,
           nsys_args: Sequence[str] = (), env: dict | None = None, overwrite: bool = False,
           progress: bool = True, nsys: str | None = None, timeout_s: float | None = None) -> Recording:
    """Run ``command`` under ``nsys profile``; return the paths written (nothing is loaded).

    Args:
        command: argv list, or a string split like a shell would.
        name: report name: writes ``outdir/name.nsys-rep`` and ``outdir/name.log``.
        trace: nsys ``--trace`` APIs (keep it small: osrt/cudnn/cublas make reports huge).
        capture_range: None (whole run), "cudaProfilerApi", or an NVTX range name
            (``"measure"`` or ``"measure@domain"``): only that range is recorded, so warm-up
            stays out. Unregistered NVTX strings are matched (NSYS_NVTX_PROFILER_REGISTER_ONLY=0).
        nsys_args: extra nsys options, added before the command.
        env: extra environment variables for the program (kept as given); what it inherits from
            this process loses its secrets (:func:`labkit.record.proc.profiled_env`).
        overwrite: replace an existing report of the same name.
        progress: one updating line with the elapsed time (a terminal, or a widget in Jupyter).
        timeout_s: stop the run (as Ctrl-C does: nsys stops the program and writes what it has) past
            that many seconds, and raise ProfileTimeoutError; None waits as long as it takes. A limit
            well over the program's own time guards unattended runs against nsys 2022.4's rare hang
            at its program's exit.
    Returns: :class:`Recording` (``nsys_rep``, ``log``, ``argv``, ``wall_s``, ``nsys``).
    Raises: NsysNotFoundError, ReportExistsError (also while another run records the same name),
        CaptureRangeError, ProgramFailedError, ProfileTimeoutError, NsysError, OutputError (folder not
        writable, disk full);
        ArgumentError (a timeout_s that is NaN, infinite, 0 or below);
        KeyboardInterrupt after Ctrl-C, once nsys has stopped the program and written what it could.
    """
    from labkit.errors import seconds

    timeout_s = seconds(timeout_s, "timeout_s")  # NaN waited for ever; 0 or -1 ran nsys to fail after it
    argv_cmd = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    if not argv_cmd:
        raise NsysError("empty command: pass the program to profile, e.g. ['python', 'app.py']")
    outdir = Path(outdir)
    files = report_files(outdir, name)  # the one name check; the suffix is added, as nsys does
    base = outdir / report_base(name)  # "x.nsys-rep": nsys writes x.nsys-rep
    rep, db, log = files[".nsys-rep"], files[".sqlite"], files[".log"]
    exe = _nsys_or_raise(nsys)
    run_env = profiled_env(env)  # no JUPYTER_TOKEN and the like: nsys 2025.x stores it in the report
    tmp = run_env.get("TMPDIR") or tempfile.gettempdir()  # nsys's; Python's skips a full one for /tmp
    check_writable(outdir, need_bytes=PROFILE_SPACE, what="write the report into")
    check_writable(tmp, need_bytes=PROFILE_SPACE // 2, what="write nsys's temporary .qdstrm into")
    # the name is reserved for this run (see _reserve), so nsys may replace the placeholder
    # nsys 2022.4 starts its program with umask 0000 (every file it makes world-writable): restore 022
    wrapped, run_env[_ESCAPED] = _wrapped(argv_cmd)
    argv = profile_command(wrapped, output=nsys_output(base), trace=trace, capture_range=capture_range,
                           nsys_args=nsys_args, overwrite=True, nsys=exe,
                           graph_nodes=supports_option(exe, "--cuda-graph-trace"),
                           osrt_stacks=not supports_option(exe, "--osrt-backtrace-threshold"),
                           forks=supports_option(exe, "--trace-fork-before-exec"))
    if capture_range and capture_range != "cudaProfilerApi":
        run_env.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")
    cpus = usable_cpus()  # what the program will be able to use: nsys's CpuCores is the machine's count
    t0 = time.monotonic()
    with _reserve(rep, db, log, overwrite, _output_arg(base)) as logf:
        logf.write(f"# {shlex.join(argv)}\n")
        logf.flush()
        def say(line):
            logf.write(f"{_NOTE}{line}\n")
            logf.flush()

        for attempt in range(START_TRIES):
            start = logf.tell()
            try:
                # its own session: a terminal's Ctrl-C reaches labkit only, which hands nsys one SIGINT
                # umask 022 for nsys and its program; nsys gets SIGTERM (it stops the program) if we die
                proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, env=run_env,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=child_setup(signal.SIGTERM))
            except OSError as exc:
                raise NsysNotFoundError(f"cannot run {exe} ({exc}): install nsys with scripts/install-nsys "
                                        f"or set LABKIT_NSYS") from None
            interrupted = _wait_with_progress(proc, f"nsys profile {name}", progress, timeout_s)
            logf.flush()
            output = log.read_text(errors="replace")
            if not (proc.returncode and not interrupted and start_race(output[start:])
                    and not (rep.exists() and rep.stat().st_size > 0)) or not start_again(attempt, say):
                break
        _remove_stream_files(output, outdir)
        written = rep.exists() and rep.stat().st_size > 0
        if written:
            _write_note(logf, rep, proc.returncode, interrupted, cpus)
    if proc.timed_out:
        kept = (f"the report of the run so far is kept: {rep}" if written and interrupted == 1 else
                "nsys did not finish a report and was ended" if interrupted > 1 else "nsys wrote no report")
        raise ProfileTimeoutError(f"the profile ran past its {timeout_s:g} s limit, so nsys stopped the program; "
                                  f"{kept}; allow it longer if the program needs that (its output: {log})")
    if interrupted == 1:
        kept = f"the report nsys finished is kept: {rep}" if written else "nsys wrote no report"
        raise KeyboardInterrupt(f"{getattr(proc, 'stopped_by', 'interrupted')}: nsys stopped the program; {kept} "
                                f"(its output: {log})")
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
        qd = Path(f"{base}.qdstrm")
        hint = (" (only a .qdstrm was left: nsys's importer is missing; run scripts/install-nsys to fix it)"
                if qd.exists() else "")
        raise NsysError(f"nsys finished but wrote no {rep.name}{hint}; its output:\n{_tail(output)}")
    return Recording(nsys_rep=rep, log=log, argv=argv, wall_s=round(time.monotonic() - t0, 3), nsys=exe)


def _output_arg(base: Path) -> str:
    """The ``--output=`` word of the nsys command line for ``base``, as the log's first line shows it."""
    return shlex.quote(f"--output={nsys_output(base)}")


def labkit_log(log: Path, output_arg: str) -> bool:
    """Whether ``log`` is a log labkit wrote for this very report: marked as labkit's and unchanged
    since (:func:`labkit.errors.written_by_labkit`), or opening with labkit's ``# <nsys command line>``
    with that ``--output=`` (a run killed outright leaves no mark). A program's own log of that name
    (``train.log`` beside ``train.py``) is neither, so it is never truncated."""
    if written_by_labkit(log):
        return True
    try:
        with open(log, "rb") as f:
            first = f.readline(65536).decode("utf-8", errors="replace")
    except OSError:
        return False
    return first.startswith("# ") and f" {output_arg} " in first and " profile " in first


def claim_log(log: Path, output_arg: str) -> tuple[int, bool]:
    """Open ``log`` for labkit's writing: created, or an earlier log of labkit's for this report
    (:func:`labkit_log`); returns (descriptor, created). A file labkit did not write is refused
    (:class:`ReportExistsError`, with or without overwrite: it is not a report), an unwritable one is
    OutputError."""
    try:
        try:
            return os.open(log, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            if not labkit_log(log, output_arg):
                raise ReportExistsError(
                    f"{log} already exists and labkit did not write it (the program's own log?): labkit writes the "
                    f"program's output to NAME.log beside the report, so choose another --name (name=) or "
                    f"--outdir") from None
            return os.open(log, os.O_RDWR), False
    except OSError as exc:
        raise output_error(log, exc, need_bytes=PROFILE_SPACE) from None


def _stale_placeholder(rep: Path, log: Path, output_arg: str) -> bool:
    """Whether ``rep`` is the empty placeholder of a run of labkit's that was killed outright (kill -9):
    0 bytes, and marked as labkit's or beside labkit's log of it. Asked only with that log's lock
    held, so no run of this name is under way."""
    try:
        if not rep.is_file() or rep.is_symlink() or rep.stat().st_size:
            return False
    except OSError:
        return False
    return written_by_labkit(rep) or labkit_log(log, output_arg)


@contextlib.contextmanager
def _reserve(rep: Path, db: Path, log: Path, overwrite: bool, output_arg: str):
    """Reserve a report name for one run and yield its log, open for writing.

    The log is locked (``flock``) for the whole run, so a second run of the same name is refused
    instead of writing over the first one's files, and it must be labkit's (:func:`claim_log`);
    without ``overwrite`` the report name is also taken with ``O_EXCL`` (an empty placeholder nsys
    replaces, marked as labkit's), so an existing report is never touched, and the placeholder a run
    killed outright left is taken back. Raises ReportExistsError, OutputError.
    """
    fd, created = claim_log(log, output_arg)
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
            elif _stale_placeholder(rep, log, output_arg):
                rep.unlink()
            os.close(os.open(rep, os.O_WRONLY | os.O_CREAT | (0 if overwrite else os.O_EXCL), 0o644))
            record_written(rep)
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
    # a file name in another encoding (surrogateescape from argv) is written escaped, never an error
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as logf:  # closing releases the lock
        try:
            yield logf
        finally:
            if rep.exists() and rep.stat().st_size == 0:
                rep.unlink()  # the reservation, never filled: whatever stopped the run
            logf.flush()
            record_written(log)


_NOTE = "# labkit: "


def _write_note(logf, rep: Path, status: int, interrupted: int, cpus: int | None) -> None:
    """Record, as the log's last line, how the program ended and how many CPUs it could use (read by
    :func:`recording_notes` and :func:`recording_cpus`)."""
    i = report_identity(rep)
    logf.write(f"\n{_NOTE}exit_status={status} interrupted={interrupted} report={i['size']}:{i['sha256']}"
               + (f" cpus={cpus}" if cpus else "") + "\n")
    logf.flush()


def note_ranks_report(rep: Path, cpus: int | None) -> None:
    """Write the note of a rank's report that ran to its end, as :func:`record` writes its own, as the
    last line of the log beside it (``NAME_<rank>.log``; appended to, where there is one): the ranks of
    :func:`labkit.ranks.profile.profile_ranks` share torchrun's log, and the CPUs they could use count."""
    with open(Path(rep).with_suffix(".log"), "a") as logf:
        _write_note(logf, Path(rep), 0, 0, cpus)


def _last_note(rep_path) -> dict:
    """The last note of the log :func:`record` wrote beside ``rep_path``, where it is of this very report
    (else empty: a report labkit did not record, or one replaced since)."""
    rep_path = Path(rep_path).with_suffix(".nsys-rep")
    try:
        lines = rep_path.with_suffix(".log").read_text(errors="replace").splitlines()
        note = dict(kv.split("=", 1) for kv in next(x for x in reversed(lines) if x.startswith(_NOTE))
                    [len(_NOTE):].split())
        ident = report_identity(rep_path)
    except (OSError, StopIteration, ValueError):
        return {}
    return note if note.get("report") == f"{ident['size']}:{ident['sha256']}" else {}


def recording_facts(rep_path) -> tuple[list[str], int | None]:
    """(:func:`recording_notes`, :func:`recording_cpus`) of a report, its log read once."""
    note = _last_note(rep_path)
    return _notes(note), _cpus(note)


def recording_cpus(rep_path) -> int | None:
    """How many CPUs the recorded program could use (its affinity and container quota, as
    :func:`labkit.env.usable_cpus` read them when it started), where labkit recorded the report."""
    return _cpus(_last_note(rep_path))


def _cpus(note: dict) -> int | None:
    n = note.get("cpus", "")
    return int(n) if re.fullmatch(r"[1-9][0-9]{0,4}", n) else None


def recording_notes(rep_path) -> list[str]:
    """Notes a report must carry about how it was recorded: the program was killed or failed, or
    the run was interrupted, so the report covers only part of it. Read from the last line of
    the log :func:`record` wrote beside it; empty for a whole run, a report labkit did not
    record, or one replaced since."""
    return _notes(_last_note(rep_path))


def _notes(note: dict) -> list[str]:
    if not note:
        return []
    try:
        interrupted, status = int(note.get("interrupted", 0)), int(note.get("exit_status", 0))
    except ValueError:  # not a note labkit wrote
        return []
    notes = []
    if interrupted:
        notes.append("the run was interrupted (Ctrl-C): this report covers only the part before it")
    if status:
        notes.append(f"the profiled program {exit_reason(status)}: this report covers only its run up to then, "
                     f"not a whole run")
    return notes
