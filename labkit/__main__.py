"""Command line: ``python -m labkit {doctor,profile,summary,table} ...``.

Each subcommand lives with the module that does the work; this file only dispatches,
so ``python -m labkit doctor`` does not import pandas or matplotlib.
"""
from __future__ import annotations

import importlib
import sys

_COMMANDS = {
    "doctor": ("labkit.doctor", "cli", "check this machine: Python, torch, GPU, nsys, nvtx, TensorRT, OpenCV, disk"),
    "profile": ("labkit.nsys", "cli_profile", "run a command under nsys: python -m labkit profile [--name N] -- CMD ..."),
    "summary": ("labkit.report", "cli_summary", "summarize a report: python -m labkit summary REPORT [--what ...] [--csv]"),
    "table": ("labkit.tables", "cli_table", "print the relative-speedup table of a ledger: python -m labkit table [PATH]"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"} or argv[0] not in _COMMANDS:
        unknown = argv and argv[0] not in {"-h", "--help"}
        out = sys.stderr if unknown else sys.stdout
        if unknown:
            print(f"labkit: unknown command {argv[0]!r}", file=out)
        print("usage: python -m labkit COMMAND [ARGS]\n\ncommands:", file=out)
        for name, (_, _, help_) in _COMMANDS.items():
            print(f"  {name:<8} {help_}", file=out)
        return 2 if unknown else 0
    module, func, _ = _COMMANDS[argv[0]]
    return int(getattr(importlib.import_module(module), func)(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
