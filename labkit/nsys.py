"""Run a command under Nsight Systems and export the report to SQLite.

``profile`` builds a safe ``nsys profile`` command line (no CPU sampling, no context-switch
trace: sampling hangs Debian's nsys 2022.4 here, and both bloat the report), streams the
program's output to a log beside the report while showing elapsed time, keeps the
``.nsys-rep`` and its ``.sqlite`` export, and returns the loaded :class:`labkit.report.Report`.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

from labkit.env import reports_dir
from labkit.errors import LabkitError
from labkit.errors import output_tail as _tail

__all__ = [
    "profile",
    "profile_command",
    "export_sqlite",
    "cli_profile",
    "NsysError",
    "NsysNotFoundError",
    "CaptureRangeError",
    "ProgramFailedError",
    "ReportExistsError",
]


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
    if not path or not os.path.isfile(path):
        where = os.environ.get("LABKIT_NSYS") or os.environ.get("NSYS")
        hint = f" (LABKIT_NSYS/NSYS is set to {where!r}, which is not an executable)" if where else ""
        raise NsysNotFoundError(f"nsys not found{hint}: install it with scripts/install-nsys, or set LABKIT_NSYS "
                                f"to the nsys executable")
    return path


def profile_command(command: Sequence[str], *, output: Path, trace=("cuda", "nvtx"), capture_range=None,
                    nsys_args: Sequence[str] = (), overwrite: bool = False, nsys: str = "nsys") -> list[str]:
    """The ``nsys profile`` argv that :func:`profile` runs (exposed for tests and notebooks)."""
    trace = ",".join(trace) if not isinstance(trace, str) else trace
    argv = [nsys, "profile", f"--trace={trace}", "--sample=none", "--cpuctxsw=none",
            f"--output={output}", f"--force-overwrite={'true' if overwrite else 'false'}"]
    extra = list(nsys_args)
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


def profile(command, *, name: str, trace=("cuda", "nvtx"), outdir="reports/profiles", capture_range=None,
            nsys_args: Sequence[str] = (), env: dict | None = None, overwrite: bool = False,
            progress: bool = True, nsys: str | None = None):
    """Run ``command`` under ``nsys profile`` and load the result.

    Args:
        command: argv list, or a string split like a shell would.
        name: report name: writes ``outdir/name.nsys-rep``, ``.sqlite`` and ``.log``.
        trace: nsys ``--trace`` APIs (keep it small: osrt/cudnn/cublas make reports huge).
        capture_range: None (whole run), "cudaProfilerApi", or an NVTX range name
            (``"measure"`` or ``"measure@domain"``): only that range is recorded, so warm-up
            stays out. Unregistered NVTX strings are matched (NSYS_NVTX_PROFILER_REGISTER_ONLY=0).
        nsys_args: extra nsys options, added before the command.
        env: extra environment variables for the program.
        overwrite: replace an existing report of the same name.
        progress: show a spinner with elapsed time on stderr.
    Returns: :class:`labkit.report.Report` with ``log_path`` pointing at the program's output.
    Raises: NsysNotFoundError, ReportExistsError, CaptureRangeError, NsysError.
    """
    from labkit.report import load_report

    argv_cmd = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    if not argv_cmd:
        raise NsysError("empty command: pass the program to profile, e.g. ['python', 'app.py']")
    outdir = Path(outdir)
    base = outdir / name
    rep, db, log = base.with_suffix(".nsys-rep"), base.with_suffix(".sqlite"), base.with_suffix(".log")
    if not overwrite:
        existing = [p for p in (rep, db) if p.exists()]
        if existing:
            raise ReportExistsError(f"{existing[0]} already exists: pass overwrite=True (CLI: --overwrite) "
                                    f"or choose another name")
    exe = _nsys_or_raise(nsys)
    outdir.mkdir(parents=True, exist_ok=True)
    for p in (rep, db, log):
        if p.exists():
            p.unlink()
    argv = profile_command(argv_cmd, output=base, trace=trace, capture_range=capture_range,
                           nsys_args=nsys_args, overwrite=overwrite, nsys=exe)
    run_env = dict(os.environ)
    run_env.update(env or {})
    if capture_range and capture_range != "cudaProfilerApi":
        run_env.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")
    t0 = time.monotonic()
    with open(log, "w") as logf:
        logf.write(f"# {shlex.join(argv)}\n")
        logf.flush()
        try:
            proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, env=run_env,
                                    stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise NsysNotFoundError(f"cannot run {exe} ({exc}): install nsys with scripts/install-nsys "
                                    f"or set LABKIT_NSYS") from None
        _wait_with_progress(proc, f"nsys profile {name}", t0, progress)
    output = log.read_text(errors="replace")
    if proc.returncode != 0:
        if rep.exists():  # nsys passes the program's exit status through and still writes the report
            raise ProgramFailedError(f"the profiled program exited with status {proc.returncode} (report kept: "
                                     f"{rep}); its output (full log: {log}):\n{_tail(output)}")
        raise NsysError(f"nsys profile exited with status {proc.returncode} after "
                        f"{time.monotonic() - t0:.1f} s; its output (full log: {log}):\n{_tail(output)}")
    if not rep.exists():
        if capture_range:
            raise CaptureRangeError(
                f"capture range {capture_range!r} never started, so nsys wrote no report: check that the "
                f"program opens that NVTX range (or calls cudaProfilerStart) and that -t includes nvtx/cuda; "
                f"program output: {log}")
        qd = base.with_suffix(".qdstrm")
        hint = (" (only a .qdstrm was left: nsys's importer is missing; run scripts/install-nsys to fix it)"
                if qd.exists() else "")
        raise NsysError(f"nsys finished but wrote no {rep.name}{hint}; its output:\n{_tail(output)}")
    export_sqlite(rep, nsys=exe, progress=progress)
    report = load_report(rep, nsys=exe)
    report.log_path = log
    report.meta["profile_command"] = shlex.join(argv)
    report.meta["profile_wall_s"] = round(time.monotonic() - t0, 3)
    return report


def _wait_with_progress(proc: subprocess.Popen, label: str, t0: float, progress: bool) -> None:
    interactive = sys.stderr.isatty() or "ipykernel" in sys.modules
    if not progress or not interactive:  # a log file or CI: one line at the end is enough
        proc.wait()
        if progress:
            print(f"{label}: done in {time.monotonic() - t0:.1f} s (exit {proc.returncode})", file=sys.stderr)
        return
    stop = threading.Event()

    def spin():
        try:
            from tqdm.auto import tqdm

            bar = tqdm(desc=label, bar_format="{desc}: {elapsed}", file=sys.stderr, leave=False)
            while not stop.wait(0.5):
                bar.refresh()
            bar.close()
        except Exception:  # progress display must never break profiling
            pass

    th = threading.Thread(target=spin, daemon=True)
    th.start()
    try:
        proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    finally:
        stop.set()
        th.join(timeout=2)
    print(f"{label}: done in {time.monotonic() - t0:.1f} s (exit {proc.returncode})", file=sys.stderr)


def export_sqlite(rep_path, *, nsys: str | None = None, progress: bool = False, force: bool = False) -> Path:
    """Export a ``.nsys-rep`` to ``.sqlite`` beside it, or under the temp folder when its folder is
    read-only; an export newer than the report is reused."""
    rep_path = Path(rep_path)
    db = rep_path.with_suffix(".sqlite")
    if not os.access(rep_path.parent, os.W_OK) and not db.exists():
        # a read-only folder (a shared or committed report): cache the export in the temp folder
        import hashlib
        import tempfile

        key = hashlib.sha1(str(rep_path.resolve()).encode()).hexdigest()[:12]
        cache = Path(tempfile.gettempdir()) / "labkit-exports"
        cache.mkdir(parents=True, exist_ok=True)
        db = cache / f"{rep_path.stem}-{key}.sqlite"
    if db.exists() and not force and db.stat().st_mtime >= rep_path.stat().st_mtime:
        return db
    exe = _nsys_or_raise(nsys)
    argv = [exe, "export", "--type=sqlite", f"--output={db}", "--force-overwrite=true", str(rep_path)]
    t0 = time.monotonic()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    except OSError as exc:
        raise NsysNotFoundError(f"cannot run {exe} ({exc}): install nsys with scripts/install-nsys "
                                f"or set LABKIT_NSYS") from None
    if out.returncode != 0 or not db.exists():
        raise NsysError(f"nsys export of {rep_path} failed (status {out.returncode}); its output:\n"
                        f"{_tail(out.stdout + out.stderr)}")
    if progress:
        print(f"nsys export {rep_path.name}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return db


def cli_profile(argv: list[str]) -> int:
    """``python -m labkit profile [--name N] [--outdir D] [--trace T] [--capture-range R] [--overwrite] -- CMD``."""
    p = argparse.ArgumentParser(prog="python -m labkit profile",
                                description="Run a command under nsys; keep .nsys-rep, .sqlite and the program log.")
    p.add_argument("--name", help="report name (default: the program's file name)")
    p.add_argument("--outdir", default=str(reports_dir() / "profiles"))
    p.add_argument("--trace", default="cuda,nvtx")
    p.add_argument("--capture-range", default=None,
                   help="cudaProfilerApi, or an NVTX range name that starts the capture")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--summary", choices=("nvtx", "kernels", "none"), default="nvtx",
                   help="summary printed afterwards")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        p.print_usage(sys.stderr)
        print("labkit: no command given: put it after --, e.g. python -m labkit profile -- python app.py",
              file=sys.stderr)
        return 2
    # default name: the script of "python script.py ...", else the program itself
    is_python = Path(cmd[0]).name.startswith("python") and len(cmd) > 1 and not cmd[1].startswith("-")
    name = args.name or Path(cmd[1] if is_python else cmd[0]).stem
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = profile(cmd, name=name, trace=args.trace.split(","), outdir=args.outdir,
                          capture_range=args.capture_range, overwrite=args.overwrite)
    except LabkitError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    print(f"report: {rep.path} (sqlite: {Path(rep.path).with_suffix('.sqlite')}, log: {rep.log_path})")
    if args.summary != "none":
        df = rep.nvtx_summary() if args.summary == "nvtx" else rep.kernel_summary()
        print(df.to_string(index=False) if len(df) else f"(no {args.summary} data)")
    return 0
