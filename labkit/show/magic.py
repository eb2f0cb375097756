"""The ``%%nsys`` cell magic (``%load_ext labkit``): record one cell of this kernel with Nsight Systems
and show its timeline and findings under it.

The cell runs in the kernel itself (its variables before and after), between ``nsys start`` and
``nsys stop`` of the session the kernel was launched in (:mod:`labkit.record.session`; the kernel
"Python (labkit nsys)" of :mod:`labkit.record.kernel`). In any other kernel the cell runs
unrecorded and one line says how to get the kernel. The findings come from a function handed in
by :func:`labkit.load_ipython_extension` (``labkit.advise``): this room does not read judgements.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Callable

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from labkit import annotate
from labkit.env import project_root, reports_dir
from labkit.errors import LabkitError
from labkit.record.session import NotUnderNsysError, recording

__all__ = ["NsysMagics", "magic_folder", "summary_lines", "SHOWN_FINDINGS"]

SHOWN_FINDINGS = 3
"""Findings a cell shows, the largest estimates first (``labkit.advise(report)`` has them all)."""
MARKS = ("%%nsys cell start", "%%nsys cell end")
"""NVTX marks emitted just before and just after the cell: a report without one of them misses that
end of the cell (nsys began recording late, or stopped before the cell's last events reached it)."""


def missing_ends(report) -> list[str]:
    """Which ends of the cell (``"first"``, ``"last"``) the report lacks, read from its :data:`MARKS`."""
    nv = report.nvtx
    marks = set(nv.loc[nv["kind"] == "mark", "name"]) if len(nv) else set()
    return [end for end, mark in zip(("first", "last"), MARKS) if mark not in marks]


def magic_folder() -> Path:
    """Where ``%%nsys`` writes: ``$LABKIT_REPORTS/magic``, else ``reports/magic`` of the project labkit is
    installed from (the lab's reports folder), else of the working folder."""
    root = project_root()
    return reports_dir(root / "reports" if root else "reports") / "magic"


def summary_lines(report, findings) -> list[str]:
    """What a recorded cell shows in words: its report and length, then its top findings, one line each.

    Args:
        report: the cell's :class:`labkit.report.Report`.
        findings: ``labkit.advise(report)``'s frame (or a LabkitError it raised).
    """
    m = report.meta
    span = (m.get("duration_ns") or 0) / 1e6
    nv = report.nvtx
    ranges = int((nv["kind"] != "mark").sum()) if len(nv) and "kind" in nv else len(nv)
    head = (f"%%nsys: {span:,.0f} ms recorded in {report.path} ({ranges:,} NVTX ranges, {len(report.kernels):,} "
            f"kernels, {len(report.osrt):,} OS runtime calls)")
    if isinstance(findings, Exception):
        return [head, f"findings: none ({findings})"]
    if findings.empty:
        note = str(findings.attrs.get("note") or "no rule applies").split("; ")[0]  # the rest names the window
        return [head, f"findings: none ({note})"]
    shown = findings.head(SHOWN_FINDINGS)
    lines = [head, f"findings ({len(findings)}; labkit.advise(report) has each one's evidence and assumptions):"]
    for i, r in enumerate(shown.itertuples(), 1):
        kind = "an upper bound" if r.basis == "bound" else "an estimate"
        lines.append(f"  {i}. {r.finding}: {r.lever} ({r.lever_text}), {r.predicted_speedup:.2f}x, {kind}")
    return lines


def _timeline_png(report) -> bytes | None:
    """The report's timeline as PNG bytes (drawn off-screen, whatever the kernel's matplotlib backend);
    None where it holds nothing to draw."""
    from labkit.show.layout import NothingToDraw
    from labkit.show.timeline import plot_timeline

    try:
        fig = plot_timeline(report)
    except NothingToDraw:
        return None
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


@magics_class
class NsysMagics(Magics):
    """``%%nsys [--name NAME] [--outdir DIR] [--var VAR] [--no-timeline]``: record this cell."""

    def __init__(self, shell, findings: Callable):
        super().__init__(shell)
        self._findings = findings

    @magic_arguments()
    @argument("--name", default=None, help="report name (default cellN); NAME-2, NAME-3... where it is taken")
    @argument("--outdir", default=None, help="folder of the report (default $LABKIT_REPORTS/magic)")
    @argument("--var", default=None, help="also keep the loaded report in this variable (None where not recorded)")
    @argument("--no-timeline", action="store_true", help="show the findings only")
    @cell_magic
    def nsys(self, line, cell):
        """Record this cell with Nsight Systems (the kernel "Python (labkit nsys)"); show its timeline and
        findings; return its :class:`labkit.report.Report`."""
        from IPython.display import Image, display

        from labkit.report.load import load_report

        args = parse_argstring(self.nsys, line)
        name = args.name if args.name is not None else f"cell{self.shell.execution_count}"
        ran = None
        if args.var:
            self.shell.user_ns[args.var] = None  # until this cell's report is loaded: never an older one
        try:
            with recording(Path(args.outdir) if args.outdir else magic_folder(), name) as path:
                annotate.mark(MARKS[0])
                ran = self.shell.run_cell(cell)
                annotate.mark(MARKS[1])
        except LabkitError as exc:
            if ran is None:  # refused before the cell ran: run it anyway, unrecorded
                print(f"%%nsys: not recorded: {exc}; the cell ran without a profile.")
                self.shell.run_cell(cell)
            else:
                print(f"%%nsys: {exc}")
            return None
        try:
            report = load_report(path)
        except LabkitError as exc:
            print(f"%%nsys: recorded {path}, but it cannot be read: {exc}")
            return None
        if args.var:
            self.shell.user_ns[args.var] = report
        if not args.no_timeline:
            png = _timeline_png(report)
            if png:
                display(Image(data=png))
        try:
            findings = self._findings(report)
        except LabkitError as exc:
            findings = exc
        print("\n".join(summary_lines(report, findings)))
        for end in missing_ends(report):
            print(f"%%nsys: this report lacks the cell's {end} part (nsys, on a loaded machine, "
                  f"{'began recording after the cell had started' if end == 'first' else 'stopped before its last events reached it'}): "
                  f"run the cell again for a whole one.")
        if not ran.success:
            print(f"%%nsys: the cell raised {type(ran.error_in_exec or ran.error_before_exec).__name__}: "
                  f"the report covers it up to there.")
        return report
