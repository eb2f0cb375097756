"""Accuracy metrics: detection mAP@0.5 and tracking MOTA, IDF1, HOTA.

Our own NumPy/SciPy versions, written to give the same numbers as the reference tools:

- ``map50`` follows pycocotools' COCOeval (bbox, ``iouThrs=[0.5]``, ``maxDets=[100]``, area
  'all'): greedy matching by descending score, 101-point interpolated precision, averaged over
  the classes that have ground truth.
- ``clear``, ``identity`` and ``hota`` follow TrackEval's CLEAR, Identity and HOTA metrics on
  one sequence and one class (same data-dict layout as TrackEval, see ``trackeval_data``).
  ``tracking_metrics`` evaluates each class separately and combines the classes the way
  TrackEval's ``combine_classes_det_averaged`` does (sums of counts; AssA weighted by HOTA_TP).

tests/test_metrics.py checks both against pycocotools and TrackEval on a real clip.
Boxes are ``[x1, y1, x2, y2]`` in pixels, continuous (no +1), like COCO's IoU.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

_EPS = np.finfo("float").eps
HOTA_ALPHAS = np.arange(0.05, 0.99, 0.05)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (len(a), len(b)) of ``[x1, y1, x2, y2]`` boxes."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.maximum(iw, 0.0) * np.maximum(ih, 0.0)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


# ----------------------------------------------------------------------------- detection
def map50(gts: Sequence[np.ndarray], dets: Sequence[np.ndarray], *, num_classes: int,
          class_names: Sequence[str] | None = None, iou_thresh: float = 0.5, max_det: int = 100) -> dict:
    """COCO-style mAP at one IoU threshold.

    Args:
        gts: per image, array (K, >=5) ``[x1, y1, x2, y2, class_id, ...]``.
        dets: per image, array (M, 6) ``[x1, y1, x2, y2, score, class_id]``.
    Returns:
        ``{"map50": float or None, "per_class": {name: AP or None}, "num_gt": int, "num_det": int}``;
        a class without ground truth gets None and is left out of the mean (as in COCOeval).
    """
    if len(gts) != len(dets):
        raise ValueError(f"map50: {len(gts)} ground-truth images but {len(dets)} detection images")
    names = list(class_names) if class_names is not None else [str(c) for c in range(num_classes)]
    rec_thrs = np.linspace(0.0, 1.0, 101)
    t = min(iou_thresh, 1 - 1e-10)
    per_class: dict[str, float | None] = {}
    n_gt_total = n_det_total = 0
    for c in range(num_classes):
        scores, tps, n_gt = [], [], 0
        for g, d in zip(gts, dets):
            g = np.asarray(g, dtype=np.float64).reshape(-1, max(5, np.asarray(g).shape[-1] if np.asarray(g).size else 5))
            d = np.asarray(d, dtype=np.float64).reshape(-1, 6)
            gc = g[g[:, 4] == c, :4]
            dc = d[d[:, 5] == c]
            dc = dc[np.argsort(-dc[:, 4], kind="mergesort")][:max_det]
            n_gt += len(gc)
            if len(dc) == 0:
                continue
            matched = np.zeros(len(gc), bool)
            tp = np.zeros(len(dc), bool)
            if len(gc):
                ious = box_iou(dc[:, :4], gc)
                for i in range(len(dc)):
                    best, m = t, -1
                    for j in range(len(gc)):
                        if matched[j] or ious[i, j] < best:
                            continue
                        best, m = ious[i, j], j
                    if m >= 0:
                        matched[m] = True
                        tp[i] = True
            scores.append(dc[:, 4])
            tps.append(tp)
        n_gt_total += n_gt
        if n_gt == 0:
            per_class[names[c]] = None
            continue
        if not scores:
            per_class[names[c]] = 0.0
            continue
        s = np.concatenate(scores)
        tp = np.concatenate(tps)
        n_det_total += len(s)
        order = np.argsort(-s, kind="mergesort")
        tp = tp[order]
        tp_sum = np.cumsum(tp).astype(float)
        fp_sum = np.cumsum(~tp).astype(float)
        rc = tp_sum / n_gt
        pr = tp_sum / (fp_sum + tp_sum + np.spacing(1))
        pr = np.maximum.accumulate(pr[::-1])[::-1]
        inds = np.searchsorted(rc, rec_thrs, side="left")
        q = np.where(inds < len(pr), pr[np.minimum(inds, len(pr) - 1)], 0.0)
        per_class[names[c]] = float(q.mean())
    valid = [v for v in per_class.values() if v is not None]
    return {"map50": float(np.mean(valid)) if valid else None, "per_class": per_class,
            "num_gt": int(n_gt_total), "num_det": int(n_det_total)}


# ----------------------------------------------------------------------------- tracking
def trackeval_data(gt_frames: Sequence[np.ndarray], trk_frames: Sequence[np.ndarray], class_id: int) -> dict:
    """Build TrackEval's per-sequence, per-class data dict.

    Args:
        gt_frames / trk_frames: per frame, array (K, 6) ``[x1, y1, x2, y2, class_id, track_id]``.
    Returns:
        dict with num_timesteps, num_gt_ids, num_tracker_ids, num_gt_dets, num_tracker_dets,
        gt_ids, tracker_ids (per frame, 0-based contiguous ints) and similarity_scores (IoU).
    """
    if len(gt_frames) != len(trk_frames):
        raise ValueError(f"{len(gt_frames)} ground-truth frames but {len(trk_frames)} tracker frames")
    gsel = [np.asarray(g, dtype=np.float64).reshape(-1, 6) for g in gt_frames]
    tsel = [np.asarray(t, dtype=np.float64).reshape(-1, 6) for t in trk_frames]
    gsel = [g[g[:, 4] == class_id] for g in gsel]
    tsel = [t[t[:, 4] == class_id] for t in tsel]
    gids = np.unique(np.concatenate([g[:, 5] for g in gsel] or [np.zeros(0)])).astype(np.int64)
    tids = np.unique(np.concatenate([t[:, 5] for t in tsel] or [np.zeros(0)])).astype(np.int64)
    gmap = {v: i for i, v in enumerate(gids.tolist())}
    tmap = {v: i for i, v in enumerate(tids.tolist())}
    return {
        "num_timesteps": len(gsel),
        "num_gt_ids": len(gids),
        "num_tracker_ids": len(tids),
        "num_gt_dets": int(sum(len(g) for g in gsel)),
        "num_tracker_dets": int(sum(len(t) for t in tsel)),
        "gt_ids": [np.array([gmap[int(v)] for v in g[:, 5]], dtype=int) for g in gsel],
        "tracker_ids": [np.array([tmap[int(v)] for v in t[:, 5]], dtype=int) for t in tsel],
        "similarity_scores": [box_iou(g[:, :4], t[:, :4]) for g, t in zip(gsel, tsel)],
    }


def clear(data: dict, threshold: float = 0.5) -> dict:
    """CLEAR MOT counts for one sequence and class (TrackEval's algorithm): TP, FN, FP, IDSW, MOTA."""
    res = {"CLR_TP": 0, "CLR_FN": 0, "CLR_FP": 0, "IDSW": 0}
    if data["num_tracker_dets"] == 0:
        res["CLR_FN"] = data["num_gt_dets"]
    elif data["num_gt_dets"] == 0:
        res["CLR_FP"] = data["num_tracker_dets"]
    else:
        n = data["num_gt_ids"]
        prev_id = np.full(n, np.nan)
        prev_step_id = np.full(n, np.nan)
        for g, t, sim in zip(data["gt_ids"], data["tracker_ids"], data["similarity_scores"]):
            if len(g) == 0:
                res["CLR_FP"] += len(t)
                continue
            if len(t) == 0:
                res["CLR_FN"] += len(g)
                continue
            score = 1000.0 * (t[None, :] == prev_step_id[g[:, None]]) + sim
            score[sim < threshold - _EPS] = 0
            rows, cols = linear_sum_assignment(-score)
            ok = score[rows, cols] > _EPS
            rows, cols = rows[ok], cols[ok]
            mg, mt = g[rows], t[cols]
            prev = prev_id[mg]
            res["IDSW"] += int(np.sum(~np.isnan(prev) & (mt != prev)))
            prev_id[mg] = mt
            prev_step_id[:] = np.nan
            prev_step_id[mg] = mt
            res["CLR_TP"] += len(mg)
            res["CLR_FN"] += len(g) - len(mg)
            res["CLR_FP"] += len(t) - len(mg)
    return _clear_final(res)


def _clear_final(res: dict) -> dict:
    res["MOTA"] = (res["CLR_TP"] - res["CLR_FP"] - res["IDSW"]) / max(1.0, res["CLR_TP"] + res["CLR_FN"])
    return res


def identity(data: dict, threshold: float = 0.5) -> dict:
    """Identity counts for one sequence and class (TrackEval's IDTP/IDFN/IDFP and IDF1)."""
    ng, nt = data["num_gt_ids"], data["num_tracker_ids"]
    potential = np.zeros((ng, nt))
    for g, t, sim in zip(data["gt_ids"], data["tracker_ids"], data["similarity_scores"]):
        if len(g) and len(t):
            r, c = np.nonzero(sim >= threshold)
            np.add.at(potential, (g[r], t[c]), 1)
    if ng and nt:
        rows, cols = linear_sum_assignment(-potential)
        idtp = int(potential[rows, cols].sum())
    else:
        idtp = 0
    res = {"IDTP": idtp, "IDFN": data["num_gt_dets"] - idtp, "IDFP": data["num_tracker_dets"] - idtp}
    return _identity_final(res)


def _identity_final(res: dict) -> dict:
    res["IDF1"] = res["IDTP"] / max(1.0, res["IDTP"] + 0.5 * res["IDFP"] + 0.5 * res["IDFN"])
    return res


def hota(data: dict) -> dict:
    """HOTA for one sequence and class (TrackEval's algorithm); arrays over the 19 alpha thresholds."""
    na = len(HOTA_ALPHAS)
    res = {k: np.zeros(na) for k in ("HOTA_TP", "HOTA_FN", "HOTA_FP", "AssA", "LocA")}
    if data["num_tracker_dets"] == 0 or data["num_gt_dets"] == 0:
        res["HOTA_FN"][:] = data["num_gt_dets"] if data["num_tracker_dets"] == 0 else 0
        res["HOTA_FP"][:] = data["num_tracker_dets"] if data["num_gt_dets"] == 0 else 0
        res["LocA"][:] = 1.0
        return _hota_final(res)
    ng, nt = data["num_gt_ids"], data["num_tracker_ids"]
    potential = np.zeros((ng, nt))
    gcount = np.zeros((ng, 1))
    tcount = np.zeros((1, nt))
    for g, t, sim in zip(data["gt_ids"], data["tracker_ids"], data["similarity_scores"]):
        denom = sim.sum(0)[None, :] + sim.sum(1)[:, None] - sim
        sim_iou = np.zeros_like(sim)
        mask = denom > _EPS
        sim_iou[mask] = sim[mask] / denom[mask]
        potential[g[:, None], t[None, :]] += sim_iou
        gcount[g] += 1
        tcount[0, t] += 1
    align = potential / (gcount + tcount - potential)
    matches = np.zeros((na, ng, nt))
    for g, t, sim in zip(data["gt_ids"], data["tracker_ids"], data["similarity_scores"]):
        if len(g) == 0:
            res["HOTA_FP"] += len(t)
            continue
        if len(t) == 0:
            res["HOTA_FN"] += len(g)
            continue
        rows, cols = linear_sum_assignment(-(align[g[:, None], t[None, :]] * sim))
        s = sim[rows, cols]
        for a, alpha in enumerate(HOTA_ALPHAS):
            ok = s >= alpha - _EPS
            k = int(ok.sum())
            res["HOTA_TP"][a] += k
            res["HOTA_FN"][a] += len(g) - k
            res["HOTA_FP"][a] += len(t) - k
            if k:
                res["LocA"][a] += s[ok].sum()
                matches[a, g[rows[ok]], t[cols[ok]]] += 1
    for a in range(na):
        m = matches[a]
        ass = m / np.maximum(1, gcount + tcount - m)
        res["AssA"][a] = np.sum(m * ass) / max(1.0, res["HOTA_TP"][a])
    res["LocA"] = np.maximum(1e-10, res["LocA"]) / np.maximum(1e-10, res["HOTA_TP"])
    return _hota_final(res)


def _hota_final(res: dict) -> dict:
    res["DetA"] = res["HOTA_TP"] / np.maximum(1, res["HOTA_TP"] + res["HOTA_FN"] + res["HOTA_FP"])
    res["HOTA"] = np.sqrt(res["DetA"] * res["AssA"])
    return res


def combine_classes(per_class: dict[str, dict]) -> dict:
    """Combine per-class CLEAR/Identity/HOTA results like TrackEval's combine_classes_det_averaged."""
    out: dict = {}
    vals = list(per_class.values())
    for k in ("CLR_TP", "CLR_FN", "CLR_FP", "IDSW", "IDTP", "IDFN", "IDFP"):
        out[k] = sum(v[k] for v in vals)
    _clear_final(out)
    _identity_final(out)
    for k in ("HOTA_TP", "HOTA_FN", "HOTA_FP"):
        out[k] = sum(v[k] for v in vals)
    out["AssA"] = sum(v["AssA"] * v["HOTA_TP"] for v in vals) / np.maximum(1.0, out["HOTA_TP"])
    loca = sum(v["LocA"] * v["HOTA_TP"] for v in vals)
    out["LocA"] = np.maximum(1e-10, loca) / np.maximum(1e-10, out["HOTA_TP"])
    return _hota_final(out)


def tracking_metrics(gt_frames: Sequence[np.ndarray], trk_frames: Sequence[np.ndarray], *,
                     class_names: Sequence[str]) -> dict:
    """MOTA, IDF1 and HOTA of a tracker output against ground truth, classes det-averaged.

    Args:
        gt_frames / trk_frames: per frame, array (K, 6) ``[x1, y1, x2, y2, class_id, track_id]``.
    Returns:
        ``{"mota", "idf1", "hota", "per_class": {name: {"mota", "idf1", "hota"}}, "counts": {...}}``.
    """
    per_class = {}
    for c, name in enumerate(class_names):
        data = trackeval_data(gt_frames, trk_frames, c)
        if data["num_gt_dets"] == 0 and data["num_tracker_dets"] == 0:
            continue
        per_class[name] = {**clear(data), **identity(data), **hota(data)}
    if not per_class:
        return {"mota": None, "idf1": None, "hota": None, "per_class": {}, "counts": {}}
    comb = combine_classes(per_class)

    def summary(r):
        return {"mota": float(r["MOTA"]), "idf1": float(r["IDF1"]), "hota": float(np.mean(r["HOTA"]))}

    counts = {k: int(comb[k]) for k in ("CLR_TP", "CLR_FN", "CLR_FP", "IDSW", "IDTP", "IDFN", "IDFP")}
    return {**summary(comb), "per_class": {k: summary(v) for k, v in per_class.items()}, "counts": counts}
