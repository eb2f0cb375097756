"""The Jupyter kernel that runs under ``nsys launch``, so that ``%%nsys`` can record one cell of it.

``python -m labkit kernel install`` writes the kernelspec "Python (labkit nsys)"; Jupyter starts it
as ``python -m labkit kernel launch -f CONNECTION_FILE``, which runs
``nsys launch --session-new=labkit-... python -m ipykernel_launcher -f CONNECTION_FILE``: the kernel
is traced but unrecorded until :func:`labkit.record.session.recording` starts its session. nsys
2022.4 fixes the traced APIs when it launches (``--trace`` is "application scope"), so they are the
kernelspec's, not a cell's. The kernel is interrupted by a message (``interrupt_mode``): a signal to
the kernel's process group reaches nsys, which then ends its session and leaves the kernel
unrecordable (seen with 2022.4), while ipykernel's own interrupt signals only the kernel, which
nsys starts in a session of its own. The launcher stays nsys's parent so that it can start nsys
again where nsys ended before it started the kernel (2022.4's start-up race under load, as
:func:`labkit.record.nsys.record` retries it). Without a working nsys the launcher starts the plain
kernel and leaves the reason for ``%%nsys`` to say.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labkit.errors import LabkitError
from labkit.record.nsys import NO_STACKS_NS, START_TRIES, TRACE
from labkit.record.proc import child_setup
from labkit.record.session import SESSION_VAR
from labkit.record.tool import NsysNotFoundError, _nsys_or_raise, supports_option

__all__ = ["KERNEL_NAME", "DISPLAY_NAME", "KernelSpecError", "kernel_dict", "install", "launch_argv", "run_kernel",
           "cli"]

KERNEL_NAME = "labkit-nsys"
DISPLAY_NAME = "Python (labkit nsys)"
_LAUNCH = ["-m", "labkit", "kernel", "launch"]


class KernelSpecError(LabkitError):
    """The kernelspec cannot be installed there (a kernel of that name that labkit did not write, bad options)."""


def _trace(trace) -> str:
    text = trace if isinstance(trace, str) else ",".join(trace)
    if not re.fullmatch(r"[a-z][a-z0-9-]*(,[a-z][a-z0-9-]*)*", text):
        raise KernelSpecError(f"--trace {text!r}: give nsys's API names joined by commas, no spaces "
                              f"(e.g. {','.join(TRACE)})")
    return text


def kernel_dict(trace=TRACE, display_name: str = DISPLAY_NAME) -> dict:
    """kernel.json of the kernel: ipykernel's own, started through labkit's launcher, interrupted by message."""
    from ipykernel.kernelspec import get_kernel_dict

    spec = get_kernel_dict()
    spec.update(argv=[sys.executable, *_LAUNCH, "--trace", _trace(trace), "-f", "{connection_file}"],
                display_name=display_name, interrupt_mode="message")
    return spec


def _ours(folder: Path) -> bool:
    try:
        argv = json.loads((folder / "kernel.json").read_text()).get("argv", [])
    except (OSError, ValueError, AttributeError):
        return False
    return argv[1:1 + len(_LAUNCH)] == _LAUNCH


def install(*, user: bool = False, sys_prefix: bool = False, prefix: str | None = None, trace=TRACE,
            name: str = KERNEL_NAME) -> Path:
    """Install the kernelspec (default: the user's Jupyter data folder, ``$JUPYTER_DATA_DIR`` if set;
    ``sys_prefix``: this environment's; ``prefix``: PREFIX/share/jupyter); returns its folder. A
    kernelspec of that name that labkit did not write is kept: KernelSpecError names it."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    if sum((user, sys_prefix, prefix is not None)) > 1:
        raise KernelSpecError("give one of --user, --sys-prefix and --prefix")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name) or name in (".", ".."):  # Jupyter's rule for kernel names
        raise KernelSpecError(f"kernel name {name!r}: use letters, digits, '.', '_' and '-' (e.g. {KERNEL_NAME})")
    from jupyter_core.paths import jupyter_data_dir

    where = sys.prefix if sys_prefix else prefix
    dest = (Path(where) / "share" / "jupyter" if where else Path(jupyter_data_dir())) / "kernels" / name
    if dest.exists() and not _ours(dest):
        raise KernelSpecError(f"{dest} holds a kernel {name!r} that labkit did not write: remove it with "
                              f"`jupyter kernelspec remove {name}`, or pass --name with another name")
    with tempfile.TemporaryDirectory() as tmp:
        src = write_kernel_spec(Path(tmp) / name, overrides=kernel_dict(trace))
        return Path(KernelSpecManager().install_kernel_spec(src, name, user=where is None, prefix=where))


def launch_argv(connection_file: str, trace=TRACE, *, nsys: str | None = None) -> tuple[list[str], dict]:
    """``(argv, environment)`` that run ipykernel on ``connection_file`` under ``nsys launch`` in a new
    session named after the connection file; plain ipykernel, with the reason in
    ``LABKIT_NSYS_KERNEL_NOTE``, where no working nsys is found."""
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file]
    env = dict(os.environ)
    try:
        exe = _nsys_or_raise(nsys)
    except NsysNotFoundError as exc:
        env["LABKIT_NSYS_KERNEL_NOTE"] = str(exc)
        return kernel, env
    session = "labkit-" + re.sub(r"[^A-Za-z0-9_.-]", "_", Path(connection_file).stem)[:96] + f"-{os.getpid()}"
    env.update({SESSION_VAR: session, "LABKIT_NSYS": exe})
    options = [f"--trace={_trace(trace)}", "--wait=primary"]  # nsys ends with the kernel, not its last child
    if supports_option(exe, "--cuda-graph-trace"):
        options.append("--cuda-graph-trace=node")
    if supports_option(exe, "--osrt-backtrace-threshold"):
        options.append(f"--osrt-backtrace-threshold={NO_STACKS_NS}")
    mask = os.umask(0)
    os.umask(mask)
    # nsys 2022.4 starts its program with umask 0000 (every file it writes world-writable): the user's again;
    # the file named by LABKIT_KERNEL_STARTED, once written, says nsys started the kernel
    shell = ["/bin/sh", "-c", f'umask {mask:04o} && : > "$LABKIT_KERNEL_STARTED" && exec "$@"', "sh"]
    return [exe, "launch", f"--session-new={session}", *options, *shell, *kernel], env


def run_kernel(argv: list[str], env: dict) -> int:
    """Run the launch command of :func:`launch_argv` to its end; where nsys ends with an error before
    it started the kernel, start it again (up to START_TRIES). Returns its exit status."""
    fd, started = tempfile.mkstemp(prefix="labkit-kernel-started-")
    os.close(fd)
    os.unlink(started)
    env = {**env, "LABKIT_KERNEL_STARTED": started}
    try:
        for attempt in range(START_TRIES):
            # SIGTERM to nsys (it stops the kernel) if the launcher is killed: no kernel outlives it
            rc = subprocess.Popen(argv, env=env, preexec_fn=child_setup(signal.SIGTERM)).wait()
            if rc == 0 or os.path.exists(started) or attempt == START_TRIES - 1:
                return rc
            print(f"labkit: nsys ended before it started the kernel (status {rc}; its start-up race under load): "
                  f"starting it again ({attempt + 2} of {START_TRIES})", file=sys.stderr, flush=True)
            time.sleep(0.5 * (attempt + 1))
    finally:
        if os.path.exists(started):
            os.unlink(started)
    return rc


def cli(argv: list[str] | None = None) -> int:
    """``python -m labkit kernel install [--user|--sys-prefix|--prefix P] [--trace T] [--name N]``; ``launch``
    is what the kernelspec runs."""
    p = argparse.ArgumentParser(prog="python -m labkit kernel",
                                description=f'the Jupyter kernel "{DISPLAY_NAME}", for %%nsys (%load_ext labkit)')
    sub = p.add_subparsers(dest="what", required=True)
    ins = sub.add_parser("install", help="install the kernelspec (default: for this user)")
    where = ins.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="the user's Jupyter data folder (the default)")
    where.add_argument("--sys-prefix", action="store_true", help="this Python environment's share/jupyter")
    where.add_argument("--prefix", default=None, help="PREFIX/share/jupyter")
    for q in (ins, sub.add_parser("launch", help="(run by Jupyter) start the kernel under nsys launch")):
        q.add_argument("--trace", default=",".join(TRACE), help="nsys --trace APIs, fixed for the kernel's life")
    ins.add_argument("--name", default=KERNEL_NAME, help=f"kernelspec name (default {KERNEL_NAME})")
    sub.choices["launch"].add_argument("-f", dest="connection_file", required=True)
    args = p.parse_args(argv)
    if args.what == "launch":
        exe_argv, env = launch_argv(args.connection_file, args.trace)
        if SESSION_VAR not in env:  # no nsys: the plain kernel, in this process
            sys.stdout.flush()
            os.execve(exe_argv[0], exe_argv, env)
        return run_kernel(exe_argv, env)
    try:
        dest = install(user=args.user, sys_prefix=args.sys_prefix, prefix=args.prefix, trace=args.trace,
                       name=args.name)
    except (KernelSpecError, OSError) as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    print(f'installed the kernel "{DISPLAY_NAME}" ({args.name}) in {dest}: it runs under nsys launch '
          f"(--trace {args.trace}), so %%nsys records one cell of it (%load_ext labkit)")
    return 0
