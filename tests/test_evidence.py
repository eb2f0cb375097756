"""The lab's evidence readers (labbook.evidence, labbook.interval, labbook.summary) on real data:
the committed H100 evidence, a real CPU export with --interval, and hand-built ledgers."""
from __future__ import annotations

import pandas as pd
import pytest

import labkit
from labkit.bench.ledger import Ledger

import labbook.reference
from labbook import evidence, interval, summary

FIX = evidence.ROOT / "tests" / "fixtures"
XEON = {"gpu": None, "cpu": "Intel(R) Xeon(R) Processor"}


def test_h100_export_is_the_fixture_and_shows_a_launch_bound_gpu():
    """The notebooks read a copy in reports/reference/h100 (never tests/): same bytes as the fixture."""
    assert evidence.H100_EXPORT.read_bytes() == (FIX / "pipeline.nsys2025.3.sqlite").read_bytes()
    ev = evidence.gpu_evidence({"h100": evidence.h100_report()}, warmup=evidence.H100_WARMUP).loc["h100"]
    assert ev["batches"] == 4 and ev["kernels"] == 508 and ev["graph_launches"] == 0
    assert ev["kernels_per_batch"] == 127 and ev["launch_calls_per_batch"] == 127  # one launch per kernel: eager
    assert ev["median_kernel_us"] == pytest.approx(2.288)
    assert ev["gpu_busy_pct"] == pytest.approx(5.54, abs=0.01)  # SMs busy (kernels only): idle between launches
    assert ev["idle_gaps"] == 25 and ev["idle_ms"] == pytest.approx(24.3, abs=0.05)
    assert ev["window_ms"] == pytest.approx(40.64, abs=0.01)


def test_h100_fp32_convolutions_ran_as_tf32():
    t = evidence.tf32_share(evidence.h100_report())
    assert t["tf32_pct"] == pytest.approx(86.6, abs=0.1)
    assert "tf32" in t["example"] and t["example"].startswith("sm90_xmma_fprop")


def test_detector_throughput_and_graph_gain():
    t = evidence.detector_throughput()
    assert t.loc["torch-fp32", "batch 1"] == 447.0 and t.loc["torch-fp16-compile", "suspect batches"] == "8, 32"
    g = evidence.variant_gain("torch-fp32-cuda_graphs", "torch-fp32")["gain"].round(2)
    assert g.tolist() == [4.09, 1.78, 1.01]  # graphs pay at batch 1, not at 32
    with pytest.raises(ValueError, match="no detector config 'nope'"):
        evidence.variant_gain("nope", "torch-fp32")


def test_configurations_keep_the_baseline():
    t = evidence.configurations(["cuda_graphs"])
    assert list(t.speedup.index) == ["baseline", "cuda_graphs"]
    assert t.speedup.iloc[:, 0].round(2).tolist() == [1.0, 1.19]


def test_detected_frames_with_an_interval():
    """A real CPU run with --interval 10 --batch-size 8: the detector ran on 1 frame in 10, no padding."""
    rep = labkit.load_report(FIX / "advise_decode_bound.nsys2022.4.sqlite")
    d = interval.detected_frames(rep, warmup=2)
    assert (d["frames"], d["detected"], d["infer_calls"]) == (80, 8, 10)
    assert d["share"] == pytest.approx(0.1)


def test_accuracy_floor_is_the_knee():
    rows = pd.DataFrame({"interval": [1, 2, 5, 10, 30], "fps": [20, 38, 80, 120, 160],
                         "mota": [0.97, 0.968, 0.96, 0.90, 0.60]})
    assert interval.accuracy_floor(rows)["interval"] == 10
    flat = rows.assign(mota=0.97)
    assert interval.accuracy_floor(flat)["interval"] == 30  # no cost yet: the fastest
    with pytest.raises(ValueError, match="three or more"):
        interval.accuracy_floor(rows.head(2))


@pytest.fixture
def ledger_at(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setattr(labbook.reference, "LEDGER", path)

    def add(step, fps, builds_on=None, mota=0.96, pred=None):
        rec = {"step": step, "env": XEON, "builds_on": builds_on, "kind": "cumulative",
               "metrics": {"fps": fps, "mota": mota, "map50": 0.99, "frames": 900}}  # scored over the same frames
        if pred:
            rec["predicted_speedup"] = pred
        Ledger(path).append(rec)
    return add


def test_summary_on_a_sparse_ledger_is_a_note(ledger_at):
    for what in (summary.summary_table(),):
        assert "No speed-up table yet" in what.data
        assert summary.takeaways(what).data == summary.figure(what, "speedup").data == summary.NO_TABLE
    ledger_at("baseline", 10.0)
    table = summary.summary_table()
    for out in (summary.takeaways(table), summary.quiz(table), summary.figure(table, "predicted")):
        assert out.data.startswith("Only the baseline")


def test_takeaways_and_quiz_come_from_the_ledger(ledger_at, tmp_path):
    ledger_at("baseline", 10.0)
    ledger_at("queues", 9.0, "baseline", pred=1.18)
    ledger_at("no_osd", 13.5, "queues", pred=1.3)
    ledger_at("interval5", 54.0, "no_osd", mota=0.90)
    table = summary.summary_table()
    f = summary.facts(table)
    assert (f["fastest"], f["top"], f["top_on"], f["slower"]) == ("interval5", "interval5", "no_osd", ["queues"])
    # queues measured slower than the baseline: a regression, not "at or under" its estimate;
    # no_osd measured 1.50x against 1.30x: above its estimate beyond the noise
    assert f["mota_drop"] == pytest.approx(0.06) and f["within"] == [] and f["predicted"] == ["queues", "no_osd"]
    assert f["side"] == {"queues": "slower", "no_osd": "above"}
    text = summary.takeaways(table).data
    assert "`interval5`**, 5.40x the baseline's 10.0 frames/s" in text and "0 of 2 steps" in text
    assert "1 above it; 1 slower than the step they build on" in text
    quiz = summary.quiz(table).data
    assert quiz.count("<details>") == 5 and "Above: `no_osd`" in quiz and "Slower than the step they build on: `queues`" in quiz
    assert isinstance(summary.figure(table, "predicted", folder=tmp_path), type(labkit.bench.charts.speedup_bars(table)))
    assert (tmp_path / "predicted.png").stat().st_size > 10_000


def test_without_gpu_runs_the_h100_evidence_stands_in_labelled(ledger_at, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
    ev = evidence.graph_evidence(["fp16", "fp16_cuda_graphs"])
    assert list(ev.index) == ["H100 eager, batch 4"] and ev.loc["H100 eager, batch 4", "kernels_per_batch"] == 127
    rep, warm = evidence.gpu_report("fp16_cuda_graphs")
    assert warm == evidence.H100_WARMUP and rep.has_cuda
    assert len(shown) == 2 and all(evidence.LABEL in s for s in shown)  # each shown under its label
    from labbook.outcome import Outcome

    skipped = Outcome("fp16", "skipped", "it needs a CUDA GPU")
    assert evidence.lever(skipped, lambda: "here", lambda: "h100", "fp16") == "h100"
    assert "fp16; see `reports/reference/h100/pipeline_table.jsonl` (the command" in shown[-1]
    ok = Outcome("fp16", "ok", result=object())
    assert evidence.lever(ok, lambda: "here", lambda: "h100", "fp16") == "here"


def test_summary_write_keeps_the_note_and_writes_the_table(ledger_at, tmp_path):
    note = summary.summary_table()
    assert summary.write(note, tmp_path / "s.md") is note and not (tmp_path / "s.md").exists()
    ledger_at("baseline", 10.0)
    ledger_at("queues", 12.0, "baseline")
    out = summary.write(summary.summary_table(), tmp_path / "s.md")
    assert "| queues" in (tmp_path / "s.md").read_text() and "Written to" in out.data


@pytest.mark.parametrize("rows", [0, 1], ids=["empty", "baseline-only"])
def test_summary_notebook_runs_on_a_sparse_ledger(tmp_path, rows):
    """07 executed headless (as run_lab does) on an empty ledger and on the baseline alone: no
    error, no stderr, and the note in place of the table's figures."""
    import json
    import os
    import subprocess
    import sys

    if rows:
        Ledger(tmp_path / "ledger.jsonl").append({"step": "baseline", "env": XEON, "kind": "cumulative",
                                                  "metrics": {"fps": 10.0, "map50": 0.9, "mota": 0.8}})
    env = {**os.environ, "LABKIT_REPORTS": str(tmp_path), "LABKIT_STRICT": "1"}
    out = subprocess.run([sys.executable, "scripts/run_lab.py", "--only", "07", "--mode", "small", "--out",
                          str(tmp_path / "nb")], cwd=evidence.ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    cells = json.loads((tmp_path / "nb" / "07_Summary.ipynb").read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error" or o.get("name") == "stderr"]
    text = json.dumps(outputs)
    assert ("Only the baseline is in the ledger" if rows else "No speed-up table yet") in text
    assert "image/png" not in text  # every figure is a note until a step beside the baseline ran


def test_the_h100_rows_that_are_no_speed_up_carry_a_computed_caveat():
    """all_s1 ran 600 frames while its queues hold 481 (batch 32): its rate counts queued frames."""
    df = labkit.Ledger(evidence.CONFIGURATIONS).read()
    said = evidence.above_decoding(df, ["baseline", "fp16", "all_s1"])
    assert "`all_s1` ran 600 frames while its queues hold up to 481 at batch 32" in said
    assert "`baseline`" not in said and "`fp16`" not in said
    assert evidence.above_decoding(df, ["baseline", "fp16"]) == ""
