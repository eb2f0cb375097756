"""The command line's commands on one report or two: ``advise``, ``bottleneck``, ``timeline``, ``kernels`` and
``compare`` (``python -m labkit COMMAND``; :mod:`labkit.cli` dispatches and holds the shared table printer)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from labkit.cli import _terminal_width, count_arg, print_tables, text_table
from labkit.errors import LabkitError
from labkit.safe_text import csv_frame, terminal

__all__ = ["cli_advise", "cli_bottleneck", "cli_timeline", "cli_kernels", "cli_compare"]


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
            out["window"] = (round(s * 1e6), round(e * 1e6))  # nan, inf and 1e400 raise here too
        except (ValueError, OverflowError):
            print(f"labkit: --window {args.window!r}: give START_MS,END_MS, two finite numbers in ms (e.g. "
                  f"1200,1500; --window=-5,10 for a negative start)", file=sys.stderr)
            raise SystemExit(2) from None
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


def _judgement_args(argv: list[str], name: str, description: str) -> tuple[argparse.Namespace, dict]:
    """The options of a command that judges a run (advise, bottleneck): REPORT, --warmup, the span,
    --whole and the output format. Returns the parsed arguments and the keywords for the judgement."""
    p = argparse.ArgumentParser(prog=f"python -m labkit {name}", description=description)
    p.add_argument("report")
    p.add_argument("--warmup", type=count_arg, default=0, help="batches (range payload below this) left out as warm-up")
    _span_options(p)
    p.add_argument("--whole", action="store_true", help="the whole trace (default: the steady window past "
                                                        "start-up, which the output names)")
    p.add_argument("--explain", action="store_true", help="add each finding's evidence and assumptions")
    if name == "bottleneck":
        p.add_argument("--table", action="store_true", help="add the table of every thread and stage")
    _out_format(p)
    args = p.parse_args(argv)
    return args, dict(warmup=args.warmup, steady=not args.whole, **_span(args))


def cli_advise(argv: list[str]) -> int:
    """``python -m labkit advise REPORT [--window S,E | --within R | --whole] [--warmup N] [--json | --csv]``."""
    args, how = _judgement_args(argv, "advise", "Findings about what holds a profiled run back: evidence, lever "
                                                "and predicted speed-up (labkit.advise).")
    import labkit

    try:
        rep = labkit.load_report(args.report)
        df = labkit.advise(rep, **how)
    except LabkitError as exc:
        return _fail(exc)
    if args.json:
        _print_json({"report": str(rep.path), "notes": list(rep.notes), **dict(df.attrs), "findings": df})
    elif args.csv:
        _notes_to_stderr(rep.notes)
        csv_frame(df).to_csv(sys.stdout, index=False)
    else:
        from labkit.show.text import advise_lines

        print("\n".join(advise_lines(df.to_dict(orient="records"), dict(df.attrs), rep.notes, explain=args.explain)))
    return 0


def _notes_to_stderr(notes) -> None:
    """A CSV stays a table: the report's notes go to stderr, one line each."""
    for note in dict.fromkeys(notes or []):
        print(f"labkit: note: {terminal(note)}", file=sys.stderr)


def cli_bottleneck(argv: list[str]) -> int:
    """``python -m labkit bottleneck REPORT [--window S,E | --within R | --whole] [--warmup N] [--json | --csv]``."""
    args, how = _judgement_args(argv, "bottleneck", "The stage, thread or engine that limited a run's throughput "
                                                    "(labkit.bottleneck); --csv prints its per-thread table.")
    import labkit

    try:
        rep = labkit.load_report(args.report)
        b = labkit.bottleneck(rep, **how)
    except LabkitError as exc:
        return _fail(exc)
    table = getattr(b, "table", None)
    if args.json:
        _print_json({"report": str(rep.path), "notes": list(rep.notes), **_jsonable(b)})
    elif args.csv:
        _notes_to_stderr(rep.notes)
        if table is not None:
            csv_frame(table).to_csv(sys.stdout, index=False)
    else:
        from labkit.show.text import bottleneck_lines

        print("\n".join(bottleneck_lines(b, rep.notes, explain=args.explain)))
        if args.table and table is not None and len(table):
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
    p.add_argument("--max-depth", type=count_arg, default=2, help="deepest NVTX nesting level drawn (default 2)")
    _span_options(p)
    args = p.parse_args(argv)
    span = _span(args)
    out = Path(args.output)
    suffix = out.suffix.lower()
    if suffix not in _FIGURE_SUFFIXES + (".html",):
        print(f"labkit: -o {args.output}: give a file ending in .png, .svg, .pdf or .html", file=sys.stderr)
        return 2
    import labkit
    from labkit.paths import atomic_write, check_output

    try:
        check_output(out, overwrite=args.overwrite, what="timeline")  # before the drawing, not after
        if not args.overwrite and os.path.lexists(out):  # the command never replaces a file unasked, even its own
            print(f"labkit: {out} exists: pass --overwrite to replace it, or another -o", file=sys.stderr)
            return 1
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
        atomic_write(out, data, overwrite=args.overwrite, what="timeline")
    except LabkitError as exc:
        return _fail(exc)
    print(f"wrote {out} ({len(data):,} bytes)")
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
    p.add_argument("--ns", action="store_true", help="text tables: times in ns (default: ms, the unit in each "
                                                     "header, as summary prints them; --json and --csv keep ns)")
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
        _print_json({"report": str(rep.path), "notes": list(rep.notes), **out})
        return 0
    if args.csv:
        _notes_to_stderr(rep.notes)
    else:
        from labkit.show.text import note_lines

        for line in note_lines(rep.notes):
            print(line)
    print_tables(out, args, args.report)
    return 0


def cli_compare(argv: list[str]) -> int:
    """``python -m labkit compare A B [--top N] [--csv | --json]``, or ``compare A1 A2 ... --vs B1 B2 ...``
    (repeats: the headline gets a 95 % interval): the headline (wall and GPU time of each side's
    window), then what changed from A to B."""
    p = argparse.ArgumentParser(prog="python -m labkit compare",
                                description="The headline (the measured runs' speed-up where a ledger beside the "
                                            "reports has them, else the profiled wall and GPU time), then per NVTX range, kernel and CUDA API call: counts, "
                                            "totals and deltas of two reports, the biggest changes first.")
    p.add_argument("reports", nargs="+", metavar="REPORT", help="A B; or the repeats of A, with --vs B1 B2 ...")
    p.add_argument("--vs", nargs="+", default=None, metavar="B", help="side B's reports (repeats of one run)")
    p.add_argument("--top", type=count_arg, default=20, help="rows to print (0: all)")
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
        measured = None
        if args.vs is None and not span:  # one run a side, whole: the ledgers beside them may have measured it
            from labkit.bench.measured import measured_speedup

            measured = measured_speedup(a, b) or False
        df = compare(a, b, measured=measured, **span)
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
    from labkit.show.text import wrapped

    print("\n".join(wrapped(str(head))))
    print()
    if len(df) == 0:
        print("(nothing to compare: neither report holds NVTX ranges, kernels or CUDA API calls)")
    else:
        print(text_table(df, width=None if args.wide else _terminal_width()))
    return 0
