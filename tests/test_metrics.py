"""source_code.metrics (an adapter over pycocotools and TrackEval) against hand-computed values and
against the libraries called directly as their own documentation does.

The reference case is real: ground truth of a generated clip (seed 21, 1 s at 640x360) and the
shipped detector's output on it, tracked by our tracker; plus a version with swapped identities.
"""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch

from source_code.detector import CLASS_NAMES, INPUT_HW, decode, load_detector, preprocess_frames, scale_boxes
from source_code.metrics import box_iou, map50, tracking_metrics, trackeval_data
from source_code.scenes import SceneConfig, generate_frames
from source_code.tracker import Tracker

EMPTY = np.zeros((0, 6))


# ----------------------------------------------------------------------------- hand-built
def test_box_iou_values():
    a = np.array([[0, 0, 10, 10]])
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]])
    assert box_iou(a, b)[0].tolist() == pytest.approx([1.0, 50 / 150, 0.0])
    assert box_iou(np.zeros((0, 4)), b).shape == (0, 3)


def test_map50_perfect_and_half():
    gt = [np.array([[0, 0, 10, 10, 0], [20, 20, 30, 30, 1]])]
    perfect = [np.array([[0, 0, 10, 10, 0.9, 0], [20, 20, 30, 30, 0.8, 1]])]
    assert map50(gt, perfect, num_classes=2)["map50"] == pytest.approx(1.0)
    # class 1 missed entirely, an extra false positive for class 0 below the true one
    half = [np.array([[0, 0, 10, 10, 0.9, 0], [50, 50, 60, 60, 0.5, 0]])]
    r = map50(gt, half, num_classes=2, class_names=CLASS_NAMES)
    assert r["per_class"] == {"vehicle": pytest.approx(1.0), "pedestrian": 0.0}
    assert r["map50"] == pytest.approx(0.5)


def test_map50_class_without_ground_truth_is_left_out():
    gt = [np.array([[0, 0, 10, 10, 0]])]
    det = [np.array([[0, 0, 10, 10, 0.9, 0], [40, 40, 50, 50, 0.9, 1]])]
    r = map50(gt, det, num_classes=2)
    assert r["per_class"]["1"] is None and r["map50"] == pytest.approx(1.0)


def test_tracking_perfect_and_one_switch():
    gt = [np.array([[0, 0, 10, 10, 0, 7], [50, 0, 60, 10, 0, 8]]) for _ in range(4)]
    assert tracking_metrics(gt, gt, class_names=["a"])["mota"] == pytest.approx(1.0)
    r = tracking_metrics(gt, gt, class_names=["a"])
    assert r["idf1"] == pytest.approx(1.0) and r["hota"] == pytest.approx(1.0)
    trk = [g.copy() for g in gt]
    for t in trk[2:]:
        t[0, 5] = 99  # identity switch on object 7 at frame 2
    r = tracking_metrics(gt, trk, class_names=["a"])
    assert r["counts"]["IDSW"] == 1
    assert r["mota"] == pytest.approx((8 - 0 - 1) / 8)
    assert r["idf1"] == pytest.approx(2 * 6 / 16)


def test_tracking_empty_tracker():
    gt = [np.array([[0, 0, 10, 10, 0, 1]])] * 3
    r = tracking_metrics(gt, [EMPTY] * 3, class_names=["a"])
    assert r["mota"] == 0.0 and r["idf1"] == 0.0 and r["hota"] == 0.0


# ----------------------------------------------------------------------------- real case
@pytest.fixture(scope="module")
def real_case():
    """GT, raw detections and tracks of the shipped detector on a generated clip."""
    model = load_detector()
    gts, dets, tracks = [], [], []
    tr = Tracker()
    for _, img, rows in generate_frames(SceneConfig(seed=21, width=640, height=360), 24):
        with torch.no_grad():
            out = model(torch.from_numpy(preprocess_frames([img], INPUT_HW)))
        d = scale_boxes(decode(out, score_thresh=0.05, max_det=100)[0], INPUT_HW, img.shape[:2])
        t = tr.update(d)
        gts.append(np.array([[r["x1"], r["y1"], r["x2"], r["y2"], r["class_id"], r["track_id"]] for r in rows]).reshape(-1, 6))
        dets.append(d)
        tracks.append(np.concatenate([t[:, :4], t[:, 4:6]], 1))
    return gts, dets, tracks


def _coco_map50(gts, dets):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images = [{"id": i + 1, "width": 640, "height": 360} for i in range(len(gts))]
    anns = [{"id": k + 1, "image_id": i + 1, "category_id": int(b[4]) + 1, "iscrowd": 0,
             "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]], "area": (b[2] - b[0]) * (b[3] - b[1])}
            for k, (i, b) in enumerate((i, b) for i, g in enumerate(gts) for b in g)]
    cats = [{"id": c + 1, "name": n} for c, n in enumerate(CLASS_NAMES)]
    res = [{"image_id": i + 1, "category_id": int(b[5]) + 1, "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]),
            float(b[3] - b[1])], "score": float(b[4])} for i, d in enumerate(dets) for b in d]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = {"images": images, "annotations": anns, "categories": cats}
        coco.createIndex()
        ev = COCOeval(coco, coco.loadRes(res), "bbox")
        ev.params.iouThrs = np.array([0.5])
        ev.params.maxDets = [100]
        ev.params.areaRng = [[0, 1e10]]
        ev.params.areaRngLbl = ["all"]
        ev.evaluate()
        ev.accumulate()
    p = ev.eval["precision"][0, :, :, 0, 0]  # (recall thresholds, classes)
    per_class = [float(p[:, k].mean()) if (p[:, k] > -1).all() else None for k in range(p.shape[1])]
    return float(p[p > -1].mean()), per_class


def test_map50_matches_pycocotools(real_case):
    gts, dets, _ = real_case
    ours = map50([g[:, :5] for g in gts], dets, num_classes=2, class_names=CLASS_NAMES)
    ref, ref_per_class = _coco_map50(gts, dets)
    assert ours["map50"] == pytest.approx(ref, abs=1e-9)
    assert [ours["per_class"][n] for n in CLASS_NAMES] == pytest.approx(ref_per_class, abs=1e-9)
    assert ours["map50"] > 0.5  # the shipped detector works on an unseen scene


def _trackeval(gts, tracks):
    trackeval = pytest.importorskip("trackeval")
    metrics = [trackeval.metrics.CLEAR({"PRINT_CONFIG": False}), trackeval.metrics.Identity({"PRINT_CONFIG": False}),
               trackeval.metrics.HOTA({"PRINT_CONFIG": False})]
    per_class = {}
    for c, name in enumerate(CLASS_NAMES):
        data = trackeval_data(gts, tracks, c)
        per_class[name] = {}
        for m in metrics:
            per_class[name].update(m.eval_sequence(data))
    combined = {}
    for m in metrics:
        combined.update(m.combine_classes_det_averaged(per_class))
    return per_class, combined


@pytest.mark.parametrize("variant", ["tracker", "swapped_ids"])
def test_tracking_metrics_match_trackeval(real_case, variant):
    gts, _, tracks = real_case
    if variant == "swapped_ids":  # exchange two identities half-way, to exercise IDSW and association
        tracks = [t.copy() for t in tracks]
        for t in tracks[12:]:
            a, b = t[:, 5] == 1, t[:, 5] == 2
            t[a, 5], t[b, 5] = 2, 1
    ours = tracking_metrics(gts, tracks, class_names=CLASS_NAMES)
    ref_per_class, ref = _trackeval(gts, tracks)
    assert ours["mota"] == pytest.approx(ref["MOTA"], abs=1e-9)
    assert ours["idf1"] == pytest.approx(ref["IDF1"], abs=1e-9)
    assert ours["hota"] == pytest.approx(float(np.mean(ref["HOTA"])), abs=1e-9)
    for name in CLASS_NAMES:
        assert ours["per_class"][name]["mota"] == pytest.approx(ref_per_class[name]["MOTA"], abs=1e-9)
        assert ours["per_class"][name]["hota"] == pytest.approx(float(np.mean(ref_per_class[name]["HOTA"])), abs=1e-9)
    assert ours["counts"]["IDSW"] == sum(ref_per_class[n]["IDSW"] for n in CLASS_NAMES)
