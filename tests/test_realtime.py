"""--realtime: each source paced at its frame rate, as a camera; latency is then batch fill
(about (batch-1)/fps for a batch's first frame) plus processing, not the backlog of a file read
as fast as it decodes. Real clip (10 fps), real detector at 96x160, measured in the results."""
from __future__ import annotations

import json

import pytest

from source_code.detect_video import main
from source_code.scenes import SceneConfig, make_video

FPS, BATCH, N = 10, 4, 24
pytestmark = pytest.mark.serial  # its latency is the wall clock's: alone on the machine (tests/conftest.py)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    video, _ = make_video(tmp_path_factory.mktemp("rt") / "clip.mp4", seconds=N / FPS,
                          config=SceneConfig(seed=23, width=320, height=192, fps=FPS))
    return video


def run(clip, tmp_path, *flags):
    res = tmp_path / "r.json"
    assert main(["--input", str(clip), "--input-hw", "96x160", "--device", "cpu", "--warmup", str(2 * BATCH),
                 "--batch-size", str(BATCH), "--no-osd", "--results", str(res),
                 "--cache-dir", str(tmp_path.parent / "cache"), *flags]) == 0  # the cache shared by the tests
    return json.loads(res.read_text())


@pytest.mark.parametrize("mode", [[], ["--queues", "--queue-size", "2"]], ids=["sync", "queued"])
def test_paced_latency_is_batch_fill(clip, tmp_path, mode):
    doc = run(clip, tmp_path, "--realtime", *mode)
    fill_ms = (BATCH - 1) / FPS * 1000  # the first frame of a batch waits for three more
    work_ms = sum(doc["stage_detail"][s]["mean_ms"] for s in ("preprocess", "infer", "postprocess", "track",
                                                               "display"))
    lat = doc["latency_ms"]
    assert fill_ms * 0.9 <= lat["p99"] <= fill_ms + 3 * work_ms + 100, (lat, work_ms)
    assert fill_ms / 3 <= lat["p50"] <= fill_ms * 2 / 3 + 3 * work_ms + 100, (lat, work_ms)
    # paced: the source, not the machine, sets the rate (timed from the end of a warm-up batch,
    # which may leave a frame or two queued, hence the margin)
    assert doc["fps"] < FPS * 1.4


def test_paced_run_takes_at_least_the_clips_own_time(clip, tmp_path):
    # a floor, not a ceiling: pacing holds each frame until its time, however fast the machine;
    # how much faster a file is read unpaced depends on the machine (benchmarks, not tests)
    doc = run(clip, tmp_path, "--realtime")
    assert doc["seconds"] >= (doc["timed_frames"] - 1) / FPS * 0.95, doc["seconds"]
