"""Command line: ``python -m labkit {doctor,profile,summary,compare,advise,bottleneck,timeline,kernels,export,table,kernel} ...``.

``profile`` and ``summary`` are here; ``doctor`` and ``table`` live with the modules that do
the work and are imported only when asked for, so ``python -m labkit doctor`` does not import
pandas or matplotlib.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from labkit.errors import LabkitError, seconds_arg
from labkit.safe_text import csv_frame, terminal, terminal_lines

__all__ = ["main", "cli_profile", "cli_summary", "text_table", "print_tables", "report_paths"]

_WHAT = ("nvtx", "kernels", "memcpy", "memsize", "cuda_api", "osrt", "projection", "stages", "batches")

_COMMANDS = {
    "doctor": ("labkit.doctor", "cli", "check this machine: Python, torch, GPU, nsys, nvtx, TensorRT, OpenCV, disk"),
    "profile": ("labkit.cli", "cli_profile", "run a command under nsys: python -m labkit profile [--name N] -- CMD ..."),
    "summary": ("labkit.cli", "cli_summary", "summarize a report, or per-rank reports: python -m labkit summary REPORT|DIR|GLOB [--what a,b,...] [--scheduler ADDRESS|local] [--csv]"),
    "compare": ("labkit.cli_report", "cli_compare", "what changed between two reports, the headline first: python -m labkit compare A B"),
    "advise": ("labkit.cli_report", "cli_advise", "what holds a run back, its lever and predicted speed-up: python -m labkit advise REPORT"),
    "bottleneck": ("labkit.cli_report", "cli_bottleneck", "the stage, thread or engine that limited a run: python -m labkit bottleneck REPORT"),
    "timeline": ("labkit.cli_report", "cli_timeline", "draw a report's timeline: python -m labkit timeline REPORT -o x.png|x.html"),
    "kernels": ("labkit.cli_report", "cli_kernels", "kernel statistics: percentiles, launch latency, queues, streams, copy bandwidth"),
    "export": ("labkit.show.perfetto", "cli_export", "export a report as a Perfetto trace: python -m labkit export --perfetto REPORT [-o PATH]"),
    "table": ("labkit.bench.table_cli", "cli_table", "print the relative-speedup table of a ledger: python -m labkit table [PATH]"),
    "kernel": ("labkit.record.kernel", "cli", "install the Jupyter kernel that %%nsys records cells of: python -m labkit kernel install [--sys-prefix]"),
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
            print(f"  {name:<10} {help_}", file=out)
        return 2 if unknown else 0
    module, func, _ = _COMMANDS[argv[0]]
    # the command line's one exit for text: a name from a report, a ledger or an argument is shown,
    # never obeyed (an escape sequence, a bell, a bidirectional override), whichever line prints it
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Shown(sys.stdout), _Shown(sys.stderr)
    try:
        return int(getattr(importlib.import_module(module), func)(argv[1:]) or 0)
    except BrokenPipeError:  # `python -m labkit summary R | head`: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C: one line (what was kept), no traceback, the shell's 130
        print(f"labkit: {exc.args[0] if exc.args else 'interrupted'}", file=sys.stderr)
        return 130
    except LabkitError as exc:  # a fault no command worded itself: still one line
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # one no command worded: a path argument too long to look at, say
        from labkit.errors import os_error

        print(f"labkit: {os_error(exc)}", file=sys.stderr)
        return 1
    finally:
        sys.stdout, sys.stderr = streams


class _Shown:
    """A text stream whose writes go through :func:`labkit.safe_text.terminal_lines` (lines,
    tabs and carriage returns kept; every other control character shown as ``\\xNN``)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return self._stream.write(terminal_lines(text))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


_SUMMARY_FUNCS = {  # --what -> (module, function); imported only when asked for
    "nvtx": ("labkit.stats.summaries", "nvtx_summary"), "kernels": ("labkit.stats.summaries", "kernel_summary"),
    "memcpy": ("labkit.stats.summaries", "memcpy_summary"), "memsize": ("labkit.stats.summaries", "memcpy_size_summary"),
    "cuda_api": ("labkit.stats.summaries", "cuda_api_summary"), "osrt": ("labkit.stats.summaries", "osrt_summary"),
    "projection": ("labkit.stats.summaries", "gpu_projection_summary"),
    "stages": ("labkit.stats.stages", "stage_table"), "batches": ("labkit.stats.stages", "batches"),
}


_MANY_WHAT = ("nvtx", "kernels", "stages", "imbalance", "stragglers")  # what per-rank reports give


def count_arg(text: str) -> int:
    """An argparse type: a whole number, 0 or more (``--warmup``, ``--top``, ``--max-depth``); anything
    else is argparse's one-line usage error."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is below 0: give 0 or more")
    return n


def cli_summary(argv: list[str]) -> int:
    """``python -m labkit summary REPORT [--what nvtx,kernels,...] [--window S,E | --within R] [--csv]``:
    print one or several summary tables of one report, loaded once. Given a folder, a glob pattern or
    several reports (per-rank reports of one run), or ``--scheduler``: the merged tables of all of
    them (``--per-rank``: one row per rank), each report summarized as one task (Dask with
    ``--scheduler``; see :func:`labkit.ranks.reports.load_reports`)."""
    p = argparse.ArgumentParser(prog="python -m labkit summary",
                                description="Summarize an Nsight Systems report (.nsys-rep or .sqlite), or the "
                                            "per-rank reports of one run (a folder, a glob pattern, several files).")
    p.add_argument("report", nargs="+", help="a report; or a folder, glob pattern or files of per-rank reports")
    p.add_argument("--what", default="nvtx",
                   help=f"comma-separated, any of: {','.join(_WHAT)} (default: nvtx); for per-rank reports: "
                        f"{','.join(_MANY_WHAT)}")
    p.add_argument("--window", default=None, help="START_NS,END_NS: only what starts in that span")
    p.add_argument("--within", default=None, help="an NVTX range name: only what starts inside its instances")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a text table (nsys's units: ns)")
    p.add_argument("--ns", action="store_true", help="times in ns under nsys's column names (default: ms, "
                                                     "the unit in each header: total_ms)")
    p.add_argument("--warmup", type=count_arg, default=0, help="batches left out of --what batches")
    p.add_argument("--wide", action="store_true", help="names in full (default: cut to the terminal width, COLUMNS)")
    p.add_argument("--scheduler", default=None,
                   help="per-rank reports on Dask: 'local' (a local cluster), a scheduler address (tcp://HOST:PORT) "
                        "or scheduler file; default: $DASK_SCHEDULER_ADDRESS, else this process")
    p.add_argument("--per-rank", action="store_true", help="per-rank reports: one row per rank, not merged")
    args = p.parse_args(argv)
    what = [w.strip() for w in args.what.split(",") if w.strip()]
    one = args.report[0]
    many = (len(args.report) > 1 or args.scheduler is not None or args.per_rank or Path(one).is_dir()
            or (not Path(one).exists() and any(c in one for c in "*?[")))
    if many:
        return _summary_many(p, args, what)
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
    report = args.report[0]
    if window is None and args.within is None and not args.csv and _LEAN:
        from labkit.stats.lean import lean_summaries

        lean = lean_summaries(report, what)
        if lean is not None:
            return _print_lean(*lean, args, report)
    from labkit.report.load import load_report

    out = []
    try:
        rep = load_report(report)
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
    print_tables(out, args, report)
    return 0


_LEAN = True  # summary's text from sqlite3 where the export allows (labkit.stats.lean); tests compare both


def _print_lean(tables, notes, args, source: str) -> int:
    """Print :func:`labkit.stats.lean.lean_summaries`'s tables as :func:`print_tables` prints frames."""
    from labkit.show.text import plain_table

    for note in notes:
        print(f"labkit: note: {note}", file=sys.stderr)
    for i, (w, columns, rows) in enumerate(tables):
        if len(tables) > 1:
            print(("\n" if i else "") + f"== {w} ==")
        if not rows:
            print(f"(no {w} data in {source})")
            continue
        numeric = {c for c in columns if c not in ("name", "domain", "style")}
        if not args.ns:  # in ms, the unit in the header, as in_ms does
            ms = [j for j, c in enumerate(columns) if c.endswith("_ns")]
            rows = [[v / 1e6 if j in ms else v for j, v in enumerate(r)] for r in rows]
            columns = [c[:-3] + "_ms" if c.endswith("_ns") else c for c in columns]
            numeric = {c[:-3] + "_ms" if c.endswith("_ns") else c for c in numeric}
        print(plain_table(columns, rows, numeric, width=None if args.wide else _terminal_width(),
                          places={c: 3 for c in columns if c.endswith("_ms")}))
    return 0


def print_tables(out, args, source: str) -> None:
    """Print named tables (``[(name, frame), ...]`` or a dict) as the command line does: a text table
    cut to the terminal (``args.wide``: in full) or CSV (``args.csv``), a title each when several,
    and a line naming ``source`` for an empty one."""
    out = list(out.items()) if isinstance(out, dict) else list(out)
    for i, (w, df) in enumerate(out):
        if len(out) > 1:
            print(("\n" if i else "") + (f"# {w}" if args.csv else f"== {w} =="))
        if args.csv:
            csv_frame(df).to_csv(sys.stdout, index=False)
        elif len(df) == 0:
            print(f"(no {w} data in {source})")
        else:
            ms = getattr(args, "ns", True) is False  # summary's text: ms unless --ns
            df = in_ms(df) if ms else df
            print(text_table(df, width=None if args.wide else _terminal_width(),
                             places={c: 3 for c in df.columns if isinstance(c, str) and c.endswith("_ms")}))


def in_ms(df):
    """``df`` with each ``*_ns`` column in milliseconds, renamed ``*_ms`` (the unit in the header)."""
    cols = [c for c in df.columns if isinstance(c, str) and c.endswith("_ns")]
    return df.assign(**{c: df[c] / 1e6 for c in cols}).rename(columns={c: c[:-3] + "_ms" for c in cols})


def report_paths(specs: list[str]) -> list[Path]:
    """The reports named by folders (their ``*.sqlite``, and ``*.nsys-rep`` without one beside), glob
    patterns and files, sorted within each; LabkitError naming what matched nothing."""
    import glob

    paths: list[Path] = []
    for spec in specs:
        if Path(spec).is_dir():
            found = sorted(Path(spec).glob("*.sqlite"))
            found += sorted(r for r in Path(spec).glob("*.nsys-rep") if not r.with_suffix(".sqlite").exists())
        elif Path(spec).exists():
            found = [Path(spec)]
        else:
            found = sorted(Path(m) for m in glob.glob(spec) if not Path(m).is_dir())
        if not found:
            raise LabkitError(f"no reports in {spec} (a folder's *.sqlite and *.nsys-rep, a glob pattern or "
                              f"files): check the path, or quote the pattern")
        paths += found
    return paths


def _summary_many(p: argparse.ArgumentParser, args, what: list[str]) -> int:
    """``summary`` over per-rank reports: merged (or ``--per-rank``) tables from each report's results."""
    bad = [w for w in what if w not in _MANY_WHAT]
    if bad or not what:
        p.print_usage(sys.stderr)
        print(f"labkit: --what {','.join(bad) or '(empty)'} is not given for per-rank reports: choose from "
              f"{','.join(_MANY_WHAT)} (or summarize one report)", file=sys.stderr)
        return 2
    if args.window or args.within:
        print("labkit: --window and --within take one report: summarize each rank's report on its own",
              file=sys.stderr)
        return 2
    from labkit.ranks.reports import load_reports

    merged = not args.per_rank
    try:
        reps = load_reports(report_paths(args.report), scheduler=args.scheduler)
        tables = {"nvtx": lambda: reps.nvtx_summary(merged=merged),
                  "kernels": lambda: reps.kernel_summary(merged=merged),
                  "stages": lambda: reps.stage_table(merged=merged),
                  "imbalance": reps.imbalance, "stragglers": reps.stragglers}
        out = [(w, tables[w]()) for w in what]
    except LabkitError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    for note in reps.notes:
        print(f"labkit: note: {note}", file=sys.stderr)
    print_tables(out, args, f"{len(reps)} reports (ranks {reps.ranks[0]}-{reps.ranks[-1]})")
    return 0


def cli_profile(argv: list[str]) -> int:
    """``python -m labkit profile [--name N] [--outdir D] [--trace T] [--capture-range R] [--overwrite]
    [--timeout S] -- CMD``."""
    from labkit.stats import summaries
    from labkit.env import reports_dir
    from labkit.report.load import profile

    p = argparse.ArgumentParser(prog="python -m labkit profile",
                                description="Run a command under nsys; keep .nsys-rep, .sqlite and the program log.")
    p.add_argument("--name", help="report name (default: the program's file name)")
    p.add_argument("--outdir", default=str(reports_dir() / "profiles"))
    p.add_argument("--trace", default="cuda,nvtx,osrt")
    p.add_argument("--capture-range", default=None,
                   help="cudaProfilerApi, or an NVTX range name that starts the capture")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--timeout", type=seconds_arg, default=None, metavar="S",
                   help="stop the run after S seconds (nsys writes what it has) and fail")
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
                      capture_range=args.capture_range, overwrite=args.overwrite, timeout_s=args.timeout)
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
    import shutil  # here: its archive modules cost every command's start 4 ms

    return shutil.get_terminal_size((160, 24)).columns


def text_table(df, *, width: int | None = None, places: dict | None = None) -> str:
    """``df`` as a plain text table: whole numbers as integers, other numbers in fixed point (never
    scientific notation), and the text columns cut (ending in "…", 12 characters at least) so each
    line fits ``width`` characters where the numbers leave room (None: in full); ``places``: decimal
    places of the columns it names."""
    import pandas as pd

    from labkit.show.text import narrow_text_columns

    def numbers(col: pd.Series) -> pd.Series:
        vals = col.dropna().astype(float)
        whole = bool((vals == vals.round()).all())
        n = (places or {}).get(col.name, 0 if whole else 1 if vals.abs().max() >= 10 else 3)
        return col.map(lambda v: "" if pd.isna(v) else f"{float(v):.{n}f}")

    numeric = {c: pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in df.columns}
    # text from a report is data: control characters shown, never obeyed (a newline splits no row)
    cells = {c: numbers(df[c]) if numeric[c] else df[c].map(terminal) for c in df.columns}
    widths = {c: max(len(terminal(c)), int(cells[c].str.len().max() if len(df) else 0)) for c in df.columns}
    text = [c for c in df.columns if not numeric[c]]
    narrow_text_columns(widths, text, width)
    for c in text:
        cells[c] = cells[c].map(lambda v, w=widths[c]: v if len(v) <= w else v[:w - 1] + "…")

    def line(values) -> str:
        return "  ".join(v.rjust(widths[c]) if numeric[c] else v.ljust(widths[c])
                         for c, v in zip(df.columns, values)).rstrip()

    return "\n".join([line([terminal(c) for c in df.columns])] + [line(r) for r in zip(*cells.values())])
