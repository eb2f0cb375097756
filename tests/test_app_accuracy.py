"""End-to-end accuracy of the shipped detector + tracker on an unseen generated clip (CPU)."""
from __future__ import annotations

import json

import pytest

from source_code.detect_video import main
from source_code.scenes import SceneConfig, make_video


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    # seed 77 is an evaluation seed: training uses seeds >= 100000
    video, _ = make_video(tmp_path_factory.mktemp("acc") / "eval77.mp4", seconds=2, config=SceneConfig(seed=77))
    return video


@pytest.mark.parametrize("interval, min_mota", [(1, 0.80), (3, 0.70)])
def test_accuracy_at_full_resolution(clip, tmp_path, interval, min_mota):
    res = tmp_path / "r.json"
    rc = main(["--input", str(clip), "--device", "cpu", "--no-osd", "--batch-size", "4", "--interval", str(interval),
               "--results", str(res)])
    assert rc == 0
    acc = json.loads(res.read_text())["accuracy"]
    assert acc["map50"] >= 0.90
    assert acc["mota"] >= min_mota
    assert acc["idf1"] >= 0.6 and acc["hota"] >= 0.5
