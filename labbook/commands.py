"""What notebook 01's by-hand ``nsys profile`` and ``!nsys stats`` lines need from the nsys installed
here (on PATH, its report names; a profile run as typed, again when nsys lost its start-up race), and
the check that nsys's numbers agree with labkit's.

``nsys stats`` renamed its reports in 2023 (``nvtxsum`` -> ``nvtx_sum``, ``gpukernsum`` ->
``cuda_gpu_kern_sum``, ``gpumemtimesum`` -> ``cuda_gpu_mem_time_sum``) and, from then on, labels
a range ``domain:name`` (``:infer`` in the default domain) where 2022.4 prints ``infer``.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pandas as pd

import labkit
from labkit.record import tool as nsys
from labkit.env import find_nsys, nsys_version, nsys_version_tuple

from labbook.outcome import log_tail, missing_report_note
from labbook.recording import recorded_env
from labbook.settings import REPLAY

REPORT_NAMES = {
    "old": {"nvtx": "nvtxsum", "kernels": "gpukernsum", "memcpy": "gpumemtimesum"},
    "new": {"nvtx": "nvtx_sum", "kernels": "cuda_gpu_kern_sum", "memcpy": "cuda_gpu_mem_time_sum"},
}
"""``nsys stats`` report names before 2023 ("old") and from 2023 on ("new")."""


def naming(version: tuple | None = None) -> str:
    """'old' for nsys before 2023 (2022.4 is Debian's), 'new' otherwise (also when none is found)."""
    v = version if version is not None else nsys_version_tuple()
    return "old" if v and v[0] < 2023 else "new"


def stats_report(what: str = "nvtx", version: tuple | None = None) -> str:
    """The ``nsys stats --report`` name of ``what`` (nvtx, kernels, memcpy) for this nsys."""
    return REPORT_NAMES[naming(version)][what]


def nsys_on_path() -> str:
    """Put the nsys labkit finds first on this process's PATH, so that a notebook's ``!nsys``
    lines run it (GPU machines often keep it in the CUDA toolkit's folder); its version (in a replay,
    the recording's too: the two differ)."""
    found = find_nsys()
    if not found:
        raise nsys.NsysNotFoundError("nsys not found: install it with scripts/install-nsys, or set LABKIT_NSYS to "
                                     "the nsys executable")
    folder = str(Path(found).parent)
    if shutil.which("nsys") != found:
        os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
    here = f"nsys {nsys_version(found)} ({found}): `nsys stats` names its NVTX summary '{stats_report('nvtx')}'"
    if REPLAY is None:
        return here
    theirs = recorded_env(REPLAY).get("nsys")
    made = f"nsys {theirs}" if theirs else "an nsys version it did not record"
    return f"{here}. That is this machine's; the replayed recording `{REPLAY.name}` was profiled with {made}"


def agreement(csv: str | Path, rep, version: tuple | None = None) -> pd.DataFrame:
    """nsys's ``nvtxsum``/``nvtx_sum`` CSV beside ``labkit.nvtx_summary`` of the same report.

    Returns: range, instances (nsys), instances (labkit), total ms (nsys), total ms (labkit),
        agree (same count, totals within 0.01 %), one row per range, nsys's order.
    """
    theirs = pd.read_csv(csv)
    ours = labkit.nvtx_summary(rep)
    new = naming(version) == "new"  # the nsys that wrote the CSV (default: the installed one)
    labels = [f"{d}:{n}" if new or d else n for d, n in zip(ours["domain"].fillna(""), ours["name"])]
    ours = ours.assign(range=labels).set_index("range")
    out = pd.DataFrame({"range": theirs["Range"], "instances (nsys)": theirs["Instances"],
                        "total ms (nsys)": theirs["Total Time (ns)"] / 1e6})
    out["instances (labkit)"] = out["range"].map(ours["instances"]).fillna(0).astype(int)
    out["total ms (labkit)"] = out["range"].map(ours["total_ns"]) / 1e6
    out["agree"] = (out["instances (nsys)"] == out["instances (labkit)"]) & (
        (out["total ms (nsys)"] - out["total ms (labkit)"]).abs() <= 1e-4 * out["total ms (nsys)"] + 1e-6)
    return out[["range", "instances (nsys)", "instances (labkit)", "total ms (nsys)", "total ms (labkit)", "agree"]]


def by_hand(command: str, report, *, lines: int = 2, what: str = "the cells below read it"):
    """Run ``command``, an ``nsys profile ...`` line as you would type it in a terminal (split into
    words as a shell splits them, run without a shell: nothing in it is run as code), its output (nsys's
    progress, the program's own lines) into the log beside ``report`` (``<report>.log``); print the
    log's last ``lines`` lines. nsys 2022.4 sometimes fails to start its program when other nsys
    sessions start beside it (``labkit.record.nsys.start_race``): then it is started again, at most
    ``START_TRIES`` times, and the log and this cell say so. A Ctrl-C (the kernel's interrupt) hands
    nsys one SIGINT: it stops the program and writes what it recorded.

    Returns :func:`labbook.outcome.missing_report_note`: None when nsys wrote ``report``, else the
    one line the cells reading it (``what``) show instead.
    """
    from labkit.record.nsys import START_TRIES, start_again, start_race
    from labkit.record.proc import wait_with_progress

    report = Path(report)
    log = report.with_suffix(".log")
    report.parent.mkdir(parents=True, exist_ok=True)
    argv = shlex.split(command)
    before = _mtime(report)  # a report an earlier run left is not this run's
    with open(log, "w") as logf:
        def say(line):  # in this cell and in the log
            print(line, flush=True)
            logf.write(f"\n{line}\n")
            logf.flush()

        for attempt in range(START_TRIES):
            start = logf.tell()
            try:
                proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            except OSError as exc:  # a command that is not there (a typo): its reason, in the log
                logf.write(f"cannot run {argv[0] if argv else '(nothing)'}: {exc.strerror or exc}\n")
                break
            # labkit's own wait for nsys: a Ctrl-C hands nsys one SIGINT, a second gives up the report
            if wait_with_progress(proc, "nsys profile", progress=False):
                logf.flush()
                raise KeyboardInterrupt(f"interrupted: nsys stopped the program (its output: {log})")
            logf.flush()
            output = log.read_text(errors="replace")[start:]
            if proc.returncode == 0 or _mtime(report) != before or not start_race(output) or not start_again(attempt, say):
                break
    print(log_tail(report, lines))
    return missing_report_note(report, what=what, written=_mtime(report) not in (None, before))


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None
