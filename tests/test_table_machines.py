"""``python -m labkit table`` keeps rows of different machines apart (issue 64): the committed H200 ledger
beside a CPU one gives a table per machine, and a CPU step never 'builds on' a step only the H200 ran."""
from __future__ import annotations

import shutil
from pathlib import Path

from labkit.bench.table_cli import cli_table

REF = Path(__file__).parents[1] / "reports" / "reference"


def test_a_table_per_machine_with_builds_on_resolved_within_each(tmp_path, capsys):
    (tmp_path / "h200").mkdir()
    (tmp_path / "cpu").mkdir()
    shutil.copy(REF / "h200" / "ledger.jsonl", tmp_path / "h200" / "ledger.jsonl")
    shutil.copy(REF / "cpu-2core" / "ledger.reference.jsonl", tmp_path / "cpu" / "ledger.jsonl")
    assert cli_table([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    sections = out.split("\n\n\n") if "\n\n\n" in out else out.split("\nMachine")
    cpu = next(s for s in out.split("Machine") if s.startswith(": CPU"))
    gpu = next(s for s in out.split("Machine") if s.startswith(": NVIDIA H200"))
    assert len(sections) >= 2
    cpu_row = next(line for line in cpu.splitlines() if line.startswith("| channels_last "))
    gpu_row = next(line for line in gpu.splitlines() if line.startswith("| channels_last "))
    assert "batch32" not in cpu_row and "batch32" in gpu_row  # the CPU never ran batch32
    assert "| batch32 " not in cpu and "[2]" not in out  # no merged columns of two machines


def test_the_api_keeps_each_machines_builds_on_and_divides_by_its_own_base(tmp_path):
    """``speedup_table`` over two machines (the H200's ledger beside the CPU's, which names no
    builds_on): a step whose machines disagree has no common ``builds_on``, a column per machine
    says each one's, and each machine's speed-up over its base divides by its own row."""
    import warnings

    import labkit

    for name, src in (("h200", REF / "h200" / "ledger.jsonl"), ("cpu", REF / "cpu-2core" / "ledger.reference.jsonl")):
        (tmp_path / name).mkdir()
        shutil.copy(src, tmp_path / name / "ledger.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        both, gpu = labkit.speedup_table(tmp_path), labkit.speedup_table(tmp_path / "h200")
    cpu_m = next(m for m in both.machines if m.startswith("CPU"))
    h200 = next(m for m in both.machines if "H200" in m)
    assert both.steps.loc["channels_last", "builds_on"] is None
    assert both.steps.loc["channels_last", f"builds_on ({h200})"] == "batch32"
    assert both.steps.loc["channels_last", f"builds_on ({cpu_m})"] is None
    assert f"builds_on ({h200})" in both.frame.columns
    assert both.over_builds_on.loc["channels_last", h200] == gpu.over_builds_on.loc["channels_last", h200]
    assert both.over_builds_on[cpu_m].isna().all()  # the CPU's rows name no base: nothing to divide by
    assert list(gpu.steps.columns) == ["kind", "builds_on"]  # one machine: no per-machine columns
    assert both.builds_on_of(h200)["channels_last"] == "batch32" and both.builds_on_of(cpu_m)["channels_last"] is None
    from labkit.bench.charts import predictions

    assert predictions(both, h200)["measured"].to_dict() == predictions(gpu, h200)["measured"].to_dict()  # its own rows
    from labkit.bench.table_view import display_frame

    cells = display_frame(both)
    assert cells.loc["channels_last", (h200, "builds_on")] == "batch32" and cells.loc["channels_last", (cpu_m, "builds_on")] == ""
