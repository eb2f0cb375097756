"""Record part of a running process: ``nsys start``/``nsys stop`` of the session it was started in.

A process started with ``nsys launch`` (the Jupyter kernel :mod:`labkit.record.kernel` installs)
runs traced but unrecorded until ``nsys start --session=S`` and is recorded until ``nsys stop``:
:func:`recording` wraps a block in that pair and returns the report's path. The session is named
by ``$LABKIT_NSYS_SESSION`` (the kernel's launcher sets it), else by the ``NSYS_PROFILING_SESSION_ID``
nsys gives every process it launches. nsys 2022.4 answers some refusals with status 0 (``nsys start
--session=NAME`` of no live session starts a new, empty system-wide one; a report name in use fails
only at ``stop``), so the session is looked up in ``nsys sessions list`` first and the report is
looked for on disk after.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

from labkit.errors import check_writable, output_tail
from labkit.paths import check_name, nsys_output, report_files
from labkit.record.tool import NsysError, _nsys_or_raise

__all__ = ["SESSION_VAR", "NotUnderNsysError", "SessionError", "session_of_this_process", "free_name",
           "recording", "START_OPTIONS"]

SESSION_VAR = "LABKIT_NSYS_SESSION"
"""The environment variable naming the nsys session this process runs in (set by the kernel's launcher)."""
START_OPTIONS = ("--sample=none", "--cpuctxsw=none")
"""What ``nsys start`` is given besides its output: no CPU sampling and no context switches, as
:func:`labkit.record.nsys.profile_command` records (sampling hangs nsys 2022.4 here; a launched
program would get process-tree sampling by default)."""
START_SETTLE_S = 1.0
"""Seconds between ``nsys start`` returning and the cell running (see :func:`recording`)."""


FIX = ('switch to the kernel "Python (labkit nsys)" (Kernel > Change Kernel; install it with '
       "`python -m labkit kernel install`)")


class NotUnderNsysError(NsysError):
    """This process was not started by ``nsys launch``, so no part of it can be recorded."""


class SessionError(NsysError):
    """The session would not start or stop recording, or wrote no report."""


def _sessions(exe: str) -> dict[str, tuple[str, str]]:
    """``{id or name: (id, state)}`` of the live nsys sessions of this user (``nsys sessions list``)."""
    out = subprocess.run([exe, "sessions", "list", "--show-header=false"], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    found = {}
    for line in out.stdout.splitlines():
        parts = line.split(None, 4)  # ID TIME STATE LAUNCH NAME (a name may hold spaces)
        if len(parts) == 5:
            found[parts[0]] = found[parts[4].strip()] = (parts[0], parts[2])
    return found


def session_of_this_process(nsys: str | None = None) -> tuple[str, str]:
    """``(session, nsys executable)`` of the ``nsys launch`` session this process runs in; else
    :class:`NotUnderNsysError` in one line with the fix."""
    session = os.environ.get(SESSION_VAR) or os.environ.get("NSYS_PROFILING_SESSION_ID")
    if not session:
        why = os.environ.get("LABKIT_NSYS_KERNEL_NOTE")  # the launcher's reason, where it ran without nsys
        raise NotUnderNsysError(f"this kernel does not run under Nsight Systems{f' ({why})' if why else ''}, so no "
                                f"cell of it can be recorded: {FIX}")
    exe = _nsys_or_raise(nsys)
    live = _sessions(exe)
    if session not in live:
        raise NotUnderNsysError(f"the nsys session {session!r} this kernel was launched in is not running any more "
                                f"(`nsys sessions list`): restart the kernel")
    if live[session][1] != "Launched":
        raise SessionError(f"the nsys session {session!r} of this kernel is busy ({live[session][1]}): a cell "
                           f"records already (a %%nsys cell inside another, or a kernel under `nsys profile`, which "
                           f"records all of it), or nsys is still writing a report: restart the kernel")
    return session, exe


def free_name(outdir, name: str) -> str:
    """``name``, else ``name-2``, ``name-3``...: the first whose report files are all absent in ``outdir``
    (a report is never written over)."""
    check_name(name, what="report name")
    for n in range(1, 10_000):
        cand = name if n == 1 else f"{name}-{n}"
        if not any(os.path.lexists(p) for p in report_files(outdir, cand).values()):
            return cand
    raise SessionError(f"{outdir} holds 9,999 reports named {name!r}-N: choose another name")


def _run(exe: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def recording(outdir, name: str, *, nsys: str | None = None):
    """Record the ``with`` block into ``outdir/NAME.nsys-rep`` (``NAME-2``... where that is taken).

    Yields the report's path, written when the block ends (also when it raises: the report then
    covers it up to there). Raises NotUnderNsysError, SessionError (nsys refused, or wrote no
    report, with its own words), OutputError (``outdir`` not writable).
    """
    session, exe = session_of_this_process(nsys)
    outdir = Path(outdir)
    check_writable(outdir, need_bytes=16 << 20, what="write the report into")
    name = free_name(outdir, name)
    rep = report_files(outdir, name)[".nsys-rep"]
    started = _run(exe, "start", f"--session={session}", *START_OPTIONS, "--force-overwrite=false",
                   f"--output={nsys_output(outdir.absolute() / name)}")
    if started.returncode != 0:
        raise SessionError(f"nsys start refused (status {started.returncode}): "
                           f"{output_tail(started.stdout + started.stderr, 3)}")
    # nsys lists the session as collecting as soon as `start` returns, but the kernel's injected
    # library takes the start up a little later: on the loaded 2-core VM a cell's first NVTX range
    # (1 of 4 batches) went unrecorded now and then. A pause lets it take effect first.
    time.sleep(START_SETTLE_S)
    try:
        yield rep
    finally:
        stopped = _run(exe, "stop", f"--session={session}")
    if not (rep.is_file() and rep.stat().st_size > 0):
        raise SessionError(f"nsys stop wrote no {rep.name} (status {stopped.returncode}); its output: "
                           f"{output_tail(stopped.stdout + stopped.stderr, 3) or '(none)'}")
