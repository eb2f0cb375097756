"""detect_video.py --decode-only: the same sources decoded by the same decoder threads, nothing else.

Real clips (source_code.scenes, 320x192, 30 fps, 1 s) decoded by OpenCV; the CLI runs as a
subprocess the way the lab runs it, with $LABKIT_REPORTS (the default output folder) and
--cache-dir pointing into tmp_path.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from source_code.stages import STAGES
from source_code.scenes import SceneConfig, make_video

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "source_code" / "detect_video.py"
CLIP_FRAMES = 30  # 1 s at SceneConfig's default 30 fps


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    d = tmp_path_factory.mktemp("decode_only_clips")
    video, gt = make_video(d / "clip.mp4", seconds=1.0, config=SceneConfig(seed=3, width=320, height=192))
    assert video.is_file() and gt.is_file()
    return video


def cli(tmp_path: Path, *args: str, timeout: float = 120):
    """Run the real CLI with a results file; return (exit code, stderr lines, stdout, results doc or None)."""
    res = tmp_path / "r.json"
    env = {**os.environ, "LABKIT_REPORTS": str(tmp_path / "reports")}
    env.pop("LABKIT_DEBUG", None)
    argv = [sys.executable, str(APP), *args, "--results", str(res), "--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    err = [line for line in r.stderr.splitlines() if line.strip()]
    doc = json.loads(res.read_text()) if res.exists() else None
    return r.returncode, err, r.stdout, doc


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def assert_decode_only_doc(doc: dict, *, frames: int, streams: int, queues: bool) -> None:
    assert doc["status"] == "ok", doc["warnings"]
    assert doc["frames"] == frames
    assert 0 < doc["timed_frames"] <= frames
    assert doc["warmup_frames"] == frames - doc["timed_frames"]
    assert isinstance(doc["fps"], (int, float)) and doc["fps"] > 0
    assert doc["seconds"] > 0
    # stages: every stage named, only decode measured
    assert set(doc["stages"]) == set(STAGES)
    assert isinstance(doc["stages"]["decode"], (int, float)) and doc["stages"]["decode"] > 0
    assert all(doc["stages"][s] is None for s in STAGES if s != "decode"), doc["stages"]
    assert set(doc["stage_detail"]) - {"queue_wait"} == {"decode"}  # a wait on a queue is no stage
    acc = doc["accuracy"]
    assert all(acc[k] is None for k in ("map50", "mota", "idf1", "hota"))
    assert "decode-only" in acc["note"]
    cfg = doc["config"]
    assert cfg["decode_only"] is True
    assert cfg["streams"] == streams and cfg["queues"] is queues
    assert cfg["output"] is None
    assert doc["output_frames"] == 0
    assert doc["model"] is None
    assert 0 < doc["latency_ms"]["p50"] <= doc["latency_ms"]["p99"]


def test_decode_only_two_queued_streams(clip, tmp_path):
    rc, err, out, doc = cli(tmp_path, "--input", str(clip), "--decode-only", "--streams", "2", "--queues",
                            "--frames", "12", "--warmup", "2")
    assert rc == 0, err
    assert_decode_only_doc(doc, frames=2 * 12, streams=2, queues=True)
    # batch 1: the first 2 batches are warm-up; frames the decoder threads read during warm-up are
    # carried into the window, not timed. Two decoder queues hold 2 x (4 + 1) frames: more than 10 %
    # of 22 timed frames, so the run says it is too short to measure throughput (one line).
    assert doc["timed_frames"] + doc["carried_frames"] == 2 * 12 - 2
    assert doc["capacity_frames"] == 1 + 2 * 5 and doc["too_short"] is True
    assert len(doc["warnings"]) == 1 and doc["warnings"][0].startswith("too short to measure throughput")
    assert len(err) == 1 and "too short to measure throughput" in err[0]
    # one summary line, no video mentioned, nothing written to the default output folder
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ok: 24 frames") and "video" not in lines[0]
    assert files_under(tmp_path / "reports") == []
    assert not (tmp_path / "reports" / "clip.tracked.mp4").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) in (["r.json"], ["cache", "r.json"])


@pytest.mark.parametrize("flags, streams, queues, per_stream", [
    ([], 1, False, 12),                                  # one source decoded in the main thread
    (["--batch-size", "4"], 1, False, 12),               # main thread, batches of 4
    (["--streams", "3", "--batch-size", "2"], 3, False, 12),  # three decoder threads
    (["--queues"], 1, True, None),                       # the whole clip, one decoder thread
], ids=["sync", "sync-batch4", "streams3-batch2", "queued-whole-clip"])
def test_decode_only_flag_combinations(clip, tmp_path, flags, streams, queues, per_stream):
    frames = ["--frames", str(per_stream)] if per_stream else []
    rc, err, _, doc = cli(tmp_path, "--input", str(clip), "--decode-only", *frames, "--warmup", "2", *flags)
    assert rc == 0, err
    assert_decode_only_doc(doc, frames=streams * (per_stream or CLIP_FRAMES), streams=streams, queues=queues)
    assert files_under(tmp_path / "reports") == []


def test_decode_only_needs_no_model(clip, tmp_path):
    """Nothing but decoding: weights that do not exist are never loaded (a full run exits 3)."""
    rc, err, _, doc = cli(tmp_path, "--input", str(clip), "--decode-only", "--frames", "6", "--warmup", "1",
                          "--weights", str(tmp_path / "missing.pt"))
    assert rc == 0, err
    assert doc["model"] is None and doc["config"]["backend_name"].startswith("none")
    assert not (tmp_path / "cache" / "flops.json").exists()  # no FLOPs counted: no model built


def test_decode_only_with_explicit_output_writes_no_video(clip, tmp_path):
    out = tmp_path / "out" / "never.mp4"
    rc, err, _, doc = cli(tmp_path, "--input", str(clip), "--decode-only", "--frames", "6", "--warmup", "1",
                          "--output", str(out))
    assert rc == 0, err
    assert doc["output_frames"] == 0
    assert not out.exists()


def test_missing_input_exit_2_one_line(tmp_path):
    missing = tmp_path / "nope.mp4"
    rc, err, out, doc = cli(tmp_path, "--input", str(missing), "--decode-only")
    assert rc == 2
    assert err == [f"detect_video: error: input not found: {missing}"]
    assert out == ""
    assert doc is None or doc["status"] == "failed"


def test_corrupt_mp4_fails_clearly(clip, tmp_path):
    bad = tmp_path / "corrupt.mp4"
    bad.write_bytes(clip.read_bytes()[:300])
    rc, err, out, doc = cli(tmp_path, "--input", str(bad), "--decode-only", "--streams", "2", "--queues")
    assert rc == 1
    assert len(err) == 1 and err[0].startswith("detect_video: error:")
    assert "not a readable video" in err[0] or "no decodable frames" in err[0]
    assert str(bad) in err[0]
    assert not out.strip()  # no success summary line
    assert doc is not None and doc["status"] == "failed" and "fps" not in doc
    assert files_under(tmp_path / "reports") == []


def test_damaged_midway_is_partial_and_keeps_frames(tmp_path):
    # MJPG .avi decodes up to the damage (an mp4v .mp4 keeps its index at the end and would not open)
    video, _ = make_video(tmp_path / "long.avi", seconds=3, config=SceneConfig(seed=3, width=320, height=192, fps=10))
    data = video.read_bytes()
    video.write_bytes(data[: int(len(data) * 0.6)])
    rc, err, _, doc = cli(tmp_path, "--input", str(video), "--decode-only", "--warmup", "2")
    assert rc == 0, err
    assert doc["status"] == "partial"
    assert 2 < doc["frames"] < 30 and doc["fps"] > 0
    assert any("decoding stopped" in w for w in doc["warnings"])
    assert any("warning" in line and "decoding stopped" in line for line in err)


def test_warmup_covering_the_run_still_times_like_the_full_pipeline(clip, tmp_path):
    rc, err, _, doc = cli(tmp_path, "--input", str(clip), "--decode-only", "--frames", "5", "--warmup", "10")
    assert rc == 0, err
    assert doc["fps"] is not None and doc["fps"] > 0
    assert any("warm-up" in w for w in doc["warnings"])
