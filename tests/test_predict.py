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
import labbook.levers
import labbook.predict
import labbook.reference
import labbook.runs
import labbook.stage_factor
from labbook.predict import change, lever_flags, prediction, verdict
import labkit
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
    monkeypatch.setattr(labbook.stage_factor, "RESULTS", tmp_path / "results")
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
    assert list(a.columns)[:4] == ["finding", "evidence", "lever", "predicted_speedup"]
    p = prediction("queues", "full")
    # infer is 85 % of the serial thread: overlapping the rest gains 1/0.85 at most
    assert p["finding"] == "The stages run one after another on one thread"
    both = prediction("no_osd", "full", builds_on="baseline")  # two changes: the larger bound of the two
    assert both == p
    assert 1.10 < p["predicted_speedup"] < 1.25
    no_osd = prediction("mine", "full", flags={"osd": False}, builds_on="baseline")  # display's share of the run
    assert no_osd["finding"] == "Stage 'display' can be switched off" and 1.05 < no_osd["predicted_speedup"] < 1.10


def test_advice_shows_its_findings_at_a_glance_and_folds_their_evidence(led):
    """The advice table a notebook shows has the finding, lever, figure and basis; each finding's
    evidence and assumptions sit under one closed fold; the frame keeps every column for code."""
    add(led, "baseline", profile="baseline.sqlite")
    a = lab.advice("queues", "full")
    html = a._repr_html_()
    table, fold = html.split("<details>")
    assert "<th>finding</th>" in table and "<th>evidence</th>" not in table and "<th>assumptions</th>" not in table
    assert fold.startswith("<summary>Evidence and assumptions, per finding</summary>") and fold.count("<li>") == len(a)
    import html as h

    assert h.escape(a["evidence"].iloc[0]) in fold and "evidence" in a.columns


def test_no_prediction_says_why(led):
    assert prediction("baseline", "full") == {
        "predicted_speedup": None, "basis": None, "assumptions": None, "lever": None,
        "finding": "none: 'baseline' builds on no step: there is no earlier profile to predict from"}
    assert "'baseline' has no ledger row yet" in prediction("queues", "full")["finding"]
    add(led, "baseline", profile="baseline.sqlite")
    p = prediction("mine", "full", flags={"decode_workers": 2}, builds_on="baseline")  # no lock waits there
    assert p["predicted_speedup"] is None and p["lever"] == "release_lock"
    assert p["finding"].startswith("none: no finding in the profile of 'baseline' names release_lock")
    # a layout change makes the detector cheaper by a factor no profile shows: measured on the stage
    # alone, replayed in the base's profile, an estimate under the bound of 'infer' costing nothing
    cl = prediction("mine", "full", flags={"channels_last": True}, builds_on="baseline")
    assert cl["basis"] == "estimate" and cl["lever"] == "compile", cl
    assert cl["finding"].startswith("'infer' measured alone under this change") and "'baseline'" in cl["finding"]
    assert "interleaved pairs of torch-fp32 and torch-fp32-channels_last" in cl["assumptions"]
    free = labkit.advise(labkit.load_report(REF / "baseline.sqlite"), warmup=lab.warmup_batches("baseline", "full"))
    bound = float(free.loc[(free["lever"] == "cheaper_stage") & (free["stage"] == "infer"), "predicted_speedup"].max())
    assert 0 < cl["predicted_speedup"] < bound  # no layout makes the stage cost nothing
    # TF32 on a CPU changes nothing the detector computes: measured alone, near no change
    tf = prediction("mine", "full", flags={"tf32": "on"}, builds_on="baseline")
    assert tf["basis"] == "estimate" and tf["lever"] == "reduce_precision" and 0.5 < tf["predicted_speedup"] < 2
    # no backend this machine lacks is predicted: the finding says why
    trt = prediction("mine", "full", flags={"backend": "tensorrt", "device": "cuda"}, builds_on="baseline")
    assert trt["predicted_speedup"] is None and "could not be measured alone here" in trt["finding"]
    assert "builds on no step" in lab.advice("baseline", "full").data


def test_verdict_of_the_reference_queues_step(led):
    add(led, "baseline", profile="baseline.sqlite")
    add(led, "queues", profile="queues.sqlite", **prediction("queues", "full"))
    text = verdict("queues", "full").data
    measured = ref_fps("queues") / ref_fps("baseline")
    line, fold = text.split("\n\n<details><summary>Why</summary>\n\n")
    assert line.startswith(f"queues: measured {measured:.2f}x over 'baseline' (one measurement: no interval); "
                           "estimate 1.1")  # no basis "bound" in the row: an estimate
    assert "\n" not in line and ": slower;" in line  # one line: what was measured, where it fell, what moved
    infer = (ref_metrics("baseline")["stage_ms"]["infer"], ref_metrics("queues")["stage_ms"]["infer"])
    assert line.endswith(f"; 'infer' {infer[0]:.1f} → {infer[1]:.1f} ms a frame.")
    assert "'infer' is 8" in fold and "% of stage time" in fold and "beyond the noise" in fold  # the why, folded


@pytest.mark.parametrize("fps, basis, says", [
    (100.0, "bound", "above the bound"), (100.0, "estimate", "the estimate was under by"),
    (18.0, "bound", "within noise of the bound"), (15.6, "bound", "within noise of no change"),
    (15.6, "estimate", "within noise of no change")])
def test_verdict_follows_the_measurement(led, fps, basis, says):
    add(led, "baseline", profile="baseline.sqlite")
    add(led, "queues", profile="queues.sqlite", fps=fps, **{**prediction("queues", "full"), "basis": basis})
    line = verdict("queues", "full").data.split("\n\n")[0]
    assert f"; {basis} 1.1" in line and f"x: {says}" in line


def test_verdict_compares_guess_estimate_and_measurement_with_its_interval(led):
    base = ref_fps("baseline")
    add(led, "baseline", profile="baseline.sqlite", fps=base)
    led.append({**lab.catalogue("full")["queues"].labels(), **prediction("queues", "full"), "guess": 3.0,
                "step": "queues", "status": "ok", "env": ENV, "config": {"queues": True},
                "metrics": {"fps": base * 1.5, "fps_ci_low": base * 1.4, "fps_ci_high": base * 1.6}})
    rows = led.rows()
    rows[0]["metrics"].update(fps_ci_low=base * 0.95, fps_ci_high=base * 1.05)
    led.path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = verdict("queues", "full").data
    assert "measured 1.50x over 'baseline' (95 % interval 1.33-1.68x); your guess 3.00x (above it)" in text
    assert "estimate 1.17x: the estimate was under by 1.3x" in text.split("\n\n")[0]


def test_next_lever_comes_from_the_steps_own_profile(led):
    assert "has no ledger row yet" in lab.next_lever("queues", "full").data
    add(led, "queues", profile="queues.sqlite")
    text = lab.next_lever("queues", "full").data
    assert text.startswith("Next lever after 'queues': ") and "'infer'" in text
    top = labbook.predict.advice_frame("batch4", "full", builds_on="queues")[0].iloc[0]["lever"]
    flags = labbook.levers.flags_of(top)
    assert f"in this application {top} ({', '.join(flags) if flags else 'no one flag of this application'})" in text


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
    lab.run_step("mine", builds_on="baseline", mode="full", device="cuda", queues=True, guess=2)
    assert led.rows()[-1]["guess"] == 2.0
    with pytest.raises(ValueError, match="positive number"):
        lab.run_step("mine", builds_on="baseline", mode="full", device="cuda", guess="2x")
