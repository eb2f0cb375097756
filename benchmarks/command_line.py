"""Benchmark: each ``python -m labkit`` command as a terminal user runs it, on the committed fixtures
and real reports: its longest printed line (the goal: at most 100 characters for ``advise`` and
``bottleneck``) and its whole-process wall time (best of ``--repeats``), beside ``nsys stats`` on the
same file (``-r nvtxsum,gpukernsum``, 2022.4's names; newer nsys maps them). One line per command and
report, then the worst per command. The commands run with ``COLUMNS`` set (``--columns``, default 100),
as in a terminal of that width: in a pipe without ``COLUMNS`` the tables print names in full, as
``nsys stats`` does, for grep and scripts (``--columns 0`` measures that).

    python benchmarks/command_line.py [--repeats 3] [--commands summary,advise,bottleneck,kernels]
        [--columns 100] [REPORT ...]   # default: tests/fixtures/*.sqlite and tests/fixtures/real/*.sqlite

Run it on a quiet machine: the ratios of whole processes move with the load.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
COMMANDS = {
    "summary": ["summary"],
    "advise": ["advise"],
    "bottleneck": ["bottleneck"],
    "kernels": ["kernels"],
}


def timed(argv: list[str], repeats: int, env: dict | None = None) -> tuple[float, str, int]:
    """(best wall seconds, the last run's stdout, its exit status) of ``argv``."""
    best, out, rc = float("inf"), "", 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
        best = min(best, time.perf_counter() - t0)
        out, rc = p.stdout, p.returncode
    return best, out, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="*", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--columns", type=int, default=100, help="the terminal's width (0: a pipe, names in full)")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if args.columns:
        env["COLUMNS"] = str(args.columns)
    reports = args.reports or sorted(FIX.glob("*.sqlite")) + sorted((FIX / "real").glob("*.sqlite"))
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):  # as on the VM: each start compiles labkit's modules again
        print("# PYTHONDONTWRITEBYTECODE is set: every labkit process compiles its modules from source (about "
              "30 ms more a start than where Python caches them); unset it for a user's machine's figures")
    nsys = shutil.which("nsys")
    worst: dict[str, tuple[int, float]] = {}
    for rep in reports:
        theirs = None
        if nsys:
            theirs, _, rc = timed([nsys, "stats", "-q", "-r", "nvtxsum,gpukernsum", str(rep)], args.repeats)
            theirs = theirs if rc == 0 else None
        for name in args.commands.split(","):
            wall, out, rc = timed([sys.executable, "-m", "labkit", *COMMANDS[name], str(rep)], args.repeats, env)
            longest = max((len(line) for line in out.splitlines()), default=0)
            ratio = f", {wall / theirs:.1f}x nsys stats ({theirs:.2f} s)" if theirs else ""
            print(f"{rep.name[:48]:48s} {name:10s} exit {rc}  longest line {longest:4d}  {wall:.2f} s{ratio}")
            w = worst.get(name, (0, 0.0))
            worst[name] = (max(w[0], longest), max(w[1], wall / theirs if theirs else 0.0))
    for name, (longest, ratio) in worst.items():
        print(f"worst {name}: longest line {longest}, whole process {ratio:.1f}x nsys stats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
