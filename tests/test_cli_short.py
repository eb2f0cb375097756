"""The command line reads at a glance (issue 64): advise and bottleneck print one line per finding
(at most 100 characters) on real reports, --explain and --json keep the rest, the report's notes
come first (issue 61's dropped notes), summary says its unit."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from labkit.cli import main

FIX = Path(__file__).parent / "fixtures"
REAL = FIX / "real"
# a CPU pipeline, a GPU-bound real report, a real LLM run with long stage names, a copy-bound one
REPORTS = [FIX / "advise_decode_bound.nsys2022.4.sqlite", REAL / "NTHU-SC_2025.1_icon_graupel_gpu.sqlite",
           REAL / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite", FIX / "gputest.nsys2025.3.sqlite",
           REAL / "MohanadOdema_2022.1_dlprof_nsys_profile.sqlite"]


def _run(capsys, *argv) -> list[str]:
    assert main([str(a) for a in argv]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.stem)
def test_advise_prints_one_short_line_per_finding_with_its_figure_and_basis(capsys, report):
    import labkit

    findings = labkit.advise(labkit.load_report(report))
    lines = _run(capsys, "advise", report)
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    numbered = [line for line in lines if line[:1].isdigit()]
    assert len(numbered) == len(findings)
    for i, (line, sp, basis) in enumerate(zip(numbered, findings["predicted_speedup"], findings["basis"]), 1):
        assert line.startswith(f"{i}. ") and f"{sp:.2f}x ({basis})" in line, line


def test_advise_explain_adds_evidence_and_assumptions_wrapped_and_json_keeps_all(capsys):
    import labkit

    report = REPORTS[0]
    row = labkit.advise(labkit.load_report(report)).iloc[0]
    short = _run(capsys, "advise", report)
    long = _run(capsys, "advise", report, "--explain")
    assert max(map(len, long)) <= 100 and len(long) > len(short)
    text = " ".join(line.strip() for line in long)
    assert " ".join(row["evidence"].split()) in text and " ".join(row["assumptions"].split()) in text
    assert row["evidence"] not in "\n".join(short)
    doc = json.loads("\n".join(_run(capsys, "advise", report, "--json")))
    assert doc["findings"][0]["assumptions"] == row["assumptions"] and doc["notes"]


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.stem)
def test_bottleneck_names_limiter_and_runner_up_and_the_table_only_when_asked(capsys, report):
    lines = _run(capsys, "bottleneck", report)
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    body = [line for line in lines if not line.startswith(("note:", " "))]
    assert [line.split(":")[0] for line in body[:2]] == ["limiter", "runner-up"]
    assert len(lines) <= 12
    table = _run(capsys, "bottleneck", report, "--table")
    assert any(line.split()[:2] == ["thread", "tid"] for line in table)
    assert not any(line.split()[:2] == ["thread", "tid"] for line in lines)


def test_bottleneck_on_a_copy_bound_report_names_copies_then_the_next_engine_or_thread(capsys):
    lines = _run(capsys, "bottleneck", FIX / "gputest.nsys2025.3.sqlite")
    assert lines[0].startswith("limiter: Copies bound throughput (busy 91%")
    assert lines[1].startswith("runner-up: thread python3") and "busy 7%" in lines[1]


def _damaged(tmp_path) -> Path:
    """A real GPU report with one kernel that ends before it starts (an edited export)."""
    db = tmp_path / "damaged.sqlite"
    shutil.copy(FIX / "gputest.nsys2025.3.sqlite", db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET [end] = start - 5000000 WHERE rowid = "
                  "(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    return db


def test_kernels_never_shows_negative_shares_without_the_note_saying_why(capsys, tmp_path):
    db = _damaged(tmp_path)
    lines = _run(capsys, "kernels", db, "--what", "percentiles")
    note = next(i for i, line in enumerate(lines) if line.startswith("note:"))
    table = next(i for i, line in enumerate(lines) if line.lstrip().startswith("name"))
    assert note < table and "end before they start" in " ".join(lines[note:table])
    doc = json.loads("\n".join(_run(capsys, "kernels", db, "--what", "percentiles", "--json")))
    assert any("end before they start" in n for n in doc["notes"])
    assert min(r["min_ns"] for r in doc["percentiles"]) < 0  # the damage shown, and said


@pytest.mark.parametrize("command", ["advise", "bottleneck"])
def test_advise_and_bottleneck_print_the_reports_notes_first_text_and_json(capsys, command):
    report = FIX / "pipeline.nsys2022.4.sqlite"  # a CPU run: "no CUDA tables"
    lines = _run(capsys, command, report)
    assert lines[0].startswith("note: pipeline.nsys2022.4.sqlite: no CUDA tables")
    doc = json.loads("\n".join(_run(capsys, command, report, "--json")))
    assert any("no CUDA tables" in n for n in doc["notes"])
