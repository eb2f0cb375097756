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


# ----------------------------------------------------------------------------- Kalman filter
# Constant-velocity Kalman filter on [cx, cy, w, h, vcx, vcy, vw, vh]. The tracker keeps the
# states of all its tracks in two arrays, x (N, 8) and P (N, 8, 8), and advances or corrects
# them together: a Python loop of 8x8 products per track cost more per frame than the whole
# rest of the pipeline once the detector ran on a fast GPU.
_F = np.eye(8)
_F[:4, 4:] = np.eye(4)
_Q_SCALE = np.array([0.02, 0.02, 0.02, 0.02, 0.01, 0.01, 0.002, 0.002])  # process noise std / size
_R_SCALE = 0.05  # measurement noise std / size
_P0_SCALE = np.array([0.1, 0.1, 0.1, 0.1, 0.3, 0.3, 0.05, 0.05])  # initial std / size
_D8 = np.arange(8)
_D4 = np.arange(4)


def kalman_init(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """States (n, 8) and covariances (n, 8, 8) of new tracks at boxes ``[x1, y1, x2, y2]``."""
    z = _xyxy_to_xywh(boxes[:, :4])
    x = np.concatenate([z, np.zeros_like(z)], axis=1)
    wh = np.maximum(z[:, 2:4], 1.0)
    P = np.zeros((len(boxes), 8, 8))
    P[:, _D8, _D8] = (_P0_SCALE * np.tile(wh, 4)) ** 2
    return x, P


def kalman_predict(x: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step for every row: x <- F x, P <- F P F^T + Q (Q scales with the box size)."""
    q = _Q_SCALE * np.tile(np.maximum(x[:, 2:4], 1.0), 4)
    x = x @ _F.T
    P = _F @ P @ _F.T
    P[:, _D8, _D8] += q ** 2
    x[:, 2:4] = np.maximum(x[:, 2:4], 1.0)
    return x, P


def kalman_update(x: np.ndarray, P: np.ndarray, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Correct each row with its measured box ``[x1, y1, x2, y2]`` (H = [I 0])."""
    z = _xyxy_to_xywh(boxes[:, :4])
    S = P[:, :4, :4].copy()
    S[:, _D4, _D4] += (_R_SCALE * np.tile(np.maximum(x[:, 2:4], 1.0), 2)) ** 2
    HP = P[:, :4, :]
    K = np.linalg.solve(S, HP).transpose(0, 2, 1)  # (n, 8, 4)
    x = x + (K @ (z - x[:, :4])[:, :, None])[:, :, 0]
    P = P - K @ HP
    return x, P


def _xyxy_to_xywh(b: np.ndarray) -> np.ndarray:
    return np.concatenate([(b[:, :2] + b[:, 2:4]) / 2, b[:, 2:4] - b[:, :2]], axis=1)


def _xywh_to_xyxy(c: np.ndarray) -> np.ndarray:
    half = c[:, 2:4] / 2
    return np.concatenate([c[:, :2] - half, c[:, :2] + half], axis=1)


class Track:
    """Bookkeeping of one track; its Kalman state is row ``Tracker.tracks.index(self)`` of the
    tracker's arrays."""

    __slots__ = ("track_id", "class_id", "score", "hits", "hit_streak", "since_update", "missed_updates", "det_box")

    def __init__(self, det: np.ndarray, track_id: int):
        self.track_id = track_id
        self.class_id = int(det[5])
        self.score = float(det[4])
        self.hits = 1
        self.hit_streak = 1
        self.since_update = 0  # frames since the last match
        self.missed_updates = 0  # update() calls since the last match
        self.det_box = np.asarray(det[:4], dtype=np.float64)


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
        self.x = np.zeros((0, 8))
        self.P = np.zeros((0, 8, 8))
        self.next_id = 1
        self.updates = 0

    def _advance(self) -> None:
        if self.tracks:
            self.x, self.P = kalman_predict(self.x, self.P)
        for t in self.tracks:
            t.since_update += 1

    def _keep(self, keep: list[bool]) -> None:
        if not all(keep):
            k = np.asarray(keep, dtype=bool)
            self.tracks = [t for t, kk in zip(self.tracks, keep) if kk]
            self.x, self.P = self.x[k], self.P[k]

    def _boxes(self, idx) -> np.ndarray:
        """Predicted ``[x1, y1, x2, y2]`` of the tracks at ``idx``."""
        return _xywh_to_xyxy(self.x[idx, :4])

    def _confirmed(self, t: Track) -> bool:
        return t.hit_streak >= self.min_hits or self.updates <= self.min_hits

    def _rows(self, idx: list[int]) -> np.ndarray:
        """Output rows of the tracks at ``idx``: a track matched in this frame reports its
        detection (sharper than the filtered state), a coasting one its prediction."""
        if not idx:
            return np.zeros((0, _COLUMNS))
        boxes = self._boxes(idx)
        out = np.empty((len(idx), _COLUMNS))
        for r, i in enumerate(idx):
            t = self.tracks[i]
            out[r, :4] = t.det_box if t.since_update == 0 else boxes[r]
            out[r, 4:] = (t.class_id, t.track_id, t.score)
        return out

    def predict(self) -> np.ndarray:
        """Advance all tracks one frame without detections; return confirmed, recently matched tracks."""
        self._advance()
        self._keep([t.since_update <= self.max_age for t in self.tracks])
        return self._rows([i for i, t in enumerate(self.tracks) if t.missed_updates == 0 and self._confirmed(t)])

    def _match(self, idx: list[int], dets: np.ndarray) -> tuple[list[tuple[int, int]], list[int], list[int]]:
        """Hungarian matching of the tracks at ``idx`` with ``dets`` on IoU within a class;
        returns (pairs of positions in idx and dets, unmatched positions in idx, in dets)."""
        if not idx or len(dets) == 0:
            return [], list(range(len(idx))), list(range(len(dets)))
        iou = box_iou(self._boxes(idx), dets[:, :4])
        same = np.array([self.tracks[i].class_id for i in idx])[:, None] == dets[None, :, 5].astype(int)
        iou = np.where(same, iou, 0.0)
        rows, cols = linear_sum_assignment(-iou)
        pairs = [(r, c) for r, c in zip(rows, cols) if iou[r, c] >= self.iou_thresh]
        mr = {r for r, _ in pairs}
        mc = {c for _, c in pairs}
        return pairs, [i for i in range(len(idx)) if i not in mr], [j for j in range(len(dets)) if j not in mc]

    def update(self, dets: np.ndarray) -> np.ndarray:
        """Advance one frame and match ``dets`` (M, 6) ``[x1, y1, x2, y2, score, class]``; return tracks."""
        dets = np.asarray(dets, dtype=np.float64).reshape(-1, 6)
        self.updates += 1
        self._advance()
        high = dets[dets[:, 4] >= self.high_thresh]
        low = dets[(dets[:, 4] >= self.low_thresh) & (dets[:, 4] < self.high_thresh)]
        # Cascade: tracks matched at the last update choose first, so a stale duplicate cannot
        # steal the detection of a live track; then the coasting tracks; then low-score detections.
        fresh = [i for i, t in enumerate(self.tracks) if t.missed_updates == 0]
        stale = [i for i, t in enumerate(self.tracks) if t.missed_updates > 0]
        pairs, un_fresh, un_det = self._match(fresh, high)
        matched: list[tuple[int, np.ndarray]] = [(fresh[r], high[c]) for r, c in pairs]
        rest_high = high[un_det]
        pairs_s, un_stale, un_det2 = self._match(stale, rest_high)
        matched += [(stale[r], rest_high[c]) for r, c in pairs_s]
        unborn = rest_high[un_det2]
        rest = [fresh[i] for i in un_fresh] + [stale[i] for i in un_stale]
        pairs2, un_trk2, _ = self._match(rest, low)
        matched += [(rest[r], low[c]) for r, c in pairs2]
        if matched:
            idx = np.array([i for i, _ in matched])
            self.x[idx], self.P[idx] = kalman_update(self.x[idx], self.P[idx], np.array([d[:4] for _, d in matched]))
        for i, d in matched:
            t = self.tracks[i]
            t.det_box = d[:4].copy()
            t.score = float(d[4])
            t.hits += 1
            t.hit_streak += 1
            t.since_update = 0
            t.missed_updates = 0
        for i in un_trk2:
            t = self.tracks[rest[i]]
            t.hit_streak = 0
            t.missed_updates += 1
        live = [self.tracks[i] for i, _ in matched]
        if live and len(unborn):
            # A detection that mostly lies inside a matched box of its class is a duplicate
            # (e.g. the cab of a truck), not a new object.
            cover = _coverage(unborn[:, :4], np.array([t.det_box for t in live]))
            same = unborn[:, 5:6].astype(int) == np.array([t.class_id for t in live])[None, :]
            unborn = unborn[~(np.where(same, cover, 0.0) > self.duplicate_cover).any(1)]
        if len(unborn):
            for d in unborn:
                self.tracks.append(Track(d, self.next_id))
                self.next_id += 1
            x0, P0 = kalman_init(unborn)
            self.x, self.P = np.concatenate([self.x, x0]), np.concatenate([self.P, P0])
        if live:
            # drop coasting tracks that sit on top of a live track of the same class (duplicates)
            coasting = [i for i, t in enumerate(self.tracks) if t.since_update > 0]
            if coasting:
                iou = box_iou(self._boxes(coasting), np.array([t.det_box for t in live]))
                same = (np.array([self.tracks[i].class_id for i in coasting])[:, None]
                        == np.array([t.class_id for t in live])[None, :])
                dup = set(np.asarray(coasting)[(np.where(same, iou, 0) > 0.7).any(1)].tolist())
                if dup:
                    self._keep([i not in dup for i in range(len(self.tracks))])
        self._keep([t.since_update <= self.max_age for t in self.tracks])
        return self._rows([i for i, t in enumerate(self.tracks) if t.since_update == 0 and self._confirmed(t)])


def _coverage(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fraction of each box in ``a`` covered by each box in ``b`` (intersection / area of a)."""
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.maximum(iw, 0.0) * np.maximum(ih, 0.0)
    area = np.maximum((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]), 1e-9)
    return inter / area[:, None]
