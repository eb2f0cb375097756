"""Synthetic scenes: determinism, ground-truth format and the visibility rule."""
from __future__ import annotations

import csv
import subprocess
import sys

import cv2
import numpy as np
import pytest

from source_code.scenes import (CLASS_NAMES, GT_HEADER, VISIBILITY_MIN, Scene, SceneConfig, generate_frames,
                                gt_path_for, make_video, read_gt)

SMALL = SceneConfig(seed=5, width=320, height=192)


def test_same_config_gives_same_pixels_and_ground_truth():
    a = list(generate_frames(SMALL, 12))
    b = list(generate_frames(SMALL, 12))
    for (_, img_a, rows_a), (_, img_b, rows_b) in zip(a, b):
        assert np.array_equal(img_a, img_b)
        assert rows_a == rows_b


def test_different_seeds_differ():
    _, img_a, _ = next(generate_frames(SMALL, 1))
    _, img_b, _ = next(generate_frames(SceneConfig(seed=6, width=320, height=192), 1))
    assert not np.array_equal(img_a, img_b)


def test_rows_respect_visibility_rule_and_frame():
    cfg = SceneConfig(seed=2)
    for _, img, rows in generate_frames(cfg, 60):
        assert img.shape == (720, 1280, 3) and img.dtype == np.uint8
        for r in rows:
            assert r["visibility"] >= VISIBILITY_MIN
            assert 0 <= r["x1"] < r["x2"] <= 1280 and 0 <= r["y1"] < r["y2"] <= 720
            assert r["x2"] - r["x1"] >= 4 and r["y2"] - r["y1"] >= 4
            assert r["class_name"] == CLASS_NAMES[r["class_id"]]
            assert r["kind"] in ("car", "truck", "bus", "person")


def test_objects_enter_and_leave_and_keep_ids():
    ids_per_frame = [{r["track_id"] for r in rows} for _, _, rows in generate_frames(SceneConfig(seed=4), 150)]
    first, last = ids_per_frame[0], ids_per_frame[-1]
    assert last - first, "no object entered in 5 s"
    assert first - last, "no object left in 5 s"
    assert all(len(s) >= 5 for s in ids_per_frame), "scene too empty"


def test_both_classes_and_all_vehicle_kinds_appear():
    kinds, classes = set(), set()
    for _, _, rows in generate_frames(SceneConfig(seed=1, density=1.5), 150):
        kinds |= {r["kind"] for r in rows}
        classes |= {r["class_id"] for r in rows}
    assert classes == {0, 1}
    assert {"car", "person"} <= kinds and ({"truck", "bus"} & kinds)


def test_occlusion_hides_objects():
    """Some object is present but below the visibility threshold in some frame (occluded or leaving)."""
    scene = Scene(SceneConfig(seed=3))
    hidden = 0
    for _ in range(90):
        _, rows = scene.render()
        present = {o.track_id for o in scene.objects}
        hidden += len(present - {r["track_id"] for r in rows})
        scene.step()
    assert hidden > 0


def test_make_video_writes_video_and_gt(tmp_path):
    video, gt = make_video(tmp_path / "clip.mp4", seconds=0.5, config=SMALL)
    assert gt == gt_path_for(video) == tmp_path / "clip.gt.csv"
    cap = cv2.VideoCapture(str(video))
    n = 0
    while cap.read()[0]:
        n += 1
    assert n == 15
    with gt.open() as f:
        header = next(csv.reader(f))
    assert tuple(header) == GT_HEADER
    frames = read_gt(gt)
    assert set(frames) <= set(range(15))
    assert all(a.shape[1] == 6 for a in frames.values())


def test_read_gt_rejects_other_csv(tmp_path):
    p = tmp_path / "x.gt.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a ground-truth file"):
        read_gt(p)


def test_make_video_cli(tmp_path):
    out = tmp_path / "cli.mp4"
    r = subprocess.run([sys.executable, "source_code/make_video.py", "--out", str(out), "--seconds", "0.2",
                        "--seed", "9", "--width", "256", "--height", "160", "--fps", "10", "--density", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.is_file() and (tmp_path / "cli.gt.csv").is_file()
    cap = cv2.VideoCapture(str(out))
    assert int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)) == 256 and int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)) == 160


def test_make_video_cli_rejects_bad_size(tmp_path):
    r = subprocess.run([sys.executable, "source_code/make_video.py", "--out", str(tmp_path / "x.mp4"), "--width", "8"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
