"""One optimized pipeline within the accuracy floor: the knee is never above K=1's accuracy, the
interval sweep builds on the same step every run, the floor is read back from the ledger, and
the optimized step combines the levers that paid (issue 21)."""
from __future__ import annotations

import labbook
import labbook as lab
import pandas as pd
import pytest
from labbook import interval, optimize
from labkit import Ledger


@pytest.fixture
def led(tmp_path, monkeypatch):
    for mod in (labbook.runs, labbook.reference, labbook.display):
        monkeypatch.setattr(mod, "LEDGER", tmp_path / "ledger.jsonl")
    return Ledger(tmp_path / "ledger.jsonl")


def add(led, step, fps, mota=None, k=None, ci=None):
    st = lab.catalogue("small").get(step) or lab.Step(step, lab.flags("batch4", "small"), "batch4", "sweep")
    m = {"fps": fps, "mota": mota, **({"fps_ci_low": ci[0], "fps_ci_high": ci[1]} if ci else {})}
    led.append({**st.labels(), "step": step, "status": "ok", "config": {**st.flags, **({"interval": k} if k else {})},
                "metrics": m})


def lab_run(led):
    for step, fps in (("baseline", 10), ("queues", 11), ("no_osd", 12)):
        add(led, step, fps, 0.75)
    add(led, "batch4", 20, 0.75, ci=(19, 21))
    add(led, "compile", 30, 0.75, ci=(28, 32))  # paid
    add(led, "channels_last", 20.5, 0.75, ci=(18, 23))  # within noise of batch4: did not pay
    add(led, "ort_fp32", 25, 0.75, ci=(24, 26))  # paid, but a backend other than compile's torch
    add(led, "ort_int8", 40, 0.60, ci=(38, 42))  # INT8: paid, but its MOTA is below the floor
    for k, fps, mota in ((2, 35, 0.80), (4, 55, 0.79), (8, 60, 0.5), (16, 62, 0.3)):
        add(led, f"interval{k}", fps, mota, k)


def test_the_knee_is_never_above_k1s_accuracy():
    rows = pd.DataFrame({"step": ["k1", "k2", "k4", "k8"], "interval": [1, 2, 4, 8], "fps": [10, 20, 30, 32],
                         "mota": [0.70, 0.78, 0.76, 0.2]})  # noise: K=2 and K=4 "beat" K=1
    knee = interval.accuracy_floor(rows)
    assert knee["mota"] <= 0.70 and knee["interval"] in (2, 4)


def test_the_sweep_base_is_fixed_and_the_floor_is_read_back(led):
    assert interval.base("small") == "batch4" and interval.floor("small") is None
    lab_run(led)
    assert interval.floor("small") == pytest.approx(0.75)  # clipped to K=1 (batch4)'s MOTA
    assert lab.fastest(["batch4", "compile", "ort_int8", "interval16"], accuracy_floor=interval.floor("small")) == \
        "compile"


def test_the_optimized_step_combines_what_paid_within_the_floor(led):
    lab_run(led)
    g = optimize.gains("small").set_index("step")
    assert (g.loc[["compile", "ort_fp32", "ort_int8"], "verdict"] == "paid").all()
    assert g.loc["channels_last", "verdict"] == "noise"
    _, why = optimize.decisions("small")
    why = why.set_index("step")
    assert why.loc["ort_int8", "decision"] == "left out" and "MOTA 0.600 below the floor 0.750" in why.loc["ort_int8", "why"]
    assert why.loc["ort_fp32", "decision"] == "left out" and "refuses" in why.loc["ort_fp32", "why"]
    assert why.loc["compile", "decision"] == "taken" and why.loc["queues", "decision"] == "kept"
    st = optimize.step("small")
    assert st.kind == "cumulative" and st.builds_on == "interval4"
    assert dict(st.flags) == {**lab.flags("batch4", "small"), "compile": True, "interval": 4}


def test_the_optimized_step_takes_int8_within_the_floor_and_drops_a_lever_that_cost(led):
    """INT8 paid and kept MOTA within the floor: taken (and, fastest, it rules out compile, a torch
    option); queues measured slower beyond the noise: its change is dropped, and the table says why."""
    lab_run(led)
    add(led, "queues", 8, 0.75)  # slower than the baseline's 10 beyond the usual noise
    add(led, "ort_int8", 40, 0.76, ci=(38, 42))
    flags, why = optimize.decisions("small")
    why = why.set_index("step")
    assert why.loc["queues", "decision"] == "dropped" and "slower beyond the noise" in why.loc["queues", "why"]
    assert why.loc["ort_int8", "decision"] == "taken" and "within the floor 0.750" in why.loc["ort_int8", "why"]
    assert why.loc["compile", "decision"] == "left out"
    assert "queues" not in flags and flags["precision"] == "int8" and flags["backend"] == "onnxruntime"
    assert not flags.get("compile")


def test_the_optimized_step_never_combines_what_the_application_refuses(led):
    """compile paid and CUDA graphs paid: the application refuses the two together
    (source_code.options.REFUSED_TOGETHER, exit 3), so optimized takes the faster one only."""
    from source_code.options import refused

    lab_run(led)  # compile paid (30 frames/s)
    add(led, "gpu_preprocess", 40, 0.75, ci=(39, 41))
    add(led, "fp16", 60, 0.75, ci=(58, 62))
    add(led, "fp16_cuda_graphs", 90, 0.75, ci=(88, 92))
    g = optimize.gains("small").set_index("step")
    assert (g.loc[["compile", "fp16_cuda_graphs"], "verdict"] == "paid").all()
    flags = dict(optimize.step("small").flags)
    assert flags.get("cuda_graphs") and not flags.get("compile") and refused(flags) is None


def test_the_optimized_estimate_multiplies_what_each_lever_measured_and_says_so(led):
    lab_run(led)
    add(led, "queues", 8, 0.75)  # dropped: gives back its 0.8x
    add(led, "ort_int8", 40, 0.76, ci=(38, 42))  # taken: 40/25 over ort_fp32, which ran 25/20 over batch4
    _, decided = optimize.decisions("small")
    est = optimize.estimate(decided, "small")
    assert est["predicted_speedup"] == pytest.approx(40 / 20 / (8 / 10), rel=1e-3)
    assert est["finding"] == ("levers measured one by one, combined as if independent: ort_int8 (2.00x over "
                              "batch4) x dropping queues (1.25x)")
    nothing = optimize.estimate(decided.assign(decision="left out"), "small")
    assert nothing["predicted_speedup"] is None and nothing["finding"].startswith("none:")


def test_a_frames_time_in_the_pipeline_model():
    st = {"decode": 1.0, "infer": 6.0, "track": 1.0}
    assert optimize.frame_ms(st, queued=False, cores=2) == 8.0  # one after another: the sum
    assert optimize.frame_ms(st, queued=True, cores=2) == 6.0  # queued: the slowest stage
    assert optimize.frame_ms({"a": 3.0, "b": 3.0, "c": 3.0}, queued=True, cores=2) == 4.5  # cores shared


def test_the_optimized_estimate_scales_the_knees_detector_stages(led):
    """INT8 measured 'infer' at a quarter of batch4's; the knee's infer (4 ms of a 2-core queued
    pipeline whose stages sum to 7 ms) becomes 1 ms: a frame takes max(4, 7 / 2) = 4 ms before and
    max(2, 4 / 2) = 2 ms after."""
    lab_run(led)
    add(led, "ort_int8", 40, 0.76, ci=(38, 42))

    def stages(step, infer, k=None):
        st = lab.catalogue("small").get(step) or lab.Step(step, lab.flags("batch4", "small"), "batch4", "sweep")
        led.append({**st.labels(), "step": step, "status": "ok", "env": {"cpu_count": 2},
                    "config": {**st.flags, **({"interval": k} if k else {})},
                    "metrics": {"fps": 50.0, "mota": 0.79, "stage_ms": {"decode": 2.0, "infer": infer, "track": 1.0}}})
    stages("batch4", 8.0)
    stages("ort_int8", 2.0)
    stages("interval4", 4.0, k=4)
    _, decided = optimize.decisions("small")
    est = optimize.estimate(decided, "small", knee="interval4", flags={"queues": True})
    assert est["predicted_speedup"] == pytest.approx(2.0)
    assert "'infer' 0.25 of its time" in est["finding"] and "over 2 cores" in est["finding"]


def test_within_the_floor_allows_half_a_point_under_it():
    """The full CPU lab (2026-11-26): the knee K=5 had MOTA 0.9473 and `optimized` (INT8 at K=5) 0.9471,
    INT8's own cost; half a MOTA point under the floor still counts, a point does not, and a missing
    value never does."""
    from labbook.interval import FLOOR_SLACK, within_floor

    assert within_floor(0.9471, 0.9473) and within_floor(0.9473 - FLOOR_SLACK, 0.9473)
    assert not within_floor(0.9373, 0.9473) and not within_floor(float("nan"), 0.9) and not within_floor(None, 0.9)
    assert within_floor(0.1, None)  # no floor yet
