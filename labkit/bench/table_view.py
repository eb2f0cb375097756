"""How a speed-up table reads: spreads as ±, short headers, a caption, notes; and the class view.

A :class:`labkit.bench.tables.SpeedupTable` renders as markdown (:func:`to_markdown`) or as a styled
HTML table in JupyterLab (:func:`styled`, its ``_repr_html_``). Headers are short (``speed-up``,
``fps``, ``map50``); the machine goes in the caption (one machine) or in a header row above its
columns (several; in markdown, ``[1]``, ``[2]``... named in the caption). Every figure with an
interval shows it as ``±`` half its width (the wider side: intervals need not be symmetric).

The caption names the machine(s), the mode(s) of the rows (``provenance.mode``) and, for a mode
in :data:`MODE_NOTES`, what it is (small mode: a rehearsal). A step whose frames/s lies above the
decode-only ceiling (``above_decode_ceiling``) reads "above decode ceiling" where its speed-up
would be; a run too short to measure throughput (``too_short``) carries "(too short)".

The class view (:func:`class_frame`, used by :func:`labkit.bench.tables.class_view` and ``python -m
labkit table --class DIR``): every participant's ledger from one shared folder, one column per host
(not per machine model: 30 identical VMs stay 30 columns).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

MODE_NOTES = {"small": "small mode is a rehearsal (short runs, one each): not a measurement to quote"}
"""Modes (``LABKIT_MODE``, a row's ``provenance.mode``) whose tables must say what they are."""
ABOVE = "above decode ceiling"
SHORT = "too short"


def _num(v) -> bool:
    return v is not None and not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _pivot(latest: pd.DataFrame, col: str, steps, machines) -> pd.DataFrame:
    if col not in latest.columns:
        return pd.DataFrame(index=pd.Index(steps, name="step"), columns=list(machines), dtype=object)
    p = latest.pivot(index="step", columns="machine", values=col).reindex(index=steps, columns=machines)
    p.columns.name = None
    p.index.name = "step"
    return p


def intervals(latest: pd.DataFrame, steps, machines, baseline: str, metric: str):
    """(low, high, notes) of a speed-up table: the speed-up's 95 % interval per step and machine
    (fps only: the step's ``fps_ci_low`` over the baseline's ``fps_ci_high``, and the reverse), and
    each cell's note (``"too short"``, ``"above decode ceiling"`` or "")."""
    lo, hi = _pivot(latest, "fps_ci_low", steps, machines), _pivot(latest, "fps_ci_high", steps, machines)
    lo, hi = lo.apply(pd.to_numeric, errors="coerce"), hi.apply(pd.to_numeric, errors="coerce")
    if metric == "fps" and baseline in lo.index:
        low, high = lo / hi.loc[baseline], hi / lo.loc[baseline]
    else:
        low = high = pd.DataFrame(float("nan"), index=lo.index, columns=lo.columns)
    short = _pivot(latest, "too_short", steps, machines).map(lambda v: v is True)
    above = _pivot(latest, "above_decode_ceiling", steps, machines).map(lambda v: v is True)
    notes = pd.DataFrame("", index=lo.index, columns=lo.columns)
    notes = notes.mask(short, SHORT).mask(above, ABOVE)
    return low, high, notes


def caption_of(latest: pd.DataFrame, machines: Sequence[str], quote=str) -> str:
    """The machine(s), the mode(s) and what a mode is, as one or two sentences; ``quote`` makes
    the names from the ledger safe for where the caption goes (:mod:`labkit.safe_text`)."""
    if len(machines) == 1:
        where = f"Machine: {quote(machines[0])}."
    else:
        where = "Machines: " + ", ".join(f"[{i}] {quote(m)}" for i, m in enumerate(machines, 1)) + "."
    modes = [m for m in dict.fromkeys(latest.get("provenance.mode", pd.Series(dtype=object)).dropna())]
    parts = [where]
    if modes:
        parts.append(f"Mode: {', '.join(map(quote, modes))}.")
    parts += [MODE_NOTES[m][0].upper() + MODE_NOTES[m][1:] + "." for m in modes if m in MODE_NOTES]
    return " ".join(parts)


def provenance_frame(table) -> pd.DataFrame:
    """Index ``step``, one column per machine: ``<commit[:12]>[+dirty]`` (``—`` where unknown)."""
    rows, steps, machines = table.rows, list(table.speedup.index), table.machines
    commit, dirty = _pivot(rows, "provenance.commit", steps, machines), _pivot(rows, "provenance.dirty", steps, machines)
    out = pd.DataFrame("—", index=commit.index, columns=commit.columns)
    for s in steps:
        for m in machines:
            c = commit.loc[s, m]
            if isinstance(c, str) and c:
                out.loc[s, m] = c[:12] + ("+dirty" if dirty.loc[s, m] is True else "")
    return out


def _pm(value: float, low: float, high: float, spec: str) -> str:
    half = max(high - value, value - low) if _num(low) and _num(high) else float("nan")
    return spec.format(value) + (" ±" + spec.format(half) if _num(half) else "")


def _cells(table, m: str, provenance: bool) -> dict[str, list[str]]:
    """The text columns of machine ``m``: speed-up, over builds_on, the metric, accuracy, commit."""
    cols: dict[str, list[str]] = {}
    steps = list(table.speedup.index)
    sp, lo, hi = table.speedup[m], table.low.get(m), table.high.get(m)
    notes = table.notes[m] if m in table.notes else pd.Series("", index=sp.index)
    speed = []
    for s in steps:
        if notes[s] == ABOVE:
            speed.append(ABOVE)
            continue
        v = sp[s]
        if pd.isna(v):
            speed.append("—")
            continue
        text = _pm(v, lo[s] if lo is not None else None, hi[s] if hi is not None else None, "{:.2f}")
        speed.append(text.replace(" ±", "x ±", 1) if "±" in text else text + "x")
        speed[-1] += f" ({SHORT})" if notes[s] == SHORT else ""
    cols["speed-up"] = speed
    if table.has_builds_on:
        ov = table.over_builds_on[m]
        cols["over builds_on"] = ["—" if pd.isna(ov[s]) or notes[s] == ABOVE else f"{ov[s]:.2f}x" for s in steps]
    val = table.values[m]
    r = table.rows[table.rows["machine"] == m].set_index("step") if len(table.rows) else pd.DataFrame()
    vals = []
    for s in steps:
        v = val[s]
        if pd.isna(v):
            vals.append("—")
        elif table.metric == "fps" and s in r.index and {"fps_ci_low", "fps_ci_high"} <= set(r.columns):
            vals.append(_pm(v, r.loc[s, "fps_ci_low"], r.loc[s, "fps_ci_high"], "{:.1f}"))
        else:
            vals.append(f"{v:.1f}")
    cols[table.metric] = vals
    for col in table.accuracy.columns:
        if col.endswith(f" ({m})"):
            a = table.accuracy[col]
            cols[col[: -len(f" ({m})")]] = ["—" if pd.isna(a[s]) else f"{a[s]:.3f}" for s in steps]
    if provenance:
        cols["commit"] = list(provenance_frame(table)[m])
    return cols


def display_frame(table, *, provenance: bool = False) -> pd.DataFrame:
    """Text cells, index ``step``: ``kind``/``builds_on`` when known, then per machine its
    columns (one machine: plain headers; several: a ``(machine, column)`` MultiIndex)."""
    steps = pd.Index(table.speedup.index, name="step")
    parts = {}
    own = bool(table.own_builds_on)  # the machines disagree: each its own
    if table.has_builds_on:
        for c in ("kind",) if own else ("kind", "builds_on"):
            parts[("", c)] = ["" if pd.isna(v) else str(v) for v in table.steps[c]]
    for m in table.machines:
        if own and table.has_builds_on:
            parts[(m, "builds_on")] = ["" if pd.isna(v) else str(v) for v in table.builds_on_of(m)]
        for k, v in _cells(table, m, provenance).items():
            parts[(m, k)] = v
    out = pd.DataFrame(parts, index=steps)
    if len(table.machines) == 1:
        out.columns = [c for _, c in out.columns]
    else:
        out.columns = pd.MultiIndex.from_tuples(out.columns, names=["machine", None])
    return out


def to_markdown(table, *, provenance: bool = False) -> str:
    """The caption, then the table (tabulate "pipe"); several machines: headers ``speed-up [1]``..."""
    from tabulate import tabulate

    from labkit.safe_text import markdown_cell as cell

    f = display_frame(table, provenance=provenance)
    if isinstance(f.columns, pd.MultiIndex):
        index = {m: i for i, m in enumerate(table.machines, 1)}
        headers = [c if not m else f"{c} [{index[m]}]" for m, c in f.columns]
    else:
        headers = list(f.columns)
    align = ["left" if h in ("kind", "builds_on") else "right" for h in headers]
    rows = [[cell(v) for v in r] for r in f.reset_index().values.tolist()]  # names from ledgers are data
    body = tabulate(rows, headers=["step", *headers], tablefmt="pipe",
                    disable_numparse=True, colalign=("left", *align))
    caption = caption_of(table.rows, table.machines, quote=cell) if table.caption else ""
    return f"{caption}\n\n{body}" if caption else body


def styled(table, *, provenance: bool = False):
    """A pandas Styler: captioned, numbers right-aligned, notes greyed, headers that do not wrap."""
    f = display_frame(table, provenance=provenance)

    def tone(v):
        return "color: #a33; font-style: italic" if isinstance(v, str) and (ABOVE in v or SHORT in v) else ""

    from labkit.safe_text import html

    # every name in it comes from a ledger, maybe someone else's: escaped, never markup
    st = f.style.format(escape="html").format_index(escape="html", axis=0).format_index(escape="html", axis=1)
    st = st.set_caption(caption_of(table.rows, table.machines, quote=html) if table.caption else "").map(tone)
    st = st.set_properties(**{"text-align": "right", "white-space": "nowrap"})
    return st.set_table_styles([
        {"selector": "caption", "props": "caption-side: top; text-align: left; font-weight: normal; color: #444"},
        {"selector": "th", "props": "white-space: nowrap; text-align: center"},
    ])


def class_frame(root: Path, files: Sequence[Path]) -> pd.DataFrame:
    """The rows of every participant's ledger, ``machine`` replaced by the row's ``env.host`` (a host
    name two ledgers share gets the ledger's name after it); empty when every ledger is."""
    from labkit.bench.ledger import Ledger, frame_of

    import warnings

    from labkit.bench.ledger import LedgerWarning

    frames = []
    for f in files:
        if not f.is_file():  # a FIFO or device named *.jsonl would never end: said, and left out
            warnings.warn(f"{f}: not a regular file (FIFO, device or socket): left out of the class view",
                          LedgerWarning, stacklevel=3)
            continue
        df = frame_of(Ledger(f).rows())
        if df.empty:
            continue
        host = df["env.host"] if "env.host" in df.columns else df["machine"]
        df["machine"] = host.fillna(df["machine"]).astype(str)
        df["_who"] = str(f.relative_to(root).with_suffix(""))
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    owners = df.groupby("machine")["_who"].nunique()
    shared = set(owners[owners > 1].index)
    df["machine"] = [f"{h} ({w})" if h in shared else h for h, w in zip(df["machine"], df["_who"])]
    return df.drop(columns="_who")
