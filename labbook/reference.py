"""This machine's ledger and speed-up table, and the committed reference machine's results."""
from __future__ import annotations

import pandas as pd

import labkit
from labkit import Ledger
from labkit.bench.tables import latest_rows

from labbook.text import say
from labbook.settings import LEDGER, MODE, REFERENCE, ROOT
from labbook.steps import builds_on_map
from labbook.floor import within_floor


def ledger(steps=None):
    """This machine's ledger as a frame (``labkit.Ledger.read``), latest row per step (skipped
    and failed steps included, with their ``status`` and ``reason``), in ``steps`` order when given."""
    df = Ledger(LEDGER).read()
    if len(df) == 0:
        return df
    return latest_rows(df, steps).reset_index(drop=True)


def speedup(steps=None, *, reference: bool = False, exercises: bool = False, mode: str = MODE):
    """The relative speed-up table over 'baseline' from the ledger (``labkit.speedup_table``),
    with what each step builds on and the speed-up over it.

    ``steps`` keeps only those steps (in ledger order); ``reference`` adds the committed
    reference machine's columns when its ledger is present; ``exercises`` keeps exercise runs.
    """
    frames = [Ledger(LEDGER).read()]
    if reference and (REFERENCE / "ledger.jsonl").exists():
        frames.append(Ledger(REFERENCE / "ledger.jsonl").read())
    df = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else frames[0]
    if steps is not None and len(df):
        df = df[df["step"].isin(list(steps))]
    return labkit.speedup_table(df, exercises=exercises, builds_on=builds_on_map(mode))


def _shown(path):
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def reference_table():
    """The reference machine's own speed-up table, or a sentence saying there is none yet."""
    path = REFERENCE / "ledger.jsonl"
    if not path.exists():
        also = (" The reference machine's table of pipeline configurations is there, though: "
                "`lab.reference_configurations()`." if (REFERENCE / "pipeline_table.jsonl").exists() else "")
        return say(f"No reference results yet: `{_shown(path)}` is not in this checkout. "
                   f"Run the lab on a GPU machine (`make lab`), then "
                   f"`python scripts/save_reference.py h100`.{also}")
    return labkit.speedup_table(path, builds_on=builds_on_map())


def reference_configurations():
    """The reference machine's table of pipeline configurations, computed from the ledger that
    ``benchmarks/pipeline_table.py`` wrote there (``pipeline_table.jsonl``): the baseline, each
    change on its own, all changes together, and the decode-only ceilings. Its rows are single
    changes from the baseline, not the lab's cumulative steps, so it stays a table of its own.
    A sentence when the file is absent."""
    path = REFERENCE / "pipeline_table.jsonl"
    if not path.exists():
        return say(f"No reference configurations: `{_shown(path)}` is not in this checkout. "
                   f"`python benchmarks/pipeline_table.py` on a GPU machine writes it (in its `--out` folder).")
    return labkit.speedup_table(path)


def both_machines():
    """The speed-up table with this machine's and the reference machine's columns, or a
    sentence when no reference results are committed."""
    if not (REFERENCE / "ledger.jsonl").exists():
        return reference_table()
    return speedup(reference=True)


def reference_rows(steps):
    """The reference machine's ledger rows of ``steps`` (latest per step), or a sentence."""
    path = REFERENCE / "ledger.jsonl"
    if not path.exists():
        return reference_table()
    df = latest_rows(Ledger(path).read())
    cols = [c for c in ("step", "machine", "fps", "latency_p50_ms", "map50", "mota") if c in df.columns]
    return df[df["step"].isin(list(steps))][cols].reset_index(drop=True)


def fastest(candidates, *, accuracy_floor: float | None = None, accuracy: str = "mota") -> str:
    """The step among ``candidates`` with the highest fps in this machine's ledger, leaving out
    rows faster than their own decoding (``above_decode_ceiling``: no speed-up, see labkit.bench).

    ``accuracy_floor``: leave out steps whose ``accuracy`` (default MOTA, the accuracy notebook
    06's floor is set on: ``labbook.interval.floor()``) is below it (``labbook.floor.within_floor``).
    """
    df = ledger(candidates)
    if "fps" not in df.columns or df["fps"].notna().sum() == 0:
        raise ValueError(f"none of {list(candidates)} has a ledger row with fps yet: run those steps first")
    df = df[df["fps"].notna()]
    if "above_decode_ceiling" in df.columns:
        df = df[df["above_decode_ceiling"].ne(True)]
    if accuracy_floor is not None and accuracy in df.columns:
        df = df[df[accuracy].isna() | df[accuracy].map(lambda v: within_floor(v, accuracy_floor))]
    if len(df) == 0:
        raise ValueError(f"none of {list(candidates)} is within the accuracy floor {accuracy_floor} with a "
                         "defensible fps: run notebook 06 again, or lower the floor")
    return str(df.loc[df["fps"].idxmax(), "step"])
