"""SORT-like multi-object tracker: constant-velocity Kalman filter per track, IoU + Hungarian matching.

Per frame with detections call ``update(dets)``; on frames where the detector did not run
(``--interval K``) call ``predict()``, which moves every track along its velocity and returns
the confirmed tracks that were matched at the last detection.

Matching is per class (a detection never continues a track of another class) and in two rounds
as in ByteTrack: confident detections (score >= ``high_thresh``) first, then the remaining
tracks against the low-score detections (``low_thresh`` <= score < ``high_thresh``), which
keeps tracks alive through partial occlusions. Tracks matched at the previous update are matched
before coasting ones (as DeepSORT's cascade). Only confident detections start tracks, and not
when they lie mostly (>= 70 %) inside a box matched in this frame (duplicates such as a truck's
cab); a coasting track overlapping a matched one of its class (IoU > 0.7) is dropped. A track
is reported once it has ``min_hits`` matches in a row (or during the first ``min_hits`` updates
of the tracker) and is deleted after ``max_age`` frames without a match.

A track matched in this frame reports the matched detection's box; a track coasting through a
frame without detection reports the Kalman prediction.

Rows returned by ``update`` and ``predict``: float64 ``(K, 7)`` ``[x1, y1, x2, y2, class_id,
track_id, score]``; track ids start at 1 and are never reused.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from source_code.metrics import box_iou

_COLUMNS = 7


class KalmanBox:
    """Constant-velocity Kalman filter on ``[cx, cy, w, h, vcx, vcy, vw, vh]``."""

    _F = np.eye(8)
    _F[:4, 4:] = np.eye(4)
    _H = np.eye(4, 8)

    def __init__(self, box: np.ndarray):
        x1, y1, x2, y2 = box[:4]
        self.x = np.array([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, 0, 0, 0, 0], dtype=np.float64)
        w, h = max(self.x[2], 1.0), max(self.x[3], 1.0)
        std = np.array([0.1 * w, 0.1 * h, 0.1 * w, 0.1 * h, 0.3 * w, 0.3 * h, 0.05 * w, 0.05 * h])
        self.P = np.diag(std ** 2)

    def _sizes(self) -> tuple[float, float]:
        return max(self.x[2], 1.0), max(self.x[3], 1.0)

    def predict(self) -> None:
        w, h = self._sizes()
        q = np.array([0.02 * w, 0.02 * h, 0.02 * w, 0.02 * h, 0.01 * w, 0.01 * h, 0.002 * w, 0.002 * h])
        self.x = self._F @ self.x
        self.P = self._F @ self.P @ self._F.T + np.diag(q ** 2)
        self.x[2:4] = np.maximum(self.x[2:4], 1.0)

    def update(self, box: np.ndarray) -> None:
        x1, y1, x2, y2 = box[:4]
        z = np.array([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1])
        w, h = self._sizes()
        r = np.array([0.05 * w, 0.05 * h, 0.05 * w, 0.05 * h])
        S = self._H @ self.P @ self._H.T + np.diag(r ** 2)
        K = np.linalg.solve(S, self._H @ self.P).T
        self.x = self.x + K @ (z - self._H @ self.x)
        self.P = (np.eye(8) - K @ self._H) @ self.P

    def box(self) -> np.ndarray:
        cx, cy, w, h = self.x[:4]
        return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])


class Track:
    def __init__(self, det: np.ndarray, track_id: int):
        self.kf = KalmanBox(det)
        self.track_id = track_id
        self.class_id = int(det[5])
        self.score = float(det[4])
        self.hits = 1
        self.hit_streak = 1
        self.since_update = 0  # frames since the last match
        self.missed_updates = 0  # update() calls since the last match
        self.det_box = np.asarray(det[:4], dtype=np.float64)

    def row(self) -> np.ndarray:
        # A matched track reports its detection (sharper than the filtered state); otherwise the prediction.
        box = self.det_box if self.since_update == 0 else self.kf.box()
        return np.concatenate([box, [self.class_id, self.track_id, self.score]])


class Tracker:
    """SORT-style tracker; see the module docstring for the rules."""

    def __init__(self, *, iou_thresh: float = 0.3, min_hits: int = 2, max_age: int = 30,
                 high_thresh: float = 0.4, low_thresh: float = 0.15, duplicate_cover: float = 0.7):
        self.iou_thresh = iou_thresh
        self.min_hits = min_hits
        self.max_age = max_age
        self.high_thresh = high_thresh
        self.low_thresh = low_thresh
        self.duplicate_cover = duplicate_cover
        self.tracks: list[Track] = []
        self.next_id = 1
        self.updates = 0

    def _advance(self) -> None:
        for t in self.tracks:
            t.kf.predict()
            t.since_update += 1

    def _confirmed(self, t: Track) -> bool:
        return t.hit_streak >= self.min_hits or self.updates <= self.min_hits

    def predict(self) -> np.ndarray:
        """Advance all tracks one frame without detections; return confirmed, recently matched tracks."""
        self._advance()
        self.tracks = [t for t in self.tracks if t.since_update <= self.max_age]
        rows = [t.row() for t in self.tracks if t.missed_updates == 0 and self._confirmed(t)]
        return np.array(rows, dtype=np.float64).reshape(-1, _COLUMNS)

    def _match(self, tracks: list[Track], dets: np.ndarray) -> tuple[list[tuple[int, int]], list[int], list[int]]:
        if not tracks or len(dets) == 0:
            return [], list(range(len(tracks))), list(range(len(dets)))
        iou = box_iou(np.array([t.kf.box() for t in tracks]), dets[:, :4])
        same = np.array([t.class_id for t in tracks])[:, None] == dets[None, :, 5].astype(int)
        iou = np.where(same, iou, 0.0)
        rows, cols = linear_sum_assignment(-iou)
        pairs = [(r, c) for r, c in zip(rows, cols) if iou[r, c] >= self.iou_thresh]
        mr = {r for r, _ in pairs}
        mc = {c for _, c in pairs}
        return pairs, [i for i in range(len(tracks)) if i not in mr], [j for j in range(len(dets)) if j not in mc]

    def update(self, dets: np.ndarray) -> np.ndarray:
        """Advance one frame and match ``dets`` (M, 6) ``[x1, y1, x2, y2, score, class]``; return tracks."""
        dets = np.asarray(dets, dtype=np.float64).reshape(-1, 6)
        self.updates += 1
        self._advance()
        high = dets[dets[:, 4] >= self.high_thresh]
        low = dets[(dets[:, 4] >= self.low_thresh) & (dets[:, 4] < self.high_thresh)]
        # Cascade: tracks matched at the last update choose first, so a stale duplicate cannot
        # steal the detection of a live track; then the coasting tracks; then low-score detections.
        fresh = [t for t in self.tracks if t.missed_updates == 0]
        stale = [t for t in self.tracks if t.missed_updates > 0]
        pairs, un_fresh, un_det = self._match(fresh, high)
        matched: list[tuple[Track, np.ndarray]] = [(fresh[r], high[c]) for r, c in pairs]
        rest_high = high[un_det]
        pairs_s, un_stale, un_det2 = self._match(stale, rest_high)
        matched += [(stale[r], rest_high[c]) for r, c in pairs_s]
        unborn = rest_high[un_det2]
        rest = [fresh[i] for i in un_fresh] + [stale[i] for i in un_stale]
        pairs2, un_trk2, _ = self._match(rest, low)
        matched += [(rest[r], low[c]) for r, c in pairs2]
        for t, d in matched:
            t.kf.update(d)
            t.det_box = d[:4].copy()
            t.score = float(d[4])
            t.hits += 1
            t.hit_streak += 1
            t.since_update = 0
            t.missed_updates = 0
        for i in un_trk2:
            rest[i].hit_streak = 0
            rest[i].missed_updates += 1
        live = [t for t, _ in matched]
        if live and len(unborn):
            # A detection that mostly lies inside a matched box of its class is a duplicate
            # (e.g. the cab of a truck), not a new object.
            cover = _coverage(unborn[:, :4], np.array([t.det_box for t in live]))
            same = unborn[:, 5:6].astype(int) == np.array([t.class_id for t in live])[None, :]
            unborn = unborn[~(np.where(same, cover, 0.0) > self.duplicate_cover).any(1)]
        for d in unborn:
            self.tracks.append(Track(d, self.next_id))
            self.next_id += 1
        if live:
            # drop coasting tracks that sit on top of a live track of the same class (duplicates)
            coasting = [t for t in self.tracks if t.since_update > 0]
            if coasting:
                iou = box_iou(np.array([t.kf.box() for t in coasting]), np.array([t.det_box for t in live]))
                same = np.array([t.class_id for t in coasting])[:, None] == np.array([t.class_id for t in live])[None, :]
                dup = {id(t) for t, hit in zip(coasting, (np.where(same, iou, 0) > 0.7).any(1)) if hit}
                self.tracks = [t for t in self.tracks if id(t) not in dup]
        self.tracks = [t for t in self.tracks if t.since_update <= self.max_age]
        rows = [t.row() for t in self.tracks if t.since_update == 0 and self._confirmed(t)]
        return np.array(rows, dtype=np.float64).reshape(-1, _COLUMNS)


def _coverage(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fraction of each box in ``a`` covered by each box in ``b`` (intersection / area of a)."""
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area = np.maximum((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]), 1e-9)
    return inter / area[:, None]
