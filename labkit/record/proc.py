"""How labkit runs a child program, and what it reads from one that failed.

One home for: the child's start (a sane umask, and a parent-death signal so that a killed Python
process takes nsys or the application with it), the environment a profiled program inherits (its
secrets removed: nsys 2025.x stores the process environment in each report), the words for an exit status (a signal is named),
and the program's own last lines in a log that nsys also wrote to (its progress bars dropped).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
from pathlib import Path

from labkit.progress import bar as progress_bar

__all__ = ["profiled_env", "is_secret", "SECRET_NAMES", "SECRET_SUFFIXES", "child_setup", "exit_reason", "program_lines",
           "last_error_line", "wait_with_progress", "remove_stream_files", "process_reason", "signals_as_interrupt",
           "stop_children", "Stop", "UMASK"]

UMASK = 0o022
"""The umask every child runs with (nsys 2022.4 gives its program 0000: world-writable files)."""
REPORT_GRACE_S = 30
"""Seconds at least that nsys gets to write its report once a run that ran past its time limit is stopped."""

_PR_SET_PDEATHSIG = 1

SECRET_NAMES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "AWS_SECRET_ACCESS_KEY")
"""Variables a profiled program never inherits, whatever their case."""
SECRET_SUFFIXES = ("_TOKEN", "_SECRET", "_PASSWORD", "_PASSWD", "_SECRET_KEY", "_API_KEY")
"""...nor any whose name ends so: ``JUPYTER_TOKEN`` (the JupyterLab kernel's, which every profile
started from a notebook inherits), ``JPY_API_TOKEN`` and ``JUPYTERHUB_API_TOKEN`` (JupyterHub),
``HF_TOKEN``, ``GITHUB_TOKEN``, ``AWS_SESSION_TOKEN``, ``*_PASSWORD``."""


def is_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (:data:`SECRET_NAMES`,
    :data:`SECRET_SUFFIXES`)."""
    upper = name.upper()
    return upper in SECRET_NAMES or upper.endswith(SECRET_SUFFIXES)


def profiled_env(extra=None, base=None) -> dict[str, str]:
    """The environment for a program labkit profiles: ``base`` (default ``os.environ``) without its
    secrets (:func:`is_secret`), since nsys 2025.x writes the process environment into every report
    and reports are shared; then ``extra``, the caller's own variables, as given.

    Args:
        extra: variables the caller sets for the program (kept, even with a secret's name).
        base: the environment to start from (default: this process's).
    Returns: the environment, a new dict.
    """
    env = {k: v for k, v in (os.environ if base is None else base).items() if not is_secret(k)}
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env

# lines nsys itself writes into the program's output
_NSYS_LINE = re.compile(
    r"^(?:# /|Generating '.*\.qdstrm'|\[\d+/\d+\] \[|Generated:|Collecting data|Processing events|"
    r"Saving temporary|Creating final output|Report file (?:moved|saved)|WARNING: |Warning: |"
    r"The target application terminated|Failed to create|Processing \[|Capture range|"
    r"\s+/\S+\.(?:nsys-rep|qdrep|sqlite)$)")


def child_setup(death_signal: int = signal.SIGTERM):
    """A ``preexec_fn`` for ``subprocess.Popen``: umask 022, and ``death_signal`` delivered to the
    child when the Python process that started it dies (Linux ``PR_SET_PDEATHSIG``; a no-op
    elsewhere). nsys answers SIGTERM by stopping its program and ending."""
    try:  # resolved here, in the parent: after fork the child only calls it (no dlopen, no lock)
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None

    def setup() -> None:
        os.umask(UMASK)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
    return setup


def exit_reason(status: int) -> str:
    """Words for a process's exit status: ``killed by SIGKILL (out of memory?)`` for a signal
    (a negative status, or 128 + N as a shell or nsys passes it on), else ``exited with status N``."""
    sig = -status if status < 0 else (status - 128 if 128 < status < 160 else 0)
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        hint = " (out of memory? the kernel's OOM killer sends it)" if sig == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with status {status}"


def program_lines(output: str, lines: int = 15) -> str:
    """The last ``lines`` lines the program wrote, with nsys's own lines (its command line,
    progress bars, 'Generated:' and the report path) dropped."""
    kept = [line.rstrip() for line in output.replace("\r", "\n").splitlines()
            if line.strip() and not _NSYS_LINE.match(line)]
    return "\n".join(kept[-lines:])


def last_error_line(text: str) -> str | None:
    """The error a program ended with: the exception line of its last Python traceback
    (``ValueError: ...``, the first line after the frames that is not indented), else the last
    line naming an error; None when there is none."""
    rows = [line.rstrip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    for i in range(len(rows) - 1, -1, -1):
        if rows[i].lstrip().startswith("Traceback (most recent call last)"):
            indent = len(rows[i]) - len(rows[i].lstrip())
            for r in rows[i + 1:]:
                if len(r) - len(r.lstrip()) <= indent and not _NSYS_LINE.match(r):
                    return r.strip()
            return None
    for r in reversed(rows):
        if re.search(r"\berror\b", r, re.I) and not _NSYS_LINE.match(r):
            return r.strip()
    return None


def process_reason(status: int, output: str, who: str = "the application") -> str:
    """``the application was killed by SIGKILL (...)`` / ``... exited with status 2: ValueError: ...``:
    how a process ended and the last error it printed itself (a traceback's last line)."""
    err = last_error_line(output)
    return f"{who} {exit_reason(status)}" + (f": {err}" if err else "")


def remove_stream_files(output: str, outdir: Path) -> None:
    """Delete the temporary ``/tmp/nsys-report-*.qdstrm`` that nsys named in its output and left
    behind (it does when stopped while importing); a .qdstrm beside the report is kept."""
    for name in re.findall(r"Generating '([^']+\.qdstrm)'", output):
        path = Path(name)
        if path.name.startswith("nsys-report-") and path.parent.resolve() != outdir.resolve():
            path.unlink(missing_ok=True)


class Stop:
    """What :func:`signals_as_interrupt` met (``children=True``): ``by`` is the signal's name, or None."""

    def __init__(self):
        self.by: str | None = None


def stop_children(grace_s: float = 10.0) -> None:
    """SIGTERM every process this one started (and theirs), then SIGKILL whatever is left after
    ``grace_s`` (nsys writes its report on SIGTERM; a Jupyter kernel ends)."""
    import psutil

    try:
        procs = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


@contextlib.contextmanager
def signals_as_interrupt(signals=(signal.SIGTERM, signal.SIGHUP), *, children: bool = False, grace_s: float = 10.0):
    """While labkit waits for a child: SIGTERM and SIGHUP (``kill``, a closed terminal or SSH
    session) handled as Ctrl-C is, a ``KeyboardInterrupt`` naming the signal, so the child is
    stopped the same way, what it finished is kept and nothing is left behind (the default
    action killed Python at once: a 0-byte report, a .qdstrm in /tmp). A handler someone else
    installed is left alone; outside the main thread this does nothing.

    ``children=True``, for a script that waits inside a library's event loop (nbclient's kernel,
    a browser driver), where an exception raised in a signal handler ends in that library's
    tracebacks: the first signal stops every child instead (:func:`stop_children`) and is kept in
    the :class:`Stop` this yields (the library then sees its child gone, and the script, seeing
    ``stop.by``, says one line); a second one raises as above.

    Yields: a :class:`Stop`.
    """
    import threading

    old, stop = {}, Stop()
    if threading.current_thread() is threading.main_thread():
        def handler(signum, frame):
            name = signal.Signals(signum).name
            if children and stop.by is None:
                stop.by = name
                stop_children(grace_s)
                return
            raise KeyboardInterrupt(f"stopped by {name}")

        for s in signals:
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(s) in (signal.SIG_DFL, None):
                    old[s] = signal.signal(s, handler)
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def wait_with_progress(proc: subprocess.Popen, label: str, progress: bool, timeout_s: float | None = None) -> int:
    """Wait for nsys; returns how many times it was interrupted (0, 1, 2). Ctrl-C (or a Jupyter
    interrupt) hands nsys one SIGINT, on which it stops the program and writes the report; a
    second Ctrl-C kills nsys, its agent and the program, and deletes the agent's .qdstrm. Every
    process nsys started is ended before this returns.

    ``timeout_s``: past that many seconds the run is stopped as by a first Ctrl-C, and where nsys
    has not finished the report as long again later (at least :data:`REPORT_GRACE_S`), as by a
    second; ``proc.timed_out`` then says so (nsys 2022.4 now and then hangs at its program's
    exit: the program done, nsys waiting on it for ever)."""
    import time

    import psutil

    bar = progress_bar(label, enabled=progress, bar_format="{desc}: {elapsed}")  # disabled: no-ops
    interrupted, doomed, streams = 0, [], []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    proc.timed_out = False

    def stop(reason: str) -> None:
        nonlocal interrupted
        proc.stopped_by = reason
        interrupted += 1
        doomed.extend(_session(proc))
        if interrupted == 1:
            proc.send_signal(signal.SIGINT)
            return
        for p in doomed:  # the second stop: give up the report
            with contextlib.suppress(psutil.Error):
                streams.extend(f.path for f in p.open_files() if f.path.endswith(".qdstrm"))
        proc.kill()

    stack = contextlib.ExitStack()
    stack.enter_context(signals_as_interrupt())  # SIGTERM, SIGHUP: as Ctrl-C
    try:
        while True:
            # every step of the loop inside one try: a Ctrl-C that lands while the bar redraws or the
            # deadline is checked (a wider window on a loaded machine) stops nsys as one in wait() does
            try:
                if proc.poll() is not None:
                    break
                try:
                    proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    bar.refresh()
                    if deadline is not None and time.monotonic() > deadline:
                        proc.timed_out = True
                        deadline = time.monotonic() + max(timeout_s, REPORT_GRACE_S)
                        stop(f"ran past its {timeout_s:g} s limit")
            except KeyboardInterrupt as exc:
                proc.timed_out = False
                stop(exc.args[0] if exc.args else "interrupted")  # Ctrl-C, or the signal's name
    finally:
        bar.close()
        stack.close()
    # the program runs in its own session under nsys: make sure nothing outlives an interrupted run
    if interrupted == 1:
        doomed = [p for p in doomed if "--start-agent" not in _cmdline(p)]  # it ends once the report is written
    alive = [p for p in doomed if p.is_running()]
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(alive, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    for path in streams:
        Path(path).unlink(missing_ok=True)
    return interrupted


def _cmdline(p) -> str:
    import psutil

    with contextlib.suppress(psutil.Error):
        return " ".join(p.cmdline())
    return ""


def _session(proc: subprocess.Popen) -> list:
    """nsys's processes: its children, and the agent it starts apart (named after nsys's pid)."""
    import psutil

    found = []
    with contextlib.suppress(psutil.Error):
        found = psutil.Process(proc.pid).children(recursive=True)
    for p in psutil.process_iter():
        if re.search(rf"--session-name=profile-\S*-{proc.pid}(\s|$)", _cmdline(p)):
            found.append(p)
    return found
