"""The README's result tables are the committed reference ledgers, not hand-typed numbers."""
from __future__ import annotations

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


def test_cpu_table_is_the_cpu_reference_ledger():
    table = labkit.speedup_table(ROOT / "reports/reference/cpu-2core/ledger.reference.jsonl")
    rows = table_after("## Results on the 2-core CPU machine")
    assert [r[0] for r in rows] == list(table.frame.index)
    machine = table.speedup.columns[0]
    for step, speedup, fps, map50, mota in rows:
        assert float(speedup.rstrip("x")) == pytest.approx(table.speedup.loc[step, machine], abs=0.005), step
        assert float(fps) == pytest.approx(table.values.loc[step, machine], abs=0.05), step
        assert float(map50) == pytest.approx(table.frame.filter(like="map50").loc[step].iloc[0], abs=5e-4), step
        assert float(mota) == pytest.approx(table.frame.filter(like="mota").loc[step].iloc[0], abs=5e-4), step


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
