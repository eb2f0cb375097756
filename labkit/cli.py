"""Command line: ``python -m labkit {doctor,profile,summary,compare,table} ...``.

``profile`` and ``summary`` are here; ``doctor`` and ``table`` live with the modules that do
the work and are imported only when asked for, so ``python -m labkit doctor`` does not import
pandas or matplotlib.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
from pathlib import Path

from labkit.errors import LabkitError
from labkit.safe_text import csv_frame, terminal

__all__ = ["main", "cli_profile", "cli_summary", "cli_compare", "text_table"]

_WHAT = ("nvtx", "kernels", "memcpy", "memsize", "cuda_api", "osrt", "projection", "stages", "batches")

_COMMANDS = {
    "doctor": ("labkit.doctor", "cli", "check this machine: Python, torch, GPU, nsys, nvtx, TensorRT, OpenCV, disk"),
    "profile": ("labkit.cli", "cli_profile", "run a command under nsys: python -m labkit profile [--name N] -- CMD ..."),
    "summary": ("labkit.cli", "cli_summary", "summarize a report: python -m labkit summary REPORT [--what a,b,...] [--csv]"),
    "compare": ("labkit.cli", "cli_compare", "what changed between two reports: python -m labkit compare A B"),
    "export": ("labkit.show.perfetto", "cli_export", "export a report as a Perfetto trace: python -m labkit export --perfetto REPORT [-o PATH]"),
    "table": ("labkit.bench.tables", "cli_table", "print the relative-speedup table of a ledger: python -m labkit table [PATH]"),
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
    try:
        return int(getattr(importlib.import_module(module), func)(argv[1:]) or 0)
    except BrokenPipeError:  # `python -m labkit summary R | head`: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C: one line (what was kept), no traceback, the shell's 130
        print(f"labkit: {exc.args[0] if exc.args else 'interrupted'}", file=sys.stderr)
        return 130


_SUMMARY_FUNCS = {  # --what -> (module, function); imported only when asked for
    "nvtx": ("labkit.stats.summaries", "nvtx_summary"), "kernels": ("labkit.stats.summaries", "kernel_summary"),
    "memcpy": ("labkit.stats.summaries", "memcpy_summary"), "memsize": ("labkit.stats.summaries", "memcpy_size_summary"),
    "cuda_api": ("labkit.stats.summaries", "cuda_api_summary"), "osrt": ("labkit.stats.summaries", "osrt_summary"),
    "projection": ("labkit.stats.summaries", "gpu_projection_summary"),
    "stages": ("labkit.stats.stages", "stage_table"), "batches": ("labkit.stats.stages", "batches"),
}


def cli_summary(argv: list[str]) -> int:
    """``python -m labkit summary REPORT [--what nvtx,kernels,...] [--window S,E | --within R] [--csv]``:
    print one or several summary tables of one report, loaded once."""
    p = argparse.ArgumentParser(prog="python -m labkit summary",
                                description="Summarize an Nsight Systems report (.nsys-rep or .sqlite).")
    p.add_argument("report")
    p.add_argument("--what", default="nvtx",
                   help=f"comma-separated, any of: {','.join(_WHAT)} (default: nvtx)")
    p.add_argument("--window", default=None, help="START_NS,END_NS: only what starts in that span")
    p.add_argument("--within", default=None, help="an NVTX range name: only what starts inside its instances")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a text table")
    p.add_argument("--warmup", type=int, default=0, help="batches left out of --what batches")
    p.add_argument("--wide", action="store_true", help="names in full (default: cut to the terminal width, COLUMNS)")
    args = p.parse_args(argv)
    what = [w.strip() for w in args.what.split(",") if w.strip()]
    bad = [w for w in what if w not in _SUMMARY_FUNCS]
    if bad or not what:
        p.print_usage(sys.stderr)
        print(f"labkit: unknown --what {','.join(bad) or '(empty)'}: choose from {','.join(_WHAT)}", file=sys.stderr)
        return 2
    window = None
    if args.window:
        try:
            window = tuple(int(x) for x in args.window.split(","))
        except ValueError:
            window = ()
        if len(window) != 2:
            print(f"labkit: --window {args.window!r}: give START_NS,END_NS, two integers", file=sys.stderr)
            return 2
    from labkit.report.load import load_report

    out = []
    try:
        rep = load_report(args.report)
        if window is not None or args.within is not None:
            from labkit.report.window import restrict

            rep = restrict(rep, window=window, within=args.within)
        for w in what:
            module, func = _SUMMARY_FUNCS[w]
            fn = getattr(importlib.import_module(module), func)
            out.append((w, fn(rep, warmup=args.warmup) if w == "batches" else fn(rep)))
    except LabkitError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    for note in rep.notes:
        print(f"labkit: note: {note}", file=sys.stderr)
    for i, (w, df) in enumerate(out):
        if len(out) > 1:
            print(("\n" if i else "") + (f"# {w}" if args.csv else f"== {w} =="))
        if args.csv:
            csv_frame(df).to_csv(sys.stdout, index=False)  # names from a report are data
        elif len(df) == 0:
            print(f"(no {w} data in {args.report})")
        else:
            print(text_table(df, width=None if args.wide else _terminal_width()))
    return 0


def cli_compare(argv: list[str]) -> int:
    """``python -m labkit compare A B [--top N] [--csv]``: what changed from report A to report B."""
    p = argparse.ArgumentParser(prog="python -m labkit compare",
                                description="Per NVTX range, kernel and CUDA API call: counts, totals and deltas "
                                            "of two reports, the biggest changes first.")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--top", type=int, default=20, help="rows to print (0: all)")
    p.add_argument("--within", default=None, help="an NVTX range name both reports hold")
    p.add_argument("--csv", action="store_true")
    p.add_argument("--wide", action="store_true")
    args = p.parse_args(argv)
    from labkit.stats.compare import compare

    try:
        df = compare(args.a, args.b, within=args.within)
    except LabkitError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    if args.top:
        df = df.head(args.top)
    if args.csv:
        csv_frame(df).to_csv(sys.stdout, index=False)  # names from a report are data
    elif len(df) == 0:
        print("(nothing to compare: neither report holds NVTX ranges, kernels or CUDA API calls)")
    else:
        print(text_table(df, width=None if args.wide else _terminal_width()))
    return 0


def cli_profile(argv: list[str]) -> int:
    """``python -m labkit profile [--name N] [--outdir D] [--trace T] [--capture-range R] [--overwrite] -- CMD``."""
    from labkit.stats import summaries
    from labkit.env import reports_dir
    from labkit.report.load import profile

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
    name = args.name if args.name is not None else Path(cmd[1] if is_python else cmd[0]).stem  # "": refused
    try:
        rep = profile(cmd, name=name, trace=args.trace.split(","), outdir=args.outdir,
                      capture_range=args.capture_range, overwrite=args.overwrite)
    except LabkitError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    print(terminal(f"report: {rep.path} (sqlite: {Path(rep.path).with_suffix('.sqlite')}, log: {rep.log_path})"))
    if args.summary != "none":
        df = summaries.nvtx_summary(rep) if args.summary == "nvtx" else summaries.kernel_summary(rep)
        print(text_table(df, width=_terminal_width()) if len(df) else f"(no {args.summary} data)")
    return 0


def _terminal_width() -> int | None:
    """Columns to fit: ``$COLUMNS`` or the terminal's; None (no cutting) in a pipe without COLUMNS."""
    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((160, 24)).columns


def text_table(df, *, width: int | None = None) -> str:
    """``df`` as a plain text table: whole numbers as integers, other numbers in fixed point (never
    scientific notation), and the text columns cut (ending in "…", 12 characters at least) so each
    line fits ``width`` characters where the numbers leave room (None: in full)."""
    import pandas as pd

    def numbers(col: pd.Series) -> pd.Series:
        vals = col.dropna().astype(float)
        whole = bool((vals == vals.round()).all())
        places = 0 if whole else 1 if vals.abs().max() >= 10 else 3
        return col.map(lambda v: "" if pd.isna(v) else f"{float(v):.{places}f}")

    numeric = {c: pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in df.columns}
    # text from a report is data: control characters shown, never obeyed (a newline splits no row)
    cells = {c: numbers(df[c]) if numeric[c] else df[c].map(terminal) for c in df.columns}
    widths = {c: max(len(terminal(c)), int(cells[c].str.len().max() if len(df) else 0)) for c in df.columns}
    text = [c for c in df.columns if not numeric[c]]
    while width and text:
        over = sum(widths.values()) + 2 * (len(widths) - 1) - width
        widest = max(text, key=widths.get)
        if over <= 0 or widths[widest] <= 12:
            break
        widths[widest] = max(12, len(str(widest)), widths[widest] - over)
    for c in text:
        cells[c] = cells[c].map(lambda v, w=widths[c]: v if len(v) <= w else v[:w - 1] + "…")

    def line(values) -> str:
        return "  ".join(v.rjust(widths[c]) if numeric[c] else v.ljust(widths[c])
                         for c, v in zip(df.columns, values)).rstrip()

    return "\n".join([line([terminal(c) for c in df.columns])] + [line(r) for r in zip(*cells.values())])
