"""labbook.predict on real exports and real ledger figures: the advice a step runs under, the
prediction its ledger row carries, the verdict after it and the next lever.

Profiles: the lab's CPU baseline and queued runs (reports/reference/cpu-2core, nsys 2022.4, full
mode: 128 frames, 16 warm-up); fps figures from that folder's ledger.reference.jsonl.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import labbook as lab
import labbook.display
import labbook.predict
import labbook.reference
import labbook.runs
from labbook.predict import change, lever_flags, prediction, verdict
from labkit import Ledger

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "reports" / "reference" / "cpu-2core"
ENV = {"cpu": "Test CPU", "host": "test", "cpu_count": 2}


def ref_metrics(step: str) -> dict:
    rows = [json.loads(line) for line in (REF / "ledger.reference.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["step"] == step][-1]["metrics"]


def ref_fps(step: str) -> float:
    return ref_metrics(step)["fps"]


@pytest.fixture
def led(tmp_path, monkeypatch):
    """An empty ledger in a temp folder, read by every labbook module."""
    for mod in (labbook.runs, labbook.reference, labbook.display):
        monkeypatch.setattr(mod, "LEDGER", tmp_path / "ledger.jsonl")
    monkeypatch.setattr(labbook.runs, "RESULTS", tmp_path / "results")
    return Ledger(tmp_path / "ledger.jsonl")


def add(led: Ledger, step: str, *, profile: str | None = None, fps: float | None = None, **labels) -> None:
    st = lab.catalogue("full")[step]
    led.append({**st.labels(), **labels, "step": step, "status": "ok", "env": ENV, "config": dict(st.flags),
                "metrics": {"repeats": 3, "stage_ms": ref_metrics(step)["stage_ms"], "fps": fps or ref_fps(step)},
                "paths": {"profile": str(REF / profile) if profile else None}})


@pytest.mark.parametrize("changed, flags", [
    ({"queues": True}, ["--queues"]),
    ({"osd": False}, ["--no-osd"]),
    ({"batch_size": 4}, ["--batch-size"]),
    ({"precision": "fp16"}, ["--precision", "--fp16"]),
    ({"interval": None}, []),
    ({"inputs": ["clip.mp4"], "realtime": True}, ["--input", "--realtime"]),
])
def test_lever_flags_are_the_command_line_of_a_change(changed, flags):
    assert lever_flags(changed) == flags


def test_change_is_what_a_step_sets_over_its_base():
    assert change("queues", "full") == {"queues": True}
    assert change("no_osd", "full") == {"osd": False}
    assert change("ort_int8", "full") == {"precision": "int8"}
    assert change("mine", "full", flags={"queues": True, "streams": 2}, builds_on="queues") == {"streams": 2}


def test_queues_are_predicted_from_the_baseline_profile(led):
    add(led, "baseline", profile="baseline.sqlite")
    a = lab.advice("queues", "full")
    assert list(a.columns) == ["finding", "evidence", "lever", "predicted_speedup"]
    p = prediction("queues", "full")
    # infer is 85 % of the serial thread: overlapping the rest gains 1/0.85 at most
    assert p["finding"] == "The stages run one after another on one thread"
    both = prediction("no_osd", "full", builds_on="baseline")  # two changes: the larger bound of the two
    assert both == p
    assert 1.10 < p["predicted_speedup"] < 1.25
    no_osd = prediction("mine", "full", flags={"osd": False}, builds_on="baseline")  # display's share of the run
    assert no_osd["finding"] == "Stage 'display' can be switched off" and 1.05 < no_osd["predicted_speedup"] < 1.10


def test_no_prediction_says_why(led):
    assert prediction("baseline", "full") == {
        "predicted_speedup": None,
        "finding": "none: 'baseline' builds on no step: there is no earlier profile to predict from"}
    assert "'baseline' has no ledger row yet" in prediction("queues", "full")["finding"]
    add(led, "baseline", profile="baseline.sqlite")
    p = prediction("mine", "full", flags={"channels_last": True}, builds_on="baseline")
    assert p == {"predicted_speedup": None,
                 "finding": "none: no finding in the profile of 'baseline' names --channels-last as its lever"}
    assert "builds on no step" in lab.advice("baseline", "full").data


def test_verdict_of_the_reference_queues_step(led):
    add(led, "baseline", profile="baseline.sqlite")
    add(led, "queues", profile="queues.sqlite", **prediction("queues", "full"))
    text = verdict("queues", "full").data
    measured = ref_fps("queues") / ref_fps("baseline")
    assert text.startswith(f"queues: measured {measured:.2f}x over 'baseline', bound 1.1")
    assert "'infer' is 8" in text and "% of stage time" in text
    assert "inside the bound, but slower" in text
    infer = (ref_metrics("baseline")["stage_ms"]["infer"], ref_metrics("queues")["stage_ms"]["infer"])
    assert f"'infer' took {infer[0]:.1f} ms a frame in 'baseline' and {infer[1]:.1f} ms here" in text


@pytest.mark.parametrize("fps, says", [(100.0, "above the bound"), (18.0, "inside the bound: the change saved"),
                                       (15.6, "no gain beyond the noise")])
def test_verdict_follows_the_measurement(led, fps, says):
    add(led, "baseline", profile="baseline.sqlite")
    add(led, "queues", profile="queues.sqlite", fps=fps, **prediction("queues", "full"))
    assert says in verdict("queues", "full").data


def test_next_lever_comes_from_the_steps_own_profile(led):
    assert "has no ledger row yet" in lab.next_lever("queues", "full").data
    add(led, "queues", profile="queues.sqlite")
    text = lab.next_lever("queues", "full").data
    assert text.startswith("Next lever: --batch-size") and "'infer'" in text


@pytest.mark.skipif(lab.gpu_available(), reason="needs a machine without a GPU, where a CUDA step is skipped")
def test_run_step_records_the_prediction_it_runs_under(led):
    add(led, "baseline", profile="baseline.sqlite")
    out = lab.run_step("mine", builds_on="baseline", mode="full", device="cuda", queues=True)
    assert out.status == "skipped"  # nothing ran, yet the row says what it was predicted to gain
    row = led.rows()[-1]
    assert row["finding"] == "The stages run one after another on one thread"
    assert row["predicted_speedup"] == prediction("queues", "full")["predicted_speedup"]
    lab.run_step("baseline", mode="full", device="cuda")
    assert led.rows()[-1]["finding"].startswith("none: 'baseline' builds on no step")
