"""SORT-like tracker on hand-built detections."""
from __future__ import annotations

import numpy as np
import pytest

from source_code.tracker import Tracker


def det(x, y, w=40, h=20, score=0.9, cls=0):
    return [x, y, x + w, y + h, score, cls]


def test_constant_velocity_keeps_one_id():
    tr = Tracker(min_hits=2)
    ids = set()
    for t in range(30):
        out = tr.update(np.array([det(10 + 5 * t, 50), det(300 - 4 * t, 120, cls=1)]))
        ids |= set(out[:, 5].astype(int))
    assert ids == {1, 2}


def test_min_hits_delays_birth_after_the_first_updates():
    tr = Tracker(min_hits=3)
    for t in range(5):  # the first min_hits updates report immediately (as SORT does)
        tr.update(np.array([det(10 + t, 10)]))
    assert len(tr.update(np.array([det(15, 10), det(200, 200)]))) == 1  # new track not yet confirmed
    assert len(tr.update(np.array([det(16, 10), det(200, 200)]))) == 1
    assert len(tr.update(np.array([det(17, 10), det(200, 200)]))) == 2


def test_max_age_deletes_lost_tracks_and_ids_are_not_reused():
    tr = Tracker(min_hits=1, max_age=3)
    tr.update(np.array([det(10, 10)]))
    for _ in range(4):
        tr.update(np.zeros((0, 6)))
    assert tr.tracks == []
    out = tr.update(np.array([det(10, 10)]))
    assert out[0, 5] == 2


def test_predict_moves_boxes_along_velocity():
    tr = Tracker(min_hits=1)
    for t in range(10):
        tr.update(np.array([det(10 + 6 * t, 50)]))
    last = 10 + 6 * 9
    p1 = tr.predict()
    p2 = tr.predict()
    assert len(p1) == len(p2) == 1 and p1[0, 5] == 1
    assert p1[0, 0] == pytest.approx(last + 6, abs=1.5)
    assert p2[0, 0] == pytest.approx(last + 12, abs=2.5)
    out = tr.update(np.array([det(last + 18, 50)]))  # re-detected after two predicted frames
    assert out[0, 5] == 1


def test_classes_never_swap_tracks():
    tr = Tracker(min_hits=1)
    tr.update(np.array([det(10, 10, cls=0)]))
    out = tr.update(np.array([det(10, 10, cls=1)]))
    assert out[0, 5] == 2 and out[0, 4] == 1


def test_low_score_detections_continue_but_do_not_start_tracks():
    tr = Tracker(min_hits=1, high_thresh=0.5, low_thresh=0.1)
    tr.update(np.array([det(10, 10, score=0.9)]))
    out = tr.update(np.array([det(12, 10, score=0.2), det(200, 100, score=0.3)]))
    assert out[:, 5].tolist() == [1.0]


def test_output_columns():
    out = Tracker().update(np.array([det(1, 2, 3, 4, 0.7, 1)]))
    assert out.shape == (1, 7)
    assert out[0].tolist() == pytest.approx([1, 2, 4, 6, 1, 1, 0.7])
