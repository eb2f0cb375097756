"""Relative speed-up tables from results ledgers: one row per step, one column per machine.

    from labkit import speedup_table
    t = speedup_table("reports/")          # every ledger.jsonl under reports/, recursively
    t.frame                                # numbers, index = step
    print(t.to_markdown())

Command line: ``python -m labkit table [PATH] [--metric fps] [--baseline baseline] [--exercises]
[--provenance]``; the class view (every participant's ledger in one folder, one column per host):
``python -m labkit table --class DIR`` or :func:`class_view`.

Rendering (:mod:`labkit.bench.table_view`): short headers with the machine(s) and mode(s) in a caption
(small mode: "a rehearsal"), spreads as ``±`` (from the rows' ``fps_ci_low``/``fps_ci_high``),
"(too short)" and "above decode ceiling" notes; a styled HTML table in JupyterLab.

Rules:

- Steps keep the order in which they first appear (ledger files in sorted path order, lines in
  file order); machines likewise, unless ``machines=`` names them.
- When a step ran several times on one machine, the **latest** row that has the metric counts:
  the one appended last (file order; a row's ``time`` is not trusted: a clock set ahead would pin
  a stale figure). Earlier rows stay in the ledger for history.
- Rows whose ``status`` is ``"flagged"`` (bench flags runs whose results file was not ok) are
  left out with a :class:`SpeedupWarning`, except those flagged only for lying above the decode
  ceiling (``above_decode_ceiling``): they stay, with "above decode ceiling" for a speed-up (NaN); ``"skipped"`` and ``"failed"`` rows (steps that did
  not run; they carry no figures) are left out quietly; rows without a status count.
- Rows of ``kind`` ``"exercise"`` are left out unless ``exercises=True``.
- Where rows say what each step builds on (``builds_on``, or the ``builds_on=`` mapping), the
  table gains a ``kind`` and a ``builds_on`` column and, per machine, the speed-up over that
  step (``over builds_on (<machine>)``); rows are grouped: each step, then the alternatives,
  sweep values and steps built on it that are not on the main path.
- Speed-up is ``metric / baseline`` for throughput (``fps``) and ``baseline / metric`` for
  metrics where lower is better (names containing ``latency`` or ending in ``_ms``), so a
  speed-up above 1 is always an improvement.
- A machine without the baseline step gets NaN speed-ups and a :class:`SpeedupWarning`; if no
  machine has it, :class:`SpeedupTableError` is raised.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from labkit.env import LEDGER_NAME
from labkit.errors import LabkitError
from labkit.bench.ledger import Ledger, frame_of

__all__ = ["speedup_table", "class_view", "SpeedupTable", "SpeedupTableError", "SpeedupWarning", "load_ledgers",
           "ACCURACY_METRICS", "lower_is_better", "latest_rows", "compare"]

ACCURACY_METRICS = ("map50", "mota")
"""Accuracy columns carried into the table when the ledger has them."""


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
        The rows as :meth:`labkit.bench.ledger.Ledger.read` gives them (``ledger`` names each file).
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
        steps: index ``step``, columns ``kind`` and ``builds_on`` (None where unknown); empty
            columns when no row says what it builds on. ``builds_on`` is what every machine's
            rows agree on; where machines' rows of a step name different steps it is None and
            ``builds_on (<machine>)`` columns say each machine's own (one machine's step never
            builds on another machine's).
        over_builds_on: index ``step``, one float column per machine: the metric's speed-up
            over the step it builds on in that machine's own rows (NaN where that step is unknown
            or did not run there).
        low, high: index ``step``, one column per machine: the speed-up's 95 % interval, from
            the rows' ``fps_ci_low``/``fps_ci_high`` (the step's low over the baseline's high, and
            the reverse); NaN where a row has no interval.
        notes: index ``step``, one column per machine: ``"too short"`` (the run was too short to
            measure throughput), ``"above decode ceiling"`` (never shown as a speed-up), or "".
        caption: what every rendering says above the table: the machine(s), the mode(s), and
            small mode's "rehearsal" line (see :mod:`labkit.bench.table_view`).
    """

    speedup: pd.DataFrame
    values: pd.DataFrame
    accuracy: pd.DataFrame
    metric: str
    baseline: str
    rows: pd.DataFrame = field(repr=False)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    over_builds_on: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    low: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    high: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    notes: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    caption: str = ""

    @property
    def machines(self) -> list[str]:
        return list(self.speedup.columns)

    @property
    def own_builds_on(self) -> list[str]:
        """The ``builds_on (<machine>)`` columns of :attr:`steps` (none unless the machines disagree)."""
        return [c for c in self.steps.columns if c.startswith("builds_on (")]

    @property
    def has_builds_on(self) -> bool:
        cols = [c for c in ("builds_on", *self.own_builds_on) if c in self.steps.columns]
        return bool(cols) and bool(self.steps[cols].notna().any().any())

    def builds_on_of(self, machine: str | None = None) -> pd.Series:
        """Index ``step``: the step each one builds on in ``machine``'s own rows (its
        ``builds_on (<machine>)`` column where the machines disagree, else ``builds_on``); None
        where unknown. ``machine`` defaults to the first."""
        machine = machine or (self.machines[0] if self.machines else None)
        if "builds_on" not in self.steps.columns:
            return pd.Series(None, index=self.speedup.index, dtype=object)
        return _builds_on_in(self.steps, machine)

    @property
    def frame(self) -> pd.DataFrame:
        """All numbers in one frame, index ``step``: ``kind`` and ``builds_on`` (when known),
        ``speed-up (<machine>)`` columns, ``over builds_on (<machine>)`` (when known), then
        ``<metric> (<machine>)``, then the accuracy columns."""
        sp = self.speedup.rename(columns=lambda m: f"speed-up ({m})")
        val = self.values.rename(columns=lambda m: f"{self.metric} ({m})")
        if not self.has_builds_on:
            return pd.concat([sp, val, self.accuracy], axis=1)
        over = self.over_builds_on.rename(columns=lambda m: f"over builds_on ({m})")
        return pd.concat([self.steps[["kind", "builds_on", *self.own_builds_on]], sp, over, val, self.accuracy],
                         axis=1)

    def provenance(self) -> pd.DataFrame:
        """Index ``step``, one column per machine: the commit each figure ran on (12 hex digits,
        ``+dirty`` when the tree had uncommitted changes) and its mode."""
        from labkit.bench.table_view import provenance_frame

        return provenance_frame(self)

    def display_frame(self, *, provenance: bool = False) -> pd.DataFrame:
        """The table as text cells, with short headers (one machine: ``speed-up``, ``fps``; more:
        a header row per machine), spreads as ``±`` and notes; see :mod:`labkit.bench.table_view`."""
        from labkit.bench.table_view import display_frame

        return display_frame(self, provenance=provenance)

    def to_markdown(self, *, provenance: bool = False) -> str:
        """The table as markdown under its caption: speed-ups as ``2.41x ±0.12``, missing as ``—``."""
        from labkit.bench.table_view import to_markdown

        return to_markdown(self, provenance=provenance)

    def styled(self, *, provenance: bool = False):
        """A pandas Styler of :meth:`display_frame`, captioned, for JupyterLab."""
        from labkit.bench.table_view import styled

        return styled(self, provenance=provenance)

    def _repr_html_(self) -> str:
        return self.styled().to_html()

    def __str__(self) -> str:
        return self.to_markdown()


def latest_rows(df: pd.DataFrame, steps: Sequence[str] | None = None) -> pd.DataFrame:
    """The latest row per (machine, step) of a ledger frame, in the frame's order, or in the
    order of ``steps`` (only those kept) when given.

    Latest means appended last: the frame's row order (ledger files in path order, lines in file
    order), never the rows' ``time``, which another machine's clock wrote.
    """
    keys = ["machine", "step"] if "machine" in df.columns else ["step"]
    order = df.assign(_pos=range(len(df)))
    out = order.groupby(keys, sort=False).tail(1).sort_values("_pos").drop(columns="_pos")
    if steps is None:
        return out
    rank = {s: i for i, s in enumerate(dict.fromkeys(steps))}
    out = out[out["step"].isin(list(rank))]
    return out.iloc[out["step"].map(rank).argsort(kind="stable")]


def compare(new, old, *, metric: str = "fps") -> str:
    """One sentence: ``metric`` of ledger row ``new`` against ``old``, the ratio, and the noise.

    Args:
        new, old: ledger rows (dicts or Series, as from :func:`latest_rows`) with ``step``,
            ``metric``, and optionally ``spread``, ``repeats``, ``status`` and ``reason``.
    Returns:
        ``"'b': 25.00 frames/s against 10.00 for 'a': 2.50x (150% faster); ..."``, or
        ``"No comparison: ..."`` naming the row that has no figure and why.
    """
    if new.get("above_decode_ceiling") is True:
        return (f"No comparison: step '{new.get('step')}' measured {float(new['fps']):.2f} frames/s, above what "
                f"decoding alone reaches here ({float(new.get('decode_ceiling_fps')):.2f}): the figure counts work "
                "done outside its window, not a speed-up.")
    for row in (new, old):
        status, value = row.get("status"), row.get(metric)
        if (isinstance(status, str) and status != "ok") or value is None or pd.isna(value):
            why = row.get("reason") if isinstance(row.get("reason"), str) else f"it has no {metric}"
            verb = {"skipped": "was not run here", "failed": "failed here"}.get(status, "has no figure")
            return f"No comparison: step '{row.get('step')}' {verb}: {why}."
    unit = "frames/s" if metric == "fps" else metric
    ratio = float(new[metric]) / float(old[metric])
    if lower_is_better(metric):
        ratio = 1 / ratio
    word = "the same" if round(ratio, 2) == 1 else "faster" if ratio > 1 else "slower"
    n = new.get("repeats")
    n = int(n) if n is not None and not pd.isna(n) else 1
    spread = new.get("spread")
    noise = (f"run-to-run spread of '{new['step']}' {spread:.0%} over {n} runs" if n > 1 and spread is not None
             else "one measured run each, so no spread to judge the noise by")
    ci = _ratio_interval(new, old) if metric == "fps" else None
    if ci is not None:
        verdict = "within noise" if ci[0] <= 1.0 <= ci[1] else "outside the noise"
        noise = f"95 % interval {ci[0]:.2f}x to {ci[1]:.2f}x: {verdict}"
        if ci[0] <= 1.0 <= ci[1]:
            word = "the same"
    change = word if word == "the same" else f"{abs(ratio - 1):.0%} {word}"
    short = [r.get("step") for r in (new, old) if r.get("too_short") is True]
    tail = f"; '{short[0]}' was too short to measure throughput" if short else ""
    return (f"'{new['step']}': {float(new[metric]):.2f} {unit} against {float(old[metric]):.2f} for "
            f"'{old['step']}': {ratio:.2f}x ({change}); {noise}{tail}.")


def _ratio_interval(new, old) -> tuple[float, float] | None:
    """The speed-up's 95 % interval from both rows' ``fps_ci_low``/``fps_ci_high``, or None."""
    vals = [new.get("fps_ci_low"), new.get("fps_ci_high"), old.get("fps_ci_low"), old.get("fps_ci_high")]
    if any(v is None or pd.isna(v) or (isinstance(v, (int, float)) and v <= 0) for v in vals):
        return None
    return float(vals[0]) / float(vals[3]), float(vals[1]) / float(vals[2])


def _step_info(latest: pd.DataFrame, steps: list[str], builds_on: Mapping[str, str] | None) -> pd.DataFrame:
    """Index ``step``: ``kind`` and ``builds_on`` from the rows (latest non-null), ``builds_on=`` first."""
    info = pd.DataFrame(index=pd.Index(steps, name="step"), columns=["kind", "builds_on"], dtype=object)
    for col in ("kind", "builds_on"):
        if col in latest.columns:
            known = latest.dropna(subset=[col]).groupby("step", sort=False)[col].last()
            info[col] = known.reindex(steps).astype(object)
    for step, base in (builds_on or {}).items():
        if step in info.index:
            info.loc[step, "builds_on"] = base
    return info.where(info.notna(), None)


def _machine_builds_on(latest: pd.DataFrame, steps: list[str], machines: Sequence[str],
                       builds_on: Mapping[str, str] | None) -> pd.DataFrame:
    """:func:`_step_info` over every machine's rows: where the rows of the machines that ran a step
    disagree on what it builds on (another step, or none named), ``builds_on`` is None and
    ``builds_on (<machine>)`` columns say each machine's own, one per machine."""
    info = _step_info(latest, steps, builds_on)
    own = {m: _step_info(latest[latest["machine"] == m], steps, builds_on)["builds_on"] for m in machines}
    ran = {m: set(latest.loc[latest["machine"] == m, "step"]) for m in machines}
    # a step whose machines say different things (one names a step, another names none or another)
    differ = [s for s in steps if len({own[m][s] for m in machines if s in ran[m]}) > 1]
    if differ:
        info.loc[differ, "builds_on"] = None
        for m in machines:
            info[f"builds_on ({m})"] = own[m]
    return info.where(info.notna(), None)


def _builds_on_in(info: pd.DataFrame, machine: str) -> pd.Series:
    """The step each step builds on in ``machine``'s rows: its own column of ``info`` where the
    machines disagree (:func:`_machine_builds_on`), else the common ``builds_on``."""
    own = f"builds_on ({machine})"
    return info[own] if own in info.columns else info["builds_on"]


def _grouped(steps: list[str], info: pd.DataFrame) -> list[str]:
    """Steps on the main path (cumulative, or kind unknown) in order, each followed by the
    alternatives and sweep values built on it, recursively."""
    children: dict[str, list[str]] = {}
    roots = []
    for s in steps:
        base, kind = info.loc[s, "builds_on"], info.loc[s, "kind"]
        if kind in ("alternative", "sweep") and base in info.index and base != s:
            children.setdefault(base, []).append(s)
        else:
            roots.append(s)
    out: list[str] = []

    def visit(s: str) -> None:
        if s not in out:
            out.append(s)
            for c in children.get(s, []):
                visit(c)

    for s in roots:
        visit(s)
    return out + [s for s in steps if s not in out]


def speedup_table(source, *, baseline: str = "baseline", metric: str = "fps",
                  machines: Sequence[str] | None = None, exercises: bool = False,
                  builds_on: Mapping[str, str] | None = None) -> SpeedupTable:
    """Relative speed-up of every step over ``baseline``, per machine (see the module rules).

    Args:
        source: a ledger file, a folder searched for ``ledger.jsonl`` files, or a ledger frame
            (as from :meth:`labkit.Ledger.read`, with ``step``, ``machine``, ``time`` and the metric).
        baseline: the step everything is compared with.
        metric: a ledger metric column: ``fps`` (default), ``latency_p50_ms``, ...
        machines: machine labels to show, in this order (default: all, in first-seen order).
        exercises: keep rows of ``kind`` ``"exercise"`` (left out by default).
        builds_on: step -> the step it builds on, for ledgers whose rows predate ``builds_on``
            (it wins over the rows' own field).
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
    if "kind" in df.columns and not exercises:
        df = df[df["kind"] != "exercise"]
    if "status" in df.columns:
        ceiling = df["above_decode_ceiling"].fillna(False).astype(bool) if "above_decode_ceiling" in df.columns \
            else pd.Series(False, index=df.index)
        df = df.assign(status=df["status"].where(~ceiling, "ok"))  # kept: shown as above the ceiling
        bad = df["status"] == "flagged"
        if bad.any():
            where = ", ".join(f"{r.step} on {r.machine}" for r in df[bad].itertuples())
            warnings.warn(f"{int(bad.sum())} flagged ledger row(s) left out ({where})", SpeedupWarning, stacklevel=2)
        df = df[df["status"].isna() | (df["status"] == "ok")]
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
    info = _machine_builds_on(latest, steps, machines, builds_on)
    steps = _grouped(steps, info) if info["builds_on"].notna().any() else steps
    info = info.reindex(steps)
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
        elif base[m] <= 0:
            warnings.warn(f"machine {m!r}: {baseline!r} has {metric} {base[m]:g}, nothing to divide by: its "
                          f"speed-up column is NaN", SpeedupWarning, stacklevel=2)
    # a ratio needs a positive figure on both sides: 0 fps (a run that timed nothing) divides by zero
    positive = values.where(values > 0)
    base = positive.loc[baseline]
    speedup = (base / positive) if lower_is_better(metric) else (positive / base)
    acc_cols = {}
    for acc in ACCURACY_METRICS:
        if acc in latest.columns and latest[acc].notna().any():
            piv = latest.pivot(index="step", columns="machine", values=acc).reindex(index=steps, columns=machines)
            for m in machines:
                acc_cols[f"{acc} ({m})"] = piv[m].astype(float)
    accuracy = pd.DataFrame(acc_cols, index=pd.Index(steps, name="step"))
    base_of = pd.DataFrame({m: positive[m].reindex(_builds_on_in(info, m).tolist()).set_axis(values.index)
                            for m in machines}, index=values.index, columns=values.columns)
    over = (base_of / positive) if lower_is_better(metric) else (positive / base_of)
    values.index.name = speedup.index.name = over.index.name = "step"
    from labkit.bench.table_view import caption_of, intervals

    low, high, notes = intervals(latest, steps, machines, baseline, metric)
    speedup = speedup.where(notes != "above decode ceiling")  # never a speed-up
    over = over.where(notes != "above decode ceiling")
    return SpeedupTable(speedup=speedup, values=values, accuracy=accuracy, metric=metric, baseline=baseline,
                        rows=latest.reset_index(drop=True), steps=info, over_builds_on=over, low=low, high=high,
                        notes=notes, caption=caption_of(latest, machines))


def class_view(folder, *, metric: str = "fps", baseline: str = "baseline", exercises: bool = False) -> SpeedupTable:
    """The class's speed-up table: every ``*.jsonl`` ledger under ``folder`` (one per participant,
    e.g. ``class/alice.jsonl`` or ``class/alice/ledger.jsonl``), one column per host (the row's
    ``env.host``; a host name two ledgers share gets the ledger's name after it).

    Raises:
        SpeedupTableError: the folder does not exist or holds no ledger row.
    """
    from labkit.bench.table_view import class_frame

    root = Path(folder)
    if not root.is_dir():
        raise SpeedupTableError(f"{root} is not a folder: give the shared folder the participants copy their "
                                "reports/ledger.jsonl into (one file or sub-folder each)")
    files = sorted(root.rglob("*.jsonl"), key=str)
    df = class_frame(root, files)
    if df.empty:
        raise SpeedupTableError(f"no ledger row in a *.jsonl under {root}: ask each participant to copy "
                                "reports/ledger.jsonl there as <name>.jsonl")
    return speedup_table(df, metric=metric, baseline=baseline, exercises=exercises)
