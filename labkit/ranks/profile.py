"""Profile a distributed run: torchrun starts the ranks, each under its own nsys.

``profile_ranks`` runs ``torchrun ... --no-python nsys profile -o NAME_%q{RANK} COMMAND`` (nsys
expands ``%q{RANK}`` from the environment torchrun gives each rank; 2022.4 does), exports each
report and returns :func:`labkit.ranks.load_reports` of them. A failed rank is named with its own
error line (torchrun's per-rank logs); a run past its timeout is stopped whole.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from labkit.record.nsys import START_TRIES, TRACE, claim_log, start_again, start_race
from labkit.record.proc import profiled_env
from labkit.env import find_nsys, reports_dir, usable_cpus
from labkit.errors import LabkitError, check_writable, output_tail
from labkit.paths import check_name, nsys_output
from labkit.ranks.reports import Reports, RanksError, load_reports, rank_from_name

__all__ = ["profile_ranks", "RankFailedError"]

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b.*")
# Errors a rank meets because a peer failed first: its collective's connection closed or timed out,
# or torchrun stopped it. Never the root cause while a rank with an error of its own exists.
_CONSEQUENCE = re.compile(
    r"closed by peer|reset by peer|broken pipe|connection refused|socket closed|pair closure|remote process exited|"
    r"network error|timed out|timeout|watchdog|DistBackendError|DistNetworkError|ProcessGroup\w* .*abort|"
    r"SIGTERM|SIGKILL|Signals\.|\(no log of this rank\)|\(empty stderr\)", re.IGNORECASE)


def _all_logs(log: Path, log_dir: Path) -> str:
    """torchrun's log and every rank's, as one text (for what nsys said when it failed)."""
    parts = [log.read_text(errors="replace")] if log.exists() else []
    if log_dir.is_dir():
        parts += [f.read_text(errors="replace") for f in sorted(log_dir.rglob("*.log")) if f.is_file()]
    return "\n".join(parts)


class RankFailedError(LabkitError):
    """A rank of a profiled distributed run failed; the message names the rank and its error line."""


def _failed_ranks(output: str) -> list[int]:
    """Ranks that torchrun reports as failed, root cause first."""
    root = output.split("Root Cause", 1)
    found = [int(m) for part in root[::-1] for m in re.findall(r"^\s*rank\s*:\s*(\d+)", part, re.MULTILINE)]
    return list(dict.fromkeys(found))


def is_consequence(error_line: str) -> bool:
    """Whether a rank's error line is a consequence of another rank's failure (a peer's closed
    connection, a collective's timeout, a stop signal) rather than an error of its own."""
    return bool(_CONSEQUENCE.search(error_line))


def root_cause_first(failed: Sequence[int], errors: dict[int, str]) -> list[int]:
    """``failed`` (torchrun's order) with the ranks whose error is their own first: torchrun's
    "Root Cause" is the first failure it noticed, and under nsys (no error file, exit codes
    only) a peer's "Connection closed by peer" can be noticed in the same poll as the error
    that caused it. Deterministic: the same errors give the same order."""
    return sorted(failed, key=lambda r: is_consequence(errors.get(r, "")))


def _error_line(log_dir: Path, rank: int) -> str:
    """The last exception line of a rank's stderr (torchrun's per-rank log), else its last line."""
    logs = sorted(log_dir.glob(f"*/attempt_*/{rank}/stderr.log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return "(no log of this rank)"
    lines = [re.sub(r"^\[rank\d+\]:\s?", "", ln).strip() for ln in logs[-1].read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln]
    errors = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
    return (errors or lines or ["(empty stderr)"])[-1]


def _stop_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the process group of ``proc`` (nsys then writes what it has), SIGKILL it after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def profile_ranks(command, *, nproc: int, name: str, outdir=None, trace=TRACE,
                  nsys_args: Sequence[str] = (), env: dict | None = None, overwrite: bool = False,
                  torchrun_args: Sequence[str] = (), timeout_s: float | None = None, scheduler=None,
                  frames: Sequence[str] = ("nvtx", "kernels", "memcpy", "memset"), nsys: str | None = None) -> Reports:
    """Run ``command`` under torchrun with one nsys per rank, export each report and load them all.

    Runs ``python -m torch.distributed.run --standalone --nproc-per-node N --no-python nsys profile ...
    -o OUTDIR/NAME_%q{RANK} COMMAND``, so each rank writes ``NAME_<rank>.nsys-rep`` (and ``.sqlite``);
    torchrun's own output goes to ``NAME.log`` and each rank's to ``NAME_logs/`` (torchrun ``--tee``).

    Args:
        command: the program (argv list or a shell-like string), e.g. ``["python", "train.py"]``.
        nproc: processes (ranks) on this machine.
        name: report name prefix; outdir: folder (default ``$LABKIT_REPORTS/profiles``).
        trace, nsys_args: as :func:`labkit.record.nsys.profile`; env: extra environment variables.
        torchrun_args: more torchrun options, e.g. ``["--master-port", "29600"]``.
        overwrite: replace this name's earlier reports.
        timeout_s: stop every rank (and nsys) after this long, e.g. when one rank hangs in a collective.
        scheduler, frames: as :func:`labkit.ranks.reports.load_reports` (the frames a timeline of
            the ranks draws, by default: a few ranks on this machine).
    Returns: :class:`Reports` of the ``nproc`` ranks.
    Raises: NsysNotFoundError, ReportExistsError, RankFailedError (naming the failed rank and its
        error line), NsysError.
    """
    from labkit.record.nsys import PROFILE_SPACE, ReportExistsError, note_ranks_report, profile_command
    from labkit.record.tool import NsysError, NsysNotFoundError
    from labkit.record.export import export_sqlite

    argv_cmd = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    if not argv_cmd:
        raise RanksError("empty command: pass the program to run on every rank, e.g. ['python', 'train.py']")
    if nproc < 1:
        raise RanksError(f"nproc={nproc}: give the number of ranks to start on this machine (1 or more)")
    outdir = Path(outdir) if outdir is not None else reports_dir() / "profiles"
    check_name(f"{name}_{nproc - 1}", what="report name")
    exe = nsys or find_nsys()
    if not exe or not os.path.isfile(exe):
        raise NsysNotFoundError("nsys not found: install it with scripts/install-nsys, or set LABKIT_NSYS to "
                                "the nsys executable")
    # pre-flight before anything is touched: the folder writable, room for every rank's report
    check_writable(outdir, need_bytes=PROFILE_SPACE * nproc, what="write the rank reports into")
    old = sorted(outdir.glob(f"{glob.escape(name)}_*.nsys-rep")) + sorted(outdir.glob(f"{glob.escape(name)}_*.sqlite"))
    old = [p for p in old if rank_from_name(p) is not None]
    if old and not overwrite:
        raise ReportExistsError(f"{old[0]} already exists: pass overwrite=True or choose another name")
    for p in old:
        p.unlink()
    log, log_dir = outdir / f"{name}.log", outdir / f"{name}_logs"
    output = f"{nsys_output(outdir / name)}_%q{{RANK}}"
    os.close(claim_log(log, shlex.quote(f"--output={output}"))[0])  # a log labkit did not write is refused
    nsys_argv = profile_command(argv_cmd, output=output, trace=trace, nsys_args=nsys_args,
                                overwrite=overwrite, nsys=exe)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--log-dir={log_dir}", "--tee=3", *torchrun_args, "--no-python", *nsys_argv]
    run_env = profiled_env(env)  # no secrets: nsys 2025.x stores the environment in each report
    cpus = usable_cpus()  # what the ranks can use (they inherit this process's affinity and cgroup)
    t0 = time.monotonic()
    for attempt in range(START_TRIES):  # nsys's start-up race under load (start_race): start again
        with open(log, "w" if attempt == 0 else "a", encoding="utf-8", errors="backslashreplace") as logf:
            logf.write(f"# {shlex.join(argv)}\n")
            logf.flush()
            # its own process group, so that a timeout or an interrupt stops torchrun, nsys and every rank
            proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=run_env, start_new_session=True)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _stop_group(proc)
                raise RankFailedError(f"the {nproc} ranks did not finish in {timeout_s:g} s and were stopped (a rank "
                                      f"hung, e.g. waiting in a collective?): see the ranks' logs in {log_dir} and "
                                      f"{log}, or raise timeout_s") from None
            except BaseException:  # KeyboardInterrupt in a notebook: leave no rank running
                _stop_group(proc)
                raise
        if (proc.returncode == 0 or not start_race(_all_logs(log, log_dir))
                or not start_again(attempt, lambda line: _append(log, f"# labkit: {line}\n"), what="a rank")):
            break
        for p in outdir.glob(f"{glob.escape(name)}_*.nsys-rep"):
            if rank_from_name(p) is not None:
                p.unlink()
    output = log.read_text(errors="replace")
    if proc.returncode != 0:
        listed = _failed_ranks(output)
        errors = {r: _error_line(log_dir, r) for r in range(nproc)} if listed else {}
        # a rank torchrun did not list (stopped in the same poll) may hold the error of its own
        own = [r for r in range(nproc) if r not in listed and _EXCEPTION_LINE.match(errors[r])
               and not is_consequence(errors[r])]
        failed = root_cause_first(listed + own, errors)
        if failed:
            others = f"; also failed: ranks {', '.join(map(str, failed[1:]))}" if len(failed) > 1 else ""
            raise RankFailedError(f"rank {failed[0]} failed: {errors[failed[0]]}{others} "
                                  f"(torchrun exit {proc.returncode}; fix that rank's error; logs: {log_dir}, {log})")
        raise NsysError(f"torchrun under nsys exited with status {proc.returncode} after "
                        f"{time.monotonic() - t0:.1f} s; its output (full log: {log}):\n{output_tail(output)}")
    reps = [outdir / f"{name}_{r}.nsys-rep" for r in range(nproc)]
    missing = [p for p in reps if not p.exists()]
    if missing:
        raise NsysError(f"nsys wrote no {missing[0].name} (does this nsys expand %q{{RANK}}? 2022.4 and newer do); "
                        f"its output (full log: {log}):\n{output_tail(output)}")
    for p in reps:
        note_ranks_report(p, cpus)  # the CPUs the ranks could use, tied to each report as record ties its own
    dbs = [export_sqlite(p, nsys=exe) for p in reps]
    return load_reports(dbs, scheduler=scheduler, frames=frames)


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
