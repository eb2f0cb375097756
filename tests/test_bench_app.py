"""bench against the real application, source_code/detect_video.py, on a generated clip (CPU).

A 2 s 640x360 clip, 24 frames (long enough to time: Little's law, see source_code.runner) at a 192x320 network input; a few s per run on
2 CPU cores.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from labkit import bench, speedup_table
from labkit.bench.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "source_code" / "detect_video.py"
pytestmark = pytest.mark.skipif(not APP.exists(), reason=f"{APP.relative_to(ROOT)} does not exist yet")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    out = tmp_path_factory.mktemp("clip") / "clip.mp4"
    subprocess.run([sys.executable, str(ROOT / "source_code" / "make_video.py"), "--out", str(out),
                    "--seconds", "2", "--seed", "7", "--width", "640", "--height", "360"],
                   check=True, capture_output=True, cwd=ROOT)
    return out


def _command(clip, *extra):
    return [sys.executable, str(APP), "--input", str(clip), "--frames", "24", "--device", "cpu", "--no-osd",
            "--input-hw", "192x320", "--batch-size", "2", *extra]


def test_run_real_app_into_ledger(clip, tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    r = bench.run(_command(clip), step="baseline", repeats=2, warmup=2, results_dir=tmp_path / "results",
                  ledger=led, progress=False, timeout=300)
    assert r.ok, r.flags
    assert len(r.repeats) == 2 and (r.repeats["status"] == "ok").all()
    assert (r.repeats["fps"] > 0).all() and r.fps == pytest.approx(r.repeats["fps"].median())
    assert 0 <= r.spread < 2
    assert 0 < r.latency_p50_ms <= r.latency_p99_ms
    # the app's own stage names, in ms per frame
    assert {"stage_ms.decode", "stage_ms.preprocess", "stage_ms.infer", "stage_ms.postprocess",
            "stage_ms.track"} <= set(r.metrics)
    assert r.metrics["stage_ms.infer"] > 0
    for p in r.results_paths:
        doc = json.loads(p.read_text())
        assert doc["status"] == "ok" and doc["warmup_frames"] >= 2 and doc["frames"] == 24
    df = led.read()
    assert df["step"].tolist() == ["baseline"]
    assert df.loc[0, "config.batch_size"] == 2 and df.loc[0, "config.device"] == "cpu"
    assert df.loc[0, "fps"] == pytest.approx(r.fps)
    for acc in ("map50", "mota", "idf1", "hota"):
        assert acc in df.columns
    assert speedup_table(led.path).speedup.iloc[0, 0] == 1.0


def test_real_app_failure_shows_its_stderr(tmp_path):
    with pytest.raises(bench.BenchError) as info:
        bench.run(_command(tmp_path / "missing.mp4"), step="broken", repeats=1, results_dir=tmp_path,
                  progress=False, timeout=120)
    msg = str(info.value)
    assert "the application exited with status" in msg
    assert "detect_video: error:" in msg and "missing.mp4" in msg


def test_run_parallel_real_app(clip, tmp_path):
    r = bench.run_parallel(_command(clip), processes=2, step="np2", warmup=2, results_dir=tmp_path,
                           progress=False, timeout=300)
    assert r.ok, r.flags
    assert len(r.repeats) == 2
    assert r.fps == pytest.approx(r.repeats["fps"].sum())
    assert r.metrics["frames"] == 48  # 2 processes x 24 frames
    assert 0 < r.metrics["fps_wall"] < r.fps  # start-up and warm-up are inside the wall time
    # the aggregate's interval: the sum of each process's own
    docs = [json.loads(Path(p).read_text()) for p in r.repeats["results"]]
    assert r.metrics["fps_ci_low"] == pytest.approx(sum(d["fps_ci95"][0] for d in docs))
    assert r.metrics["fps_ci_high"] == pytest.approx(sum(d["fps_ci95"][1] for d in docs))
    assert 0 < r.metrics["fps_ci_low"] < r.metrics["fps_ci_high"]
    assert r.metrics["too_short"] is False


def test_sweep_records_a_failing_value_and_goes_on(clip, tmp_path):
    """A value the application rejects (batch size 0 here; out of memory at the largest batch on
    a GPU) is a row with ok False and the application's error line, not a stopped sweep."""
    led = Ledger(tmp_path / "ledger.jsonl")
    with pytest.warns(bench.BenchWarning, match="--batch-size must be at least 1"):
        df = bench.sweep(_command(clip), "--batch-size", [0, 2], step="batch{value}", repeats=1, warmup=2,
                         results_dir=tmp_path / "results", ledger=led, progress=False, timeout=300)
    assert list(df["ok"]) == [False, True] and list(df["step"]) == ["batch0", "batch2"]
    assert df.loc[0, "error"] == "the application exited with status 2: detect_video: error: --batch-size must be at least 1 (got 0)"
    assert pd.isna(df.loc[0, "fps"]) and df.loc[1, "fps"] > 0 and pd.isna(df.loc[1, "error"])
    rows = led.read()  # a failure is a ledger row with its status and reason, not a measurement
    assert list(rows["step"]) == ["batch0", "batch2"] and list(rows["status"]) == ["failed", "ok"]
    assert rows.loc[0, "reason"] == df.loc[0, "error"] and pd.isna(rows.loc[0, "fps"])
    assert rows.loc[0, "config.batch_size"] == 0  # parsed from the argv: no config= given

    with pytest.raises(bench.BenchError, match="exited with status 2"):
        bench.sweep(_command(clip), "--batch-size", [0], step="b{value}", on_error="raise", repeats=1,
                    results_dir=tmp_path / "results", progress=False, timeout=300)


def test_sweep_of_commands_built_from_options_records_them_as_given(clip, tmp_path):
    """The lab's way: each value's argv built from an options dict (no argv editing); the ledger
    keeps that dict as config (with the warm-up bench added) and the labels as top-level fields."""
    led = Ledger(tmp_path / "ledger.jsonl")
    base = _command(clip)
    df = bench.sweep(lambda v: base + ["--batch-size", str(v)], "batch_size", [2], step="b{value}", repeats=1,
                     warmup=2, results_dir=tmp_path / "results", ledger=led, progress=False, timeout=300,
                     config={"device": "cpu"}, labels={"kind": "sweep", "builds_on": "baseline"})
    assert list(df["ok"]) == [True]
    row = led.rows()[-1]
    assert row["config"] == {"device": "cpu", "batch_size": 2, "warmup": 2}
    assert (row["step"], row["kind"], row["builds_on"], row["status"]) == ("b2", "sweep", "baseline", "ok")


@pytest.mark.nsys
def test_profiled_run_records_only_the_capture_range(clip, tmp_path):
    """capture_range reaches nsys: with the NVTX range 'infer' as the capture range (and nsys
    stopping at its end), the report holds the first batch's 'infer' and nothing before it."""
    import labkit

    r = bench.run(_command(clip), step="captured", repeats=1, warmup=2, profile=True, capture_range="infer",
                  results_dir=tmp_path / "results", profile_dir=tmp_path / "profiles", progress=False, timeout=300)
    rep = labkit.load_report(r.profile.with_suffix(".sqlite"))
    names = rep.nvtx.loc[rep.nvtx["kind"] == "push_pop", "name"]
    assert list(names[names == "infer"].index) and (names == "infer").sum() == 1, names.tolist()
    assert "decode" not in set(names)  # the first batch was decoded before the capture began
    whole = bench.run(_command(clip), step="whole", repeats=1, warmup=2, profile=True,
                      results_dir=tmp_path / "results", profile_dir=tmp_path / "profiles", progress=False, timeout=300)
    every = labkit.load_report(whole.profile.with_suffix(".sqlite")).nvtx
    assert (every["name"] == "infer").sum() == 12 and (every["name"] == "decode").sum() >= 12  # 24 frames, batch 2
