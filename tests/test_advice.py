"""labkit.advise on real exports: each rule fires on one real run and stays silent on another.

Runs (tests/fixtures/README.md says how each was recorded): the lab's CPU baseline (sync),
queued and interval-3 runs (reports/reference/cpu-2core, nsys 2022.4), the queued CPU fixture
(2022.4), the queued H100 pipeline and the gputest program (nsys 2025.3), and a decode-bound
CPU run (1080p, --interval 10, 2022.4) with the decode-only results of both clips.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from labkit import analysis
from labkit.advice import ADVICE_COLUMNS, AdviseError, advise, annotated_stages, next_lever
from source_code.stages import STAGES
from labkit.report import load_report

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
REF = ROOT / "reports" / "reference" / "cpu-2core"
GPUTEST_STAGES = ("batch", "infer", "torch_infer", "sync", "d2h")


@lru_cache(maxsize=None)
def rep(path: str):
    return load_report(path)


def baseline():
    return rep(str(REF / "baseline.sqlite"))


def h100():
    return rep(str(FIX / "pipeline.nsys2025.3.sqlite"))


def gputest():
    return rep(str(FIX / "gputest.nsys2025.3.sqlite"))


def cpu_queued():
    return rep(str(FIX / "pipeline.nsys2022.4.sqlite"))


def fps_of(name: str) -> float:
    return float(json.loads((FIX / name).read_text())["fps"])


def row(advice, rule: str):
    rows = advice[advice["rule"] == rule]
    assert len(rows) == 1, f"{rule} not found once in {list(advice['rule'])}"
    return rows.iloc[0]


def test_frame_shape_and_order():
    a = advise(baseline(), warmup=16)
    assert list(a.columns) == ADVICE_COLUMNS
    assert list(a["predicted_speedup"]) == sorted(a["predicted_speedup"], reverse=True)
    assert set(a["rule"]) == {"dominant_stage", "serial_stages", "removable_stage"}


def test_serial_stages_fires_on_the_sync_baseline_with_amdahls_bound():
    st = analysis.stage_table(baseline(), STAGES, warmup=16)
    r = row(advise(baseline(), warmup=16), "serial_stages")
    # all six stages on one thread, infer ~85 %: overlap gains at most total / infer (~1.18x)
    assert r["predicted_speedup"] == pytest.approx(st["cpu_ms"].sum() / st["cpu_ms"].max(), rel=0.01)
    assert 1.15 < r["predicted_speedup"] < 1.20
    assert r["lever"].startswith("--queues")


def test_serial_stages_silent_when_queued():
    assert "serial_stages" not in set(advise(rep(str(REF / "queues.sqlite")), warmup=16)["rule"])
    assert "serial_stages" not in set(advise(cpu_queued(), warmup=1)["rule"])


def test_dominant_stage_fires_on_infer_and_not_on_a_balanced_gpu_run():
    r = row(advise(baseline(), warmup=16), "dominant_stage")
    assert "'infer'" in r["finding"] and "85%" in r["evidence"]
    assert r["predicted_speedup"] == pytest.approx(1 / (1 - 0.85), rel=0.03)
    # H100 queued run past its warm-up: decode 43 %, infer 32 % of stage time
    assert "dominant_stage" not in set(advise(h100(), warmup=2)["rule"])


def test_removable_stage_display_fires_with_osd_and_not_with_no_osd():
    r = row(advise(baseline(), warmup=16), "removable_stage")
    assert r["lever"] == "--no-osd" and 1.05 < r["predicted_speedup"] < 1.12
    assert "removable_stage" not in set(advise(cpu_queued(), warmup=1)["rule"])  # recorded with --no-osd


def test_underfilled_batches_fires_with_interval_and_not_with_full_batches():
    r = row(advise(rep(str(REF / "interval3.sqlite")), warmup=4), "underfilled_batches")
    assert "28 calls on 37 frames at batch size 4: 33% full" in r["evidence"]
    assert r["predicted_speedup"] > 2
    assert "underfilled_batches" not in set(advise(cpu_queued(), warmup=1)["rule"])  # 20 frames, 5 calls of 4


def test_gpu_starved_fires_on_the_h100_pipeline_and_not_on_a_busy_gpu():
    r = row(advise(h100(), warmup=2), "gpu_starved")
    assert "GPU busy 5.2%" in r["evidence"]
    assert r["predicted_speedup"] == pytest.approx(1 / 0.052, rel=0.02)
    assert "gpu_starved" not in set(advise(gputest(), stages=GPUTEST_STAGES, warmup=1)["rule"])
    assert "gpu_starved" not in set(advise(baseline(), warmup=16)["rule"])  # no GPU at all


def test_launch_bound_fires_on_tiny_kernels_and_not_on_large_ones():
    r = row(advise(h100(), warmup=1), "launch_bound")
    assert "median 2.3 us" in r["evidence"]
    assert r["lever"].startswith("--cuda-graphs")
    assert "launch_bound" not in set(advise(gputest(), stages=GPUTEST_STAGES, warmup=1)["rule"])


def test_pageable_copies_fire_when_they_cost_and_not_when_negligible():
    r = row(advise(gputest(), stages=GPUTEST_STAGES, warmup=1), "pageable_copies")
    assert "9 Device-to-Host (2264.9 MB)" in r["evidence"]
    assert r["predicted_speedup"] > 5
    # the H100 pipeline has pageable copies in its loop (5 of 9.6 kB), far too small to matter
    ct = analysis.copy_table(h100(), warmup=1)
    assert (ct["host"] == "Pageable").any()
    assert "pageable_copies" not in set(advise(h100(), warmup=1)["rule"])


def test_sync_in_loop_fires_when_the_loop_waits_and_not_when_syncs_are_cheap():
    r = row(advise(gputest(), stages=GPUTEST_STAGES, warmup=1), "sync_in_loop")
    assert "cudaDeviceSynchronize x9" in r["evidence"]
    assert 1.05 <= r["predicted_speedup"] < 1.1  # bounded by the GPU's own work (busy ~93 %)
    api = h100().cuda_api
    assert (api["name"] == "cudaStreamSynchronize").sum() > 100  # many syncs, each returns at once
    assert "sync_in_loop" not in set(advise(h100(), warmup=1)["rule"])


def test_decode_bound_fires_near_the_ceiling_and_caps_every_other_bound():
    r = rep(str(FIX / "advise_decode_bound.nsys2022.4.sqlite"))
    free = advise(r, warmup=2)
    assert row(free, "dominant_stage")["finding"] == "One stage, 'decode', dominates"
    a = advise(r, warmup=2, decode_ceiling_fps=fps_of("advise_decode_bound.decode_only.results.json"),
               fps=fps_of("advise_decode_bound.nsys2022.4.results.json"))
    assert list(a["rule"]) == ["decode_bound"]
    assert a["predicted_speedup"].iloc[0] == 1.0


def test_decode_bound_silent_far_from_the_ceiling():
    ceiling, fps = fps_of("advise_pipeline.decode_only.results.json"), fps_of("pipeline.nsys2022.4.results.json")
    assert fps < 0.1 * ceiling
    a = advise(cpu_queued(), warmup=1, decode_ceiling_fps=ceiling, fps=fps)
    assert "decode_bound" not in set(a["rule"])
    assert row(a, "dominant_stage")["predicted_speedup"] > 5


def test_next_lever_names_the_top_finding():
    a = advise(baseline(), warmup=16)
    s = next_lever(baseline(), warmup=16)
    assert s.startswith(f"Next lever: {a['lever'].iloc[0]}.") and f"{a['predicted_speedup'].iloc[0]:.2f}x" in s


def test_no_stage_ranges_and_no_gpu_is_an_error_naming_the_fix():
    with pytest.raises(AdviseError, match="annotate the stages with labkit.annotate.range"):
        advise(rep(str(FIX / "domains.nsys2022.4.sqlite")))


def test_steady_fps_from_the_report_is_near_the_runs_own_fps():
    # without fps=, the last stage's frames over the steady window stand in for the results file's fps
    r = rep(str(FIX / "advise_decode_bound.nsys2022.4.sqlite"))
    ceiling = fps_of("advise_decode_bound.decode_only.results.json")
    a = advise(r, warmup=2, decode_ceiling_fps=ceiling)
    measured = fps_of("advise_decode_bound.nsys2022.4.results.json")
    shown = float(row(a, "decode_bound")["evidence"].split(" frames/s")[0])
    assert shown == pytest.approx(measured, rel=0.05)


def test_labkit_advise_is_the_function_and_stages_come_from_the_items_marks():
    import labkit

    assert labkit.advise(baseline(), warmup=16).equals(advise(baseline(), warmup=16, stages=STAGES))
    assert set(annotated_stages(baseline())) == set(STAGES)  # the sync baseline runs every stage

def test_bounds_from_the_reference_profiles_hold_for_the_measured_next_steps():
    # predict, then measure, on the committed CPU reference: each step's profile bounds the step
    # built on it (queues on baseline, no OSD on queues), fps from the reference ledger
    fps = {}
    for line in (REF / "ledger.reference.jsonl").read_text().splitlines():
        d = json.loads(line)
        fps[d["step"]] = d["metrics"]["fps"]
    queues_bound = row(advise(baseline(), warmup=16), "serial_stages")["predicted_speedup"]
    no_osd_bound = row(advise(rep(str(REF / "queues.sqlite")), warmup=16), "removable_stage")["predicted_speedup"]
    assert fps["queues"] / fps["baseline"] <= queues_bound  # 0.95x measured, 1.17x bound
    assert fps["no_osd"] / fps["queues"] <= no_osd_bound  # 1.07x measured, 1.08x bound (cores shared)
