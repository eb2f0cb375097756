"""The recording plan (labbook.record_plan, ``record_reference.py plan``): the H200 reference fits the
device tool's time by design, every step's frames satisfy Little's law, the state fits by construction,
and repeats that produce the same output are scored once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from labbook import record_plan as R
from labbook.record_state import MAX_TAR, write_state
from labbook.settings import settings
from labbook.steps import catalogue
from source_code.results import THROUGHPUT_RULE

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "record_reference.py"


def plan_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "plan", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def test_the_h200_plan_fits_one_session_in_12_minutes_of_calls_of_8_and_says_what_it_cut():
    """The default plan (the H200 the device tool lends, from its own recording's measured step
    seconds): at most 12 minutes in calls of at most 8, each call's write-out inside it, one session;
    the steps that teach nothing there are cut, each with its reason, and every other step is run."""
    res = plan_cli("--json")
    assert res.returncode == 0, res.stderr
    p = json.loads(res.stdout)
    assert p["machine"] == "h200" and p["mode"] == "record" and p["fits"]
    assert p["total_minutes"] <= 12 and all(c["minutes"] <= 8 for c in p["calls"])
    assert p["limits"] == {"call_minutes": 8, "session_minutes": 15, "record_minutes": 12}
    assert p["sessions"] == [list(range(1, len(p["calls"]) + 1))]
    assert p["total_minutes"] == pytest.approx(sum(c["minutes"] for c in p["calls"]), abs=0.05)
    m = R.machine("h200")
    # the write-out is inside each call: its fixed cost is the recording's 88 s a call beside its steps
    assert m.call_s + m.clip_s + m.measured_s["baseline"] > 100 and m.call_s >= 50
    cut = p["cut"]
    assert set(cut) == {"ort_fp32", "ort_int8", "ranks2", "interval5", "interval10", "interval20", "compile",
                        "streams4"}
    assert "CPU" in cut["ort_fp32"] and "processes2" in cut["ranks2"] and "1.02x" in cut["compile"]
    assert "0.98x" in cut["streams4"] and "2, 3, 30" in cut["interval5"]
    order = [s for c in p["calls"] for s in c["steps"]]
    s = settings("record")
    late = [*(f"interval{k}" for k in sorted({*s.intervals, s.interval})), "optimized", "processes2", "ranks2"]
    every = ["decode_ceiling", *catalogue("record", gpu=True), *late]
    assert order == [n for n in every if n not in cut]  # every other step, in the driver's order
    assert {"fp16", "fp16_cuda_graphs", "decode_workers2", "tensorrt_fp16", "tensorrt_int8"} <= set(order)
    assert {n for n, st in p["steps"].items() if st["profiled"]} == set(R.RECORD_PROFILES)
    text = plan_cli()
    assert text.returncode == 0 and all(f"cut {n}: {why}" in text.stdout for n, why in cut.items())


def test_steps_asked_for_by_name_are_never_cut():
    p = R.plan("h200", names=["compile", "ranks2", "ort_fp32"])
    assert p["cut"] == {} and {"compile", "ranks2", "ort_fp32"} <= set(p["steps"])


def test_the_h100_model_still_fits_its_calls_and_covers_every_gpu_step():
    p = R.plan("h100")
    assert p["fits"] and all(c["minutes"] <= 9 for c in p["calls"])
    gpu = [n for n, st in catalogue("record", gpu=True).items() if st.flags.get("device") == "cuda"]
    assert set(gpu) <= {s for c in p["calls"] for s in c["steps"]}


def test_a_cpu_plan_and_an_unknown_model_are_one_line():
    res = plan_cli("--model", "cpu", "--mode", "small", "--steps", "baseline,queues,fp16")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("call 1:") and "cpu model" in res.stdout
    with pytest.raises(ValueError, match="choose one of h200, h100, cpu"):
        R.plan("a100")


def test_every_record_step_is_sized_by_what_its_queues_hold():
    """Little's law per step (as tests/test_modes.py checks per mode): the frames held are at most
    10 % of the frames timed; a synchronous step runs far fewer frames than a queued batch of 32."""
    s = settings("record")
    for step in R.planned_steps("record"):
        frames = R.frames_for(step.flags, "record")
        streams = int(step.flags.get("streams", 1))
        held = R.held_frames(step.flags)
        timed = streams * frames - s.warmup - held
        assert held <= THROUGHPUT_RULE * timed, (step.name, held, timed)
        assert R.MIN_FRAMES <= frames <= s.video_seconds * 30
    assert R.frames_for({}, "record") == R.MIN_FRAMES  # baseline: one frame held
    assert R.frames_for(catalogue("record")["batch32"].flags, "record") > 10 * R.MIN_FRAMES
    assert R.frames_for({}, "full") == settings("full").frames  # full mode keeps its settings
    small = [R.frames_for(st.flags, "small") for st in catalogue("small", gpu=False).values()]
    assert min(small) == R.MIN_FRAMES == R.frames_for({}, "small") and max(small) <= settings("small").frames
    assert R.frames_range("small", gpu=False) == (min(small), max(small)) and min(small) < max(small)


def test_a_state_group_too_large_is_left_out_and_the_next_still_travels(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "reports" / "results").mkdir(parents=True)
    out.mkdir()
    (work / "progress.json").write_text("{}")
    (work / "reports" / "ledger.jsonl").write_text("{}\n")
    big = work / "cache" / "backends"
    big.mkdir(parents=True)
    (big / "model.onnx").write_bytes(np.random.default_rng(0).bytes(MAX_TAR + 1))  # does not compress
    (work / "cache" / "inductor").mkdir(parents=True)
    (work / "cache" / "inductor" / "kernel.py").write_text("pass\n")
    assert write_state(work, out) == ["model cache"]
    with tarfile.open(out / "state.tgz") as t:
        names = t.getnames()
    assert "cache/inductor/kernel.py" in names and "progress.json" in names
    assert not any(n.startswith("cache/backends") for n in names) and not any(n.startswith("data") for n in names)
    assert (out / "state.tgz").stat().st_size <= MAX_TAR


def test_repeats_produce_the_same_output_and_are_scored_once(tmp_path):
    """Two runs of the same queued step on CPU give the same detections and tracks (the same digest),
    and the second reads the first's score back instead of scoring again."""
    from source_code.detect_video import main
    from source_code.scenes import SceneConfig, make_video

    video, _ = make_video(tmp_path / "clip.mp4", seconds=2.4, config=SceneConfig(seed=31, width=320, height=192, fps=10))
    docs = []
    for i in range(2):
        res = tmp_path / f"r{i}.json"
        argv = ["--input", str(video), "--input-hw", "96x160", "--device", "cpu", "--warmup", "2", "--queues",
                "--batch-size", "2", "--no-osd", "--cache-dir", str(tmp_path / "cache"), "--results", str(res)]
        assert main(argv) == 0
        docs.append(json.loads(res.read_text())["accuracy"])
    first, second = docs
    assert first["scored"] == "computed" and second["scored"] == "cached"
    assert first["output_digest"] == second["output_digest"]
    assert {k: first[k] for k in ("map50", "mota", "idf1", "hota")} == {k: second[k] for k in ("map50", "mota", "idf1", "hota")}
    assert first["map50"] is not None
