"""Relative speed-up tables from results ledgers: one row per step, one column per machine.

    from labkit import speedup_table
    t = speedup_table("reports/")          # every ledger.jsonl under reports/, recursively
    t.frame                                # numbers, index = step
    print(t.to_markdown())

Command line: ``python -m labkit table [PATH] [--metric fps] [--baseline baseline]``.

Rules:

- Steps keep the order in which they first appear (ledger files in sorted path order, lines in
  file order); machines likewise, unless ``machines=`` names them.
- When a step ran several times on one machine, the **latest** row that has the metric counts:
  greatest ``time``, ties going to the later line. Earlier rows stay in the ledger for history.
- Rows whose ``status`` is not ``"ok"`` (bench flags runs whose results file was not ok) are
  left out with a :class:`SpeedupWarning`; rows without a status count.
- Speed-up is ``metric / baseline`` for throughput (``fps``) and ``baseline / metric`` for
  metrics where lower is better (names containing ``latency`` or ending in ``_ms``), so a
  speed-up above 1 is always an improvement.
- A machine without the baseline step gets NaN speed-ups and a :class:`SpeedupWarning`; if no
  machine has it, :class:`SpeedupTableError` is raised.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from labkit.env import reports_dir
from labkit.errors import LabkitError
from labkit.ledger import Ledger, frame_of

__all__ = ["speedup_table", "SpeedupTable", "SpeedupTableError", "SpeedupWarning", "load_ledgers",
           "ACCURACY_METRICS", "lower_is_better", "latest_rows", "cli_table"]

ACCURACY_METRICS = ("map50", "mota")
"""Accuracy columns carried into the table when the ledger has them."""

LEDGER_NAME = "ledger.jsonl"


class SpeedupTableError(LabkitError):
    """The table cannot be built (no ledger, no such metric, no baseline anywhere)."""


class SpeedupWarning(UserWarning):
    """Part of the table is missing (a machine without the baseline step)."""


def lower_is_better(metric: str) -> bool:
    """True for latency-like metrics (``latency_*``, ``*_ms``), where the speed-up is inverted."""
    return "latency" in metric or metric.endswith("_ms")


def load_ledgers(source: str | os.PathLike | pd.DataFrame) -> pd.DataFrame:
    """One DataFrame of ledger rows from a ledger file, a folder of them, or a frame.

    A folder is searched recursively for ``ledger.jsonl`` files (e.g. ``reports/ledger.jsonl``
    and ``reports/reference/h100/ledger.jsonl``), read in sorted path order.

    Returns:
        The rows as :meth:`labkit.ledger.Ledger.read` gives them (``ledger`` names each file).
    Raises:
        SpeedupTableError: the path does not exist or the folder holds no ledger.
    """
    if isinstance(source, pd.DataFrame):
        return source.reset_index(drop=True)
    path = Path(source)
    if path.is_dir():
        files = sorted(path.rglob(LEDGER_NAME), key=lambda p: str(p))
        if not files:
            raise SpeedupTableError(f"no {LEDGER_NAME} under {path}: run a benchmark with "
                                    f"labkit.bench.run(..., ledger='{path / LEDGER_NAME}') first")
    elif path.exists():
        files = [path]
    else:
        raise SpeedupTableError(f"{path} does not exist: pass a ledger file or a folder holding {LEDGER_NAME} files")
    rows = [row for f in files for row in Ledger(f).rows()]
    return frame_of(rows)


@dataclass(frozen=True)
class SpeedupTable:
    """Speed-up of each step over the baseline, per machine.

    Attributes:
        speedup: index ``step``, one float column per machine (1.0 for the baseline).
        values: index ``step``, one column per machine: the absolute metric (e.g. frames/s).
        accuracy: index ``step``, columns ``"<acc> (<machine>)"`` for acc in :data:`ACCURACY_METRICS`
            present in the ledger.
        metric, baseline: what was compared.
        rows: the ledger rows used (the latest per step and machine).
    """

    speedup: pd.DataFrame
    values: pd.DataFrame
    accuracy: pd.DataFrame
    metric: str
    baseline: str
    rows: pd.DataFrame = field(repr=False)

    @property
    def machines(self) -> list[str]:
        return list(self.speedup.columns)

    @property
    def frame(self) -> pd.DataFrame:
        """All numbers in one frame, index ``step``: ``speed-up (<machine>)`` columns first,
        then ``<metric> (<machine>)``, then the accuracy columns."""
        sp = self.speedup.rename(columns=lambda m: f"speed-up ({m})")
        val = self.values.rename(columns=lambda m: f"{self.metric} ({m})")
        return pd.concat([sp, val, self.accuracy], axis=1)

    def _formatted(self) -> pd.DataFrame:
        frame = self.frame
        out = pd.DataFrame(index=frame.index)
        for col in frame.columns:
            spec = "{:.2f}x" if col.startswith("speed-up") else "{:.3f}" if col in self.accuracy.columns else "{:.1f}"
            out[col] = ["—" if pd.isna(v) else spec.format(v) for v in frame[col]]
        return out

    def to_markdown(self) -> str:
        """The table as markdown (tabulate "pipe": alignment kept), speed-ups as ``2.41x``, missing as ``—``."""
        from tabulate import tabulate

        f = self._formatted()
        return tabulate(f.reset_index().values.tolist(), headers=["step", *f.columns], tablefmt="pipe",
                        disable_numparse=True, colalign=("left", *["right"] * len(f.columns)))

    def _repr_html_(self) -> str:
        return self._formatted().to_html()

    def __str__(self) -> str:
        return self.to_markdown()


def latest_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The latest row per (machine, step) of a ledger frame, in the frame's order.

    Latest means greatest ``time``, ties going to the later row; a frame without ``time``
    (or ``machine``) uses row order (one machine).
    """
    keys = ["machine", "step"] if "machine" in df.columns else ["step"]
    order = df.assign(_pos=range(len(df)))
    by = (["time"] if "time" in df.columns else []) + ["_pos"]
    order = order.sort_values(by, kind="stable", na_position="first")
    return order.groupby(keys, sort=False).tail(1).sort_values("_pos").drop(columns="_pos")


def speedup_table(source, *, baseline: str = "baseline", metric: str = "fps",
                  machines: Sequence[str] | None = None) -> SpeedupTable:
    """Relative speed-up of every step over ``baseline``, per machine (see the module rules).

    Args:
        source: a ledger file, a folder searched for ``ledger.jsonl`` files, or a ledger frame
            (as from :meth:`labkit.Ledger.read`, with ``step``, ``machine``, ``time`` and the metric).
        baseline: the step everything is compared with.
        metric: a ledger metric column: ``fps`` (default), ``latency_p50_ms``, ...
        machines: machine labels to show, in this order (default: all, in first-seen order).
    Returns:
        :class:`SpeedupTable`; ``.frame`` has index ``step`` and columns ``speed-up (<m>)``,
        ``<metric> (<m>)`` per machine, then ``map50 (<m>)``/``mota (<m>)`` where present.
    Raises:
        SpeedupTableError: no rows, unknown metric or machine, or no machine ran the baseline.
    """
    df = load_ledgers(source)
    if df.empty:
        raise SpeedupTableError("the ledger is empty: run a benchmark into it first")
    missing = {"step", "machine", metric} - set(df.columns)
    if missing:
        known = sorted(c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and c not in {"schema", "line"})
        raise SpeedupTableError(f"ledger has no column(s) {sorted(missing)}; numeric columns there: {known}")
    if "status" in df.columns:
        bad = df["status"].notna() & (df["status"] != "ok")
        if bad.any():
            where = ", ".join(f"{r.step} on {r.machine}" for r in df[bad].itertuples())
            warnings.warn(f"{int(bad.sum())} flagged ledger row(s) left out ({where})", SpeedupWarning, stacklevel=2)
            df = df[~bad]
    df = df[df[metric].notna()]
    if df.empty:
        raise SpeedupTableError(f"no ledger row has a value for {metric!r}")
    seen = list(dict.fromkeys(df["machine"]))
    if machines is None:
        machines = seen
    else:
        machines = list(machines)
        unknown = [m for m in machines if m not in seen]
        if unknown:
            raise SpeedupTableError(f"machine(s) {unknown} not in the ledger; machines there: {seen}")
        df = df[df["machine"].isin(machines)]
    latest = latest_rows(df)
    steps = list(dict.fromkeys(df["step"]))  # first-seen order
    values = latest.pivot(index="step", columns="machine", values=metric).reindex(index=steps, columns=machines)
    values = values.astype(float)
    values.columns.name = None
    if baseline not in values.index or values.loc[baseline].isna().all():
        raise SpeedupTableError(f"no machine has a {metric!r} row for baseline step {baseline!r}; steps in the "
                                f"ledger: {steps}. Run the baseline first, or pass baseline= one of those")
    base = values.loc[baseline]
    for m in machines:
        if pd.isna(base[m]):
            warnings.warn(f"machine {m!r} has no {baseline!r} row: its speed-up column is NaN", SpeedupWarning,
                          stacklevel=2)
    speedup = (base / values) if lower_is_better(metric) else (values / base)
    acc_cols = {}
    for acc in ACCURACY_METRICS:
        if acc in latest.columns and latest[acc].notna().any():
            piv = latest.pivot(index="step", columns="machine", values=acc).reindex(index=steps, columns=machines)
            for m in machines:
                acc_cols[f"{acc} ({m})"] = piv[m].astype(float)
    accuracy = pd.DataFrame(acc_cols, index=pd.Index(steps, name="step"))
    values.index.name = speedup.index.name = "step"
    return SpeedupTable(speedup=speedup, values=values, accuracy=accuracy, metric=metric, baseline=baseline,
                        rows=latest.reset_index(drop=True))


def cli_table(argv: list[str]) -> int:
    """``python -m labkit table [PATH] [--metric fps] [--baseline baseline] [--machine M] [--output FILE]``."""
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
    args = p.parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            table = speedup_table(args.path, baseline=args.baseline, metric=args.metric, machines=args.machines)
    except SpeedupTableError as exc:
        print(f"labkit table: {exc}", file=sys.stderr)
        return 1
    for w in caught:
        print(f"labkit table: warning: {w.message}", file=sys.stderr)
    text = table.to_markdown()
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    return 0
