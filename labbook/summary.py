"""Notebook 07's computed parts: the table or a note when the ledger is too sparse, its figures,
the take-aways read from the table, and a self-check quiz whose answers come from the ledger.

Every function takes the table (``labkit.bench.tables.SpeedupTable``); one noise rule throughout: a step is slower, or within
its estimate, by its own 95 % interval over the step it builds on (``labkit.bench.charts.predictions``,
as the verdicts of ``labbook.predict``) or the note that stands in for
it, and returns a note (``say``) instead of raising when there is too little to show.
"""
from __future__ import annotations

import io
import math
from pathlib import Path

import labkit
from labkit.bench.tables import SpeedupTable, SpeedupTableError
from labkit.paths import atomic_write

from labbook.reference import speedup
from labbook.settings import LEDGER
from labbook.text import say



def summary_table(**kw):
    """``lab.speedup(**kw)``, or a note when the ledger has no baseline or no row yet."""
    try:
        return speedup(**kw)
    except SpeedupTableError as e:
        return say(f"No speed-up table yet: {e}. Run notebook 01 (the baseline) and the later notebooks, "
                   f"then this one again. Ledger: `{LEDGER}`.")


NO_TABLE = "Nothing to show yet: there is no speed-up table (the note under the table above says why)."


def _enough(table) -> bool:
    return isinstance(table, SpeedupTable) and table.speedup.iloc[:, 0].notna().sum() >= 2


def _sparse():
    return say("Only the baseline is in the ledger so far: nothing to compare it with yet. "
               "Run notebooks 02 to 06, then this one again.")


def guard(table, show):
    """``show(table)`` when the table has a step beside the baseline; else the note saying why not."""
    if not _enough(table):
        return say(NO_TABLE) if not isinstance(table, SpeedupTable) else _sparse()
    return show(table)


def write(table, path: Path):
    """Write the table as markdown to ``path`` (``speedup.md``) and return its text as a note to
    show; the note itself when there is no table yet (nothing is written)."""
    if not isinstance(table, SpeedupTable):
        return table
    text = table.to_markdown()
    atomic_write(path, text + "\n", overwrite=True, what="speed-up table")  # the lab's own file
    return say(f"Written to `{path}`:\n\n{text}")


def figure(table, kind: str, folder: Path | None = None):
    """One of 07's figures (``speedup``, ``fps_vs_map50``, ``stages``, ``predicted``), saved as
    ``<folder>/<kind>.png`` when ``folder`` is given; a note when the table is too sparse."""
    if not _enough(table):
        return guard(table, None)
    charts = labkit.bench.charts
    rows = table.rows
    try:
        fig = {"speedup": lambda: charts.speedup_bars(table),
               "fps_vs_map50": lambda: charts.fps_vs_accuracy(rows, accuracy="map50"),
               "stages": lambda: charts.stage_bars(rows),
               "predicted": lambda: charts.predicted_vs_measured(table)}[kind]()
    except ValueError as e:  # e.g. no accuracy or stage columns in these rows: say so
        return say(f"No `{kind}` figure: {e}.")
    if folder is not None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        atomic_write(Path(folder) / f"{kind}.png", buf.getvalue(), overwrite=True, what="figure")  # the lab's own
    return fig


def facts(table) -> dict:
    """The figures the take-aways and the quiz are computed from (this machine's column):
    ``fastest``/``fastest_x`` (over the baseline), ``top``/``top_x``/``top_on`` (largest gain
    over the step built on), ``slower`` (steps slower than theirs beyond their interval), ``mota_step`` /
    ``mota_drop`` / ``mota_on`` (largest MOTA loss against the step built on, over the same frames:
    :func:`accuracy_drops`), ``predicted``/``within`` (steps run
    under a prediction, and those that stayed inside it), ``baseline_fps``."""
    sp = table.speedup.iloc[:, 0].dropna()
    machine = table.machines[0]
    floor, mota_col = _floor(), table.accuracy.get(f"mota ({machine})")
    if floor is not None and mota_col is not None:  # the fastest step within notebook 06's floor
        from labbook.floor import within_floor

        mota = [mota_col.get(st, math.nan) for st in sp.index]
        sp = sp[[v != v or within_floor(v, floor) for v in mota]]  # a step without MOTA stays
    over = table.over_builds_on[machine].dropna() if machine in table.over_builds_on else sp.iloc[:0]
    p = labkit.bench.charts.predictions(table, machine)  # the one noise rule: each row's own interval
    out = {"machine": machine, "fastest": sp.idxmax(), "fastest_x": float(sp.max()), "floor": floor,
           "baseline_fps": float(table.values.loc[table.baseline, machine]),
           "slower": [s for s in over.index if s in p.index and bool(p.at[s, "slower"])]}
    if len(over):
        out.update(top=over.idxmax(), top_x=float(over.max()), top_on=table.builds_on_of(machine)[over.idxmax()])
    drops = accuracy_drops(table, machine)
    if len(drops):
        worst = drops.idxmax()
        out.update(mota_step=worst, mota_drop=float(drops[worst]), mota_on=table.builds_on_of(machine)[worst])
    p = p[p["predicted"].notna()]
    out.update(predicted=list(p.index), within=[s for s, w in p["within"].items() if w is True],
               side={str(k): str(v) for k, v in p["side"].items()})
    return out


def accuracy_drops(table, machine: str, accuracy: str = "mota"):
    """Each step's loss of ``accuracy`` against the step it builds on (positive: it lost), on
    ``machine``, only where both rows scored the same frames (``frames``): a score over 600 frames
    and one over 6,411 are of different clips, not a change's cost. A Series by step."""
    import pandas as pd

    rows = table.rows
    if accuracy not in rows.columns or "frames" not in rows.columns:
        return pd.Series(dtype=float)
    mine = rows[rows["machine"] == machine] if "machine" in rows.columns else rows
    mine = mine.drop_duplicates("step", keep="last").set_index("step")
    out = {}
    for st, on in table.builds_on_of(machine).items():
        if st in mine.index and isinstance(on, str) and on in mine.index and mine.at[st, "frames"] == mine.at[on, "frames"]:
            d = float(mine.at[on, accuracy]) - float(mine.at[st, accuracy])
            if d == d:
                out[st] = d
    return pd.Series(out, dtype=float)


def _floor():
    from labbook.interval import floor

    return floor()


def takeaways(table):
    """The take-aways of this machine's run, each computed from the table (a note when sparse)."""
    if not _enough(table):
        return guard(table, None)
    f = facts(table)
    within = f" within the MOTA floor {f['floor']:.3f} (notebook 06)" if f["floor"] is not None else ""
    lines = [f"- **Fastest step{within}: `{f['fastest']}`**, {f['fastest_x']:.2f}x the baseline's "
             f"{f['baseline_fps']:.1f} frames/s on {f['machine']} (one run of this mode: see the table's spread)."]
    if "top" in f:
        lines.append(f"- **Largest single change: `{f['top']}`**, {f['top_x']:.2f}x the step it builds on "
                     f"(`{f['top_on']}`).")
    if f["slower"]:
        lines.append(f"- **Not every lever helps here:** {', '.join(f'`{s}`' for s in f['slower'])} ran slower "
                     f"than the step each builds on, beyond its 95 % interval. Measure on your hardware.")
    if "mota_step" in f and f["mota_drop"] > 0:
        lines.append(f"- **Speed can cost accuracy:** `{f['mota_step']}` lost the most MOTA, "
                     f"{f['mota_drop']:.3f} below `{f['mota_on']}` it builds on (both over the same frames); "
                     "decide with both numbers side by side.")
    if f["predicted"]:
        by = _by_side(f)
        parts = [f"{len(by['within'])} of {len(f['predicted'])} steps run under an estimate measured within the "
                 f"noise of it"]
        parts += [f"{len(by[k])} {words}" for k, words in (("above", "above it"), ("below", "below it"),
                                                           ("inside", "inside their bound"),
                                                           ("slower", "slower than the step they build on"))
                  if by[k]]
        lines.append(f"- **Predict, then measure:** {'; '.join(parts)}. An estimate holds only as far as its "
                     f"assumptions hold on this machine.")
    return say("\n".join(lines))


def _by_side(f: dict) -> dict[str, list[str]]:
    """The steps run under an estimate, by where their measurement fell (``charts.predictions``' side)."""
    return {k: [s for s in f["predicted"] if f["side"].get(s) == k]
            for k in ("within", "above", "below", "inside", "slower")}


def _question(q: str, answer: str) -> str:
    """A question of ours and its answer, which quotes ledger names: the answer's raw HTML is escaped,
    the ``<details>`` that hides it is the lab's own."""
    from labkit.safe_text import markdown_no_html

    return (f"{q}\n\n<details><summary>Answer (from your ledger)</summary>\n\n{markdown_no_html(answer)}\n\n"
            "</details>\n")


def quiz(table):
    """A short self-check quiz: questions about this run, answers computed from the learner's own
    ledger and hidden under ``<details>`` (a note when the ledger is too sparse)."""
    if not _enough(table):
        return guard(table, None)
    f = facts(table)
    floor = f" within the accuracy floor (MOTA {f['floor']:.3f}, notebook 06)" if f["floor"] is not None else ""
    qs = [_question(f"**1.** Which step made the pipeline fastest{floor}, and by how much over the baseline?",
                    f"`{f['fastest']}`: {f['fastest_x']:.2f}x.")]
    if "top" in f:
        qs.append(_question("**2.** Which single change gained most over the step it builds on? Why is that a "
                            "fairer measure of a change than its speed-up over the baseline?",
                            f"`{f['top']}`, {f['top_x']:.2f}x over `{f['top_on']}`. Speed-up over the baseline "
                            f"also counts every change made before it."))
    qs.append(_question("**3.** Which steps were slower than the step they build on, beyond the noise?",
                        ", ".join(f"`{s}`" for s in f["slower"]) or "None in your run."))
    if "mota_step" in f:
        qs.append(_question("**4.** Which step cost the most tracking accuracy (MOTA) against the step it builds "
                            "on, and how much?",
                            f"`{f['mota_step']}`, {f['mota_drop']:.3f} below `{f['mota_on']}` (both over the same "
                            "frames)."))
    if f["predicted"]:
        by = _by_side(f)
        names = {k: ", ".join(f"`{s}`" for s in v) for k, v in by.items()}
        answer = " ".join(x for x in (
            f"Above: {names['above']}: more changed than the finding's lever counts (a stage it should not touch "
            "ran faster too, or the machine was busier during the step it builds on)." if by["above"] else "",
            f"Below: {names['below']}: the estimate counts only the time a change saves, not what it costs "
            "(threads sharing the cores, a larger batch waiting to fill)." if by["below"] else "",
            f"Inside their bound: {names['inside']}: a bound is the most the change could give (its stage "
            "costing nothing), not a forecast." if by["inside"] else "",
            f"Slower than the step they build on: {names['slower']}: the change cost more than it saved here; "
            "no estimate counts a cost." if by["slower"] else "") if x) or (
            "None: every step measured within the noise of its estimate.")
        qs.append(_question("**5.** Which steps measured beyond the noise of the estimate they were run under, on "
                            "which side, and why?", answer))
    from IPython.display import Markdown

    return Markdown("\n".join(qs))  # the questions are ours; each answer was escaped in _question


def gpu_references(folder: Path | None = None):
    """What the committed GPU recordings (``reports/reference/<gpu>/ledger.jsonl``) hold, computed
    from each: its GPU, how many of its rows ran, were skipped (and why) or failed, then its table.
    A note where none is committed."""
    import json

    from IPython.display import display

    from labbook.settings import ROOT

    folder = Path(folder or ROOT / "reports" / "reference")
    found = []
    for path in sorted(folder.glob("*/ledger.jsonl")):
        rows = {}
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[r["step"]] = r
        gpu = next((r["env"]["gpu"] for r in rows.values() if (r.get("env") or {}).get("gpu")), None)
        if gpu:
            found.append((path, gpu, rows))
    if not found:
        return say(f"No GPU recording of the lab's steps is committed under `{folder.name}/`.")
    for path, gpu, rows in found:
        status = [str(r.get("status", "ok")) for r in rows.values()]
        skipped = sorted({str(r.get("reason")) for r in rows.values() if r.get("status") == "skipped"})
        display(say(f"**{gpu}** (`{path.parent.name}/`): {status.count('ok')} of {len(rows)} steps ran"
                    + (f", {status.count('skipped')} skipped ({'; '.join(skipped)})" if skipped else "")
                    + (f", {status.count('failed')} failed" if "failed" in status else "") + "."))
        try:
            display(labkit.speedup_table(path))
        except SpeedupTableError as e:
            display(say(f"No table of `{path}`: {e}."))
    return None
