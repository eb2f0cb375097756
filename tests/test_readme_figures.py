"""The results page's tables (docs/results.md) are the committed reference ledgers, not hand-typed numbers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import labkit

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "docs" / "results.md").read_text()  # the results page (the README links it)


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


CPU_R3 = ROOT / "reports/reference/cpu-2core-r3/ledger.reference.jsonl"
CPU_R5 = ROOT / "reports/reference/cpu-2core-r5/ledger.reference.jsonl"


def _prose(section: str) -> str:
    """A README section without its tables (their figures are checked against their ledger)."""
    return "\n".join(line for line in section.splitlines() if not line.startswith("|"))


def test_cpu_section_quotes_no_withdrawn_figure():
    """Round 1's CPU ledger predates round 3's definitions (timed window, all-frame mAP, spreads):
    the README's prose quotes none of its figures (a number on its own, not a digit run inside
    another); the table there is round 3's, checked below."""
    import re

    prose = _prose(_section("## Results on the 2-core CPU machine"))
    table = labkit.speedup_table(ROOT / "reports/reference/cpu-2core/ledger.reference.jsonl")
    machine = table.speedup.columns[0]
    for step in table.frame.index:
        figure = f"{table.values.loc[step, machine]:.1f}"
        assert not re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", prose), (step, figure)


@pytest.mark.parametrize("ledger", [CPU_R3, CPU_R5], ids=["round3", "round5"])
def test_cpu_tables_are_their_full_mode_ledgers(ledger):
    """Each of the README's CPU tables (round 3's definitions; round 5's rules: one measured run a
    step, INT8 in `optimized`) is the one labkit draws from its full-mode ledger, cell for cell;
    every row of the table has an interval and the provenance of one clean commit in full mode."""
    rows = [json.loads(x) for x in ledger.read_text().splitlines() if x]
    table = labkit.speedup_table(ledger)
    measured = [r for r in rows if r.get("status") == "ok" and r["step"] in table.frame.index]
    assert measured and all("fps_ci_low" in r["metrics"] for r in measured)
    provenance = {(r["provenance"]["commit"], r["provenance"]["dirty"], r["provenance"]["mode"]) for r in measured}
    assert len(provenance) == 1 and provenance.pop()[1:] == (False, "full"), provenance
    drawn = [line for line in table.to_markdown().splitlines() if line.startswith("|")]
    section = _section("## Results on the 2-core CPU machine").splitlines()
    starts = [i for i, line in enumerate(section) if line == drawn[0]]
    assert any(section[at:at + len(drawn)] == drawn for at in starts), ledger


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


def test_the_timing_plan_is_the_round_5_full_cpu_run_and_holds():
    """notebooks/README.md's full CPU column and longest cells are the saved run's lab_timings.json,
    and the plan holds there: under 30 minutes of notebooks, no cell over 5 minutes."""
    timings = json.loads((ROOT / "reports/reference/cpu-2core-r5/lab_timings.json").read_text())
    text = (ROOT / "notebooks" / "README.md").read_text()
    plan = text[text.index("| notebook | CPU, small mode"):]
    plan = plan[:plan.index("\n\n")]  # the timing table (the agenda's rows below start alike)
    rows = {line.split("|")[1].strip()[:2]: [c.strip() for c in line.split("|")[1:-1]]
            for line in plan.splitlines() if line.startswith("| 0")}
    for book, t in timings.items():
        cells = rows[book[:2]]
        assert cells[2] == f"{round(t['seconds']):,}" and cells[3] == f"{round(t['longest_cell_s'])}", (book, cells)
    assert sum(t["seconds"] for t in timings.values()) < 30 * 60
    assert max(t["longest_cell_s"] for t in timings.values()) < 5 * 60
    assert f"**{round(sum(t['seconds'] for t in timings.values())):,}**" in text
