"""``python -m labkit table``: the relative speed-up table of a ledger, on the terminal (markdown).

Its own module so that ``python -m labkit table --help`` (and a wrong argument) answers without
importing pandas; the table itself is :func:`labkit.bench.tables.speedup_table`.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

__all__ = ["cli_table"]


def cli_table(argv: list[str]) -> int:
    """``python -m labkit table [PATH] [--metric fps] [--baseline baseline] [--machine M] [--output FILE]
    [--exercises]``."""
    from labkit.env import LEDGER_NAME, reports_dir

    default = str(reports_dir())
    p = argparse.ArgumentParser(prog="python -m labkit table",
                                description="Print the relative speed-up table (markdown) of a results ledger.")
    p.add_argument("path", nargs="?", default=default,
                   help=f"ledger file or folder searched for {LEDGER_NAME} (default: {default}/)")
    p.add_argument("--metric", default="fps", help="ledger metric to compare (default: fps)")
    p.add_argument("--baseline", default="baseline", help="step to compare with (default: baseline)")
    p.add_argument("--machine", action="append", dest="machines", metavar="LABEL",
                   help="show only this machine (repeatable; order kept)")
    p.add_argument("--output", type=Path, help="also write the markdown to this file")
    p.add_argument("--overwrite", action="store_true", help="replace an --output file labkit did not write")
    p.add_argument("--exercises", action="store_true", help="keep rows of kind 'exercise' (left out by default)")
    p.add_argument("--class", dest="class_dir", metavar="DIR", type=Path,
                   help="class view: every participant's *.jsonl ledger under DIR, one column per host")
    p.add_argument("--provenance", action="store_true", help="add the commit each figure ran on")
    args = p.parse_args(argv)
    from labkit.bench.tables import SpeedupTableError, class_view, load_ledgers, speedup_table  # pandas: past --help
    from labkit.errors import OutputError, check_writable, written_by_labkit
    from labkit.paths import OutputExistsError, atomic_write
    from labkit.safe_text import terminal

    try:
        if args.output:  # before anything is printed: a folder that cannot take the file is one line
            check_writable(args.output.parent, what="write the table into")
            if args.output.exists() and not args.overwrite and not written_by_labkit(args.output):
                raise OutputExistsError(f"{args.output} already exists and labkit did not write it: pass --overwrite "
                                        "to replace it, or choose another --output")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if args.class_dir is not None:
                table = class_view(args.class_dir, metric=args.metric, baseline=args.baseline, exercises=args.exercises)
            else:
                rows = load_ledgers(args.path)  # read once: the per-machine tables below take the same rows
                table = speedup_table(rows, baseline=args.baseline, metric=args.metric, machines=args.machines,
                                      exercises=args.exercises)
    except (SpeedupTableError, OutputError) as exc:
        print(f"labkit table: {exc}", file=sys.stderr)
        return 1
    tables = [table]
    if len(table.machines) > 1 and args.class_dir is None:
        # rows of different machines kept apart: each machine its own table, its steps' builds_on
        # resolved among its own rows (one machine's step never "builds on" another machine's)
        with warnings.catch_warnings(record=True) as more:
            warnings.simplefilter("always")
            tables = []
            for m in table.machines:
                try:
                    tables.append(speedup_table(rows, baseline=args.baseline, metric=args.metric, machines=[m],
                                                exercises=args.exercises))
                except SpeedupTableError as exc:
                    print(f"labkit table: {terminal(m)}: {exc}", file=sys.stderr)
        caught += [w for w in more if str(w.message) not in {str(c.message) for c in caught}]
    for w in caught:
        print(f"labkit table: warning: {terminal(w.message)}", file=sys.stderr)
    text = "\n\n".join(t.to_markdown(provenance=args.provenance) for t in tables)
    print(text)
    if args.output:
        try:
            atomic_write(args.output, text + "\n", overwrite=args.overwrite, what="table")
        except OutputError as exc:
            print(f"labkit table: {exc}", file=sys.stderr)
            return 1
    return 0
