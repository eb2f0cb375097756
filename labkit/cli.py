"""Command line: ``python -m labkit {doctor,profile,summary,compare,advise,bottleneck,timeline,kernels,export,table} ...``.

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

__all__ = ["main", "cli_profile", "cli_summary", "cli_compare", "cli_advise", "cli_bottleneck", "cli_timeline",
           "cli_kernels", "text_table", "report_paths"]

_WHAT = ("nvtx", "kernels", "memcpy", "memsize", "cuda_api", "osrt", "projection", "stages", "batches")

_COMMANDS = {
    "doctor": ("labkit.doctor", "cli", "check this machine: Python, torch, GPU, nsys, nvtx, TensorRT, OpenCV, disk"),
    "profile": ("labkit.cli", "cli_profile", "run a command under nsys: python -m labkit profile [--name N] -- CMD ..."),
    "summary": ("labkit.cli", "cli_summary", "summarize a report, or per-rank reports: python -m labkit summary REPORT|DIR|GLOB [--what a,b,...] [--scheduler ADDRESS|local] [--csv]"),
    "compare": ("labkit.cli", "cli_compare", "what changed between two reports, the headline first: python -m labkit compare A B"),
    "advise": ("labkit.cli", "cli_advise", "what holds a run back, its lever and predicted speed-up: python -m labkit advise REPORT"),
    "bottleneck": ("labkit.cli", "cli_bottleneck", "the stage, thread or engine that limited a run: python -m labkit bottleneck REPORT"),
    "timeline": ("labkit.cli", "cli_timeline", "draw a report's timeline: python -m labkit timeline REPORT -o x.png|x.html"),
    "kernels": ("labkit.cli", "cli_kernels", "kernel statistics: percentiles, launch latency, queues, streams, copy bandwidth"),
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
            print(f"  {name:<10} {help_}", file=out)
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


_MANY_WHAT = ("nvtx", "kernels", "stages", "imbalance", "stragglers")  # what per-rank reports give


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
    p.add_argument("--csv", action="store_true", help="print CSV instead of a text table")
    p.add_argument("--warmup", type=int, default=0, help="batches left out of --what batches")
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
    from labkit.report.load import load_report

    out = []
    report = args.report[0]
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
    _print_tables(out, args, report)
    return 0


def _print_tables(out: list, args, source: str) -> None:
    for i, (w, df) in enumerate(out):
        if len(out) > 1:
            print(("\n" if i else "") + (f"# {w}" if args.csv else f"== {w} =="))
        if args.csv:
            csv_frame(df).to_csv(sys.stdout, index=False)
        elif len(df) == 0:
            print(f"(no {w} data in {source})")
        else:
            print(text_table(df, width=None if args.wide else _terminal_width()))


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
    _print_tables(out, args, f"{len(reps)} reports (ranks {reps.ranks[0]}-{reps.ranks[-1]})")
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
    p.add_argument("--trace", default="cuda,nvtx,osrt")
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


# ----------------------------------------------------------------------------- commands on one report
# advise, bottleneck, timeline, kernels and compare's headline: each calls the public API, imports
# only what it needs when it runs, writes files only where asked (-o), never over one without
# --overwrite, and ends a fault in one line (LabkitError).
def _span_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window", default=None, metavar="START_MS,END_MS",
                   help="only what starts in that span, in ms on the report's clock (as the Nsight GUI shows it)")
    p.add_argument("--within", default=None, metavar="RANGE", help="an NVTX range name: only what starts inside "
                                                                   "its instances")


def _span(args) -> dict:
    """``window``/``within`` keywords from ``--window START_MS,END_MS`` / ``--within RANGE``;
    raises SystemExit(2) with one line for a malformed window."""
    out = {}
    if args.window is not None and args.within is not None:
        print("labkit: give --window START_MS,END_MS or --within RANGE, not both", file=sys.stderr)
        raise SystemExit(2)
    if args.window is not None:
        try:
            s, e = (float(x) for x in args.window.split(","))
        except ValueError:
            print(f"labkit: --window {args.window!r}: give START_MS,END_MS, two numbers in ms (e.g. 1200,1500)",
                  file=sys.stderr)
            raise SystemExit(2) from None
        out["window"] = (round(s * 1e6), round(e * 1e6))
    if args.within is not None:
        out["within"] = args.within
    return out


def _jsonable(x):
    """Plain JSON values from labkit's results: frames as lists of records, dataclasses as dicts,
    numpy scalars as numbers, NaN as null, tuples as lists, anything else as its str()."""
    import dataclasses
    import math

    if x is None or isinstance(x, (str, bool, int)):
        return x
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if hasattr(x, "to_dict") and hasattr(x, "columns"):  # a DataFrame
        return [_jsonable(r) for r in x.astype(object).to_dict(orient="records")]
    if hasattr(x, "tolist"):  # numpy scalars and arrays
        return _jsonable(x.tolist())
    return None if str(x) in ("<NA>", "NaT") else str(x)


def _print_json(obj) -> None:
    import json

    json.dump(_jsonable(obj), sys.stdout, indent=1, allow_nan=False)
    print()


def _fail(exc: Exception) -> int:
    print(f"labkit: {exc}", file=sys.stderr)
    return 1


def _out_format(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print JSON (the Python API's result)")
    g.add_argument("--csv", action="store_true", help="print CSV instead of a text table")
    p.add_argument("--wide", action="store_true", help="names in full (default: cut to the terminal width)")


def cli_advise(argv: list[str]) -> int:
    """``python -m labkit advise REPORT [--window S,E | --within R] [--warmup N] [--json | --csv]``."""
    p = argparse.ArgumentParser(prog="python -m labkit advise",
                                description="Findings about what holds a profiled run back: evidence, lever and "
                                            "predicted speed-up (labkit.advise).")
    p.add_argument("report")
    p.add_argument("--warmup", type=int, default=0, help="batches (range payload below this) left out as warm-up")
    _span_options(p)
    _out_format(p)
    args = p.parse_args(argv)
    span = _span(args)
    import labkit

    try:
        rep = labkit.load_report(args.report)
        df = labkit.advise(rep, warmup=args.warmup, **span)
    except LabkitError as exc:
        return _fail(exc)
    if args.json:
        _print_json({"report": str(rep.path), **dict(df.attrs), "findings": df})
    elif args.csv:
        csv_frame(df).to_csv(sys.stdout, index=False)
    else:
        note = df.attrs.get("note")
        if note:
            print(note)
        for i, r in enumerate(df.to_dict(orient="records"), 1):
            basis = "an upper bound" if r.get("basis") == "bound" else "an estimate"
            print(f"{i}. {r.get('finding', '')} ({r.get('evidence', '')}); predicted "
                  f"{float(r.get('predicted_speedup', float('nan'))):.2f}x ({basis}); lever: "
                  f"{r.get('lever_text') or r.get('lever')}")
    return 0


def cli_bottleneck(argv: list[str]) -> int:
    """``python -m labkit bottleneck REPORT [--window S,E | --within R] [--warmup N] [--json | --csv]``."""
    p = argparse.ArgumentParser(prog="python -m labkit bottleneck",
                                description="The stage, thread or engine that limited a run's throughput "
                                            "(labkit.bottleneck); --csv prints its per-thread table.")
    p.add_argument("report")
    p.add_argument("--warmup", type=int, default=0, help="batches (range payload below this) left out as warm-up")
    _span_options(p)
    _out_format(p)
    args = p.parse_args(argv)
    span = _span(args)
    import labkit

    try:
        rep = labkit.load_report(args.report)
        b = labkit.bottleneck(rep, warmup=args.warmup, **span)
    except LabkitError as exc:
        return _fail(exc)
    table = getattr(b, "table", None)
    if args.json:
        _print_json({"report": str(rep.path), **_jsonable(b)})
    elif args.csv:
        if table is not None:
            csv_frame(table).to_csv(sys.stdout, index=False)
    else:
        print(str(b))
        if table is not None and len(table):
            print()
            print(text_table(table, width=None if args.wide else _terminal_width()))
    return 0


_FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def cli_timeline(argv: list[str]) -> int:
    """``python -m labkit timeline REPORT -o OUT.png|OUT.html [--window S,E | --within R] [--overwrite]``."""
    p = argparse.ArgumentParser(prog="python -m labkit timeline",
                                description="Draw a report's timeline: NVTX ranges per thread, GPU work per stream. "
                                            ".png/.svg/.pdf: labkit.plot_timeline; .html: a zoomable page "
                                            "(labkit.interactive_timeline, opens offline).")
    p.add_argument("report")
    p.add_argument("-o", "--output", required=True, help="the file to write: .png, .svg, .pdf or .html")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--max-depth", type=int, default=2, help="deepest NVTX nesting level drawn (default 2)")
    _span_options(p)
    args = p.parse_args(argv)
    span = _span(args)
    out = Path(args.output)
    suffix = out.suffix.lower()
    if suffix not in _FIGURE_SUFFIXES + (".html",):
        print(f"labkit: -o {args.output}: give a file ending in .png, .svg, .pdf or .html", file=sys.stderr)
        return 2
    if out.exists() and not args.overwrite:
        print(f"labkit: {out} exists: pass --overwrite to replace it, or another -o", file=sys.stderr)
        return 1
    import labkit
    from labkit.annotate import write_atomic
    from labkit.errors import output_error

    try:
        rep = labkit.load_report(args.report)
        if "within" in span:
            rep = labkit.restrict(rep, within=span["within"])
        window = span.get("window")
        if suffix == ".html":
            data = labkit.interactive_timeline(rep, window=window, max_depth=args.max_depth).html()
        else:
            import io

            fig = labkit.plot_timeline(rep, window=window, max_depth=args.max_depth)
            buf = io.BytesIO()
            fig.savefig(buf, format=suffix[1:])
            data = buf.getvalue()
        try:
            write_atomic(out, data, overwrite=args.overwrite)
        except FileExistsError:
            print(f"labkit: {out} exists: pass --overwrite to replace it, or another -o", file=sys.stderr)
            return 1
        except OSError as exc:
            raise output_error(out, exc) from None
    except LabkitError as exc:
        return _fail(exc)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


_KERNEL_TABLES = {"percentiles": "kernel_percentiles", "latency": "launch_latency", "queue": "queue_depth",
                  "streams": "stream_summary", "bandwidth": "copy_bandwidth"}


def cli_kernels(argv: list[str]) -> int:
    """``python -m labkit kernels REPORT [--what percentiles,latency,queue,streams,bandwidth] [--json | --csv]``."""
    p = argparse.ArgumentParser(prog="python -m labkit kernels",
                                description="Kernel statistics as nsys recipes and HTA give them: duration "
                                            "percentiles per kernel, launch latency and queue time, queue depth "
                                            "per stream, per-stream totals, copy bandwidth (labkit.stats.kernels).")
    p.add_argument("report")
    p.add_argument("--what", default=",".join(_KERNEL_TABLES),
                   help=f"comma-separated, any of: {','.join(_KERNEL_TABLES)} (default: all)")
    p.add_argument("--names", choices=("demangled", "short"), default="demangled", help="kernel names")
    p.add_argument("--by-call", action="store_true", help="latency: split by process, thread, device and "
                                                          "launching call, as nsys's kernexecsum")
    p.add_argument("--by-memory", action="store_true", help="bandwidth: split by source and destination memory")
    _span_options(p)
    _out_format(p)
    args = p.parse_args(argv)
    what = [w.strip() for w in args.what.split(",") if w.strip()]
    bad = [w for w in what if w not in _KERNEL_TABLES]
    if bad or not what:
        print(f"labkit: unknown --what {','.join(bad) or '(empty)'}: choose from {','.join(_KERNEL_TABLES)}",
              file=sys.stderr)
        return 2
    span = _span(args)
    import labkit
    from labkit.stats import kernels

    extra = {"percentiles": {"names": args.names}, "latency": {"names": args.names, "by_call": args.by_call},
             "bandwidth": {"by_memory": args.by_memory}}
    try:
        rep = labkit.load_report(args.report)
        out = {w: getattr(kernels, _KERNEL_TABLES[w])(rep, **extra.get(w, {}), **span) for w in what}
    except LabkitError as exc:
        return _fail(exc)
    if args.json:
        _print_json({"report": str(rep.path), **out})
        return 0
    for i, (w, df) in enumerate(out.items()):
        if len(out) > 1:
            print(("\n" if i else "") + (f"# {w}" if args.csv else f"== {w} =="))
        if args.csv:
            csv_frame(df).to_csv(sys.stdout, index=False)
        elif len(df) == 0:
            print(f"(no {w} data in {args.report})")
        else:
            print(text_table(df, width=None if args.wide else _terminal_width()))
    return 0


def cli_compare(argv: list[str]) -> int:
    """``python -m labkit compare A B [--top N] [--csv | --json]``, or ``compare A1 A2 ... --vs B1 B2 ...``
    (repeats: the headline gets a 95 % interval): the headline (wall and GPU time of each side's
    window), then what changed from A to B."""
    p = argparse.ArgumentParser(prog="python -m labkit compare",
                                description="The headline (wall and GPU time of each side's window: 'B is 1.45x "
                                            "faster'), then per NVTX range, kernel and CUDA API call: counts, "
                                            "totals and deltas of two reports, the biggest changes first.")
    p.add_argument("reports", nargs="+", metavar="REPORT", help="A B; or the repeats of A, with --vs B1 B2 ...")
    p.add_argument("--vs", nargs="+", default=None, metavar="B", help="side B's reports (repeats of one run)")
    p.add_argument("--top", type=int, default=20, help="rows to print (0: all)")
    _span_options(p)
    _out_format(p)
    args = p.parse_args(argv)
    if args.vs is None and len(args.reports) != 2:
        print(f"labkit: compare takes two reports, A B (got {len(args.reports)}); for repeats: "
              "compare A1 A2 ... --vs B1 B2 ...", file=sys.stderr)
        return 2
    a, b = (args.reports, args.vs) if args.vs is not None else (args.reports[0], args.reports[1])
    span = _span(args)
    from labkit.stats.compare import compare

    try:
        df = compare(a, b, **span)
    except LabkitError as exc:
        return _fail(exc)
    head = df.attrs.get("headline")
    if args.top:
        df = df.head(args.top)
    if args.json:
        _print_json({"headline": head, "a": df.attrs.get("a"), "b": df.attrs.get("b"), "rows": df})
        return 0
    if args.csv:  # the CSV stays a table: the headline goes to stderr
        print(str(head), file=sys.stderr)
        csv_frame(df).to_csv(sys.stdout, index=False)
        return 0
    print(str(head))
    print()
    if len(df) == 0:
        print("(nothing to compare: neither report holds NVTX ranges, kernels or CUDA API calls)")
    else:
        print(text_table(df, width=None if args.wide else _terminal_width()))
    return 0
