"""The README's result tables are the committed reference ledgers, not hand-typed numbers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import labkit

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def table_after(heading: str) -> list[list[str]]:
    """Cells of the first markdown table after ``heading`` (header and rule rows left out)."""
    text = README[README.index(heading):]
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().strip("`") for c in line.strip("|").split("|")])
    return rows


def _section(heading: str) -> str:
    text = README[README.index(heading) + len(heading):]
    return text[:text.index("\n## ")]


def test_cpu_section_quotes_no_withdrawn_figure():
    """Round 1's CPU ledger predates round 3's definitions (timed window, all-frame mAP, spreads):
    the README quotes none of its figures; a CPU table, once re-recorded, must be a ledger with
    intervals (``fps_ci_low``) and provenance."""
    section = _section("## Results on the 2-core CPU machine")
    table = labkit.speedup_table(ROOT / "reports/reference/cpu-2core/ledger.reference.jsonl")
    machine = table.speedup.columns[0]
    for step in table.frame.index:
        assert f"{table.values.loc[step, machine]:.1f}" not in section, step
    if "\n|" in section:  # a new table: from a round-3 ledger
        rows = [json.loads(x) for x in (ROOT / "reports/reference/cpu-2core/ledger.reference.jsonl").read_text().splitlines() if x]
        assert all("fps_ci_low" in r.get("metrics", {}) and "provenance" in r for r in rows if r.get("status") == "ok")


def test_h100_table_is_the_h100_configuration_ledger():
    table = labkit.speedup_table(ROOT / "reports/reference/h100/pipeline_table.jsonl")
    rows = table_after("**The application, baseline against each change and all together**")
    assert [r[0] for r in rows] == list(table.frame.index)
    machine = table.speedup.columns[0]
    for config, fps, runs, speedup, *_ in rows:
        assert float(fps) == pytest.approx(table.values.loc[config, machine], abs=0.05), config
        assert float(speedup.rstrip("x")) == pytest.approx(table.speedup.loc[config, machine], abs=0.005), config


def test_detector_table_is_the_h100_throughput_csv():
    import pandas as pd

    csv = pd.read_csv(ROOT / "reports/reference/h100/detector_throughput.csv")
    fps = csv.set_index(["config", "batch_size"])["frames_per_s"]
    rows = table_after("**The detector alone**")
    assert len(rows) == csv["config"].nunique()
    for config, *cells in rows:
        for batch, cell in zip((1, 8, 32), cells):
            assert float(cell.rstrip("*")) == pytest.approx(fps[(config, batch)], abs=0.005), (config, batch)
