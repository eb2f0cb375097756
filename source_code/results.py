"""What a run measured: the stats-collecting sink at the end of the stages, accuracy against
the ground truth, and the results document (fields: ``labkit.annotate.RESULTS_FIELDS``)."""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from labkit import annotate
from source_code.stages import STAGES, Batch


def warmup_batches(warmup_frames: int, batch_size: int, total_frames: int, warnings: list[str]) -> int:
    """Batches left out of the timing for ``warmup_frames``; 0 (with a warning) when warm-up
    would cover the whole run."""
    n = math.ceil(warmup_frames / batch_size) if warmup_frames else 0
    if n and total_frames and n * batch_size >= total_frames:
        warnings.append(f"--warmup {warmup_frames} covers the whole run ({total_frames} frames): "
                        "timing includes warm-up")
        return 0
    return n


class StatsSink:
    """Receives every finished batch: counts frames, times the batches after warm-up, keeps
    each frame's latency (arrival to the end of display, ms) and stream 0's detections and
    tracks for the accuracy."""

    def __init__(self, *, warmup_batches: int, progress: Callable[[str], None] | None = None):
        self.warmup_batches = warmup_batches
        self.progress = progress
        self.frames = 0
        self.timed_frames = 0
        self.t_run = time.perf_counter_ns()
        self.t_start: int | None = None  # end of the last warm-up batch
        self.t_end: int | None = None
        self.latency_ms: list[float] = []
        self.dets: dict[int, np.ndarray] = {}  # stream 0: frame -> (K, 6) detections
        self.tracks: dict[int, np.ndarray] = {}  # stream 0: frame -> (K, 7) tracks

    def __call__(self, b: Batch) -> None:
        self.frames += len(b.frames)
        for s, fid, d, t in zip(b.sources, b.frame_ids, b.dets, b.tracks):
            if s == 0:
                if d is not None:
                    self.dets[fid] = d
                self.tracks[fid] = t
        if b.index < self.warmup_batches:
            self.t_start = b.done_ns
            return
        self.timed_frames += len(b.frames)
        self.t_end = b.done_ns
        self.latency_ms.extend((b.done_ns - t0) / 1e6 for t0 in b.read_ns)
        if self.progress and b.index % 50 == 0:
            self.progress(f"batch {b.index}: {self.frames} frames")

    def seconds(self) -> float | None:
        """Wall time of the timed batches, s (from the end of warm-up, or the start of the run)."""
        if not self.t_end:
            return None
        return (self.t_end - (self.t_start if self.t_start is not None else self.t_run)) / 1e9

    def window_ns(self) -> tuple[int, int] | None:
        """The timed batches' window on the wall clock, (start, end) in ns since the epoch, so that
        processes (ranks) can be put on one clock; None without timing."""
        if not self.t_end:
            return None
        to_epoch = time.time_ns() - time.perf_counter_ns()
        return (self.t_start if self.t_start is not None else self.t_run) + to_epoch, self.t_end + to_epoch

    def figures(self) -> dict:
        """frames, timed_frames, warmup_frames, seconds, fps, stages, stage_detail, latency_ms."""
        seconds = self.seconds()
        summary = annotate.stage_summary(skip_batches=self.warmup_batches)
        return {
            "frames": self.frames,
            "timed_frames": self.timed_frames,
            "warmup_frames": self.frames - self.timed_frames,
            "seconds": round(seconds, 6) if seconds else None,
            "fps": round(self.timed_frames / seconds, 4) if seconds else None,
            "stages": stage_ms(summary, self.timed_frames),
            "stage_detail": {k: {kk: (round(vv, 4) if isinstance(vv, float) else vv) for kk, vv in v.items()}
                             for k, v in summary.items()},
            "latency_ms": {"p50": _percentile(self.latency_ms, 50), "p99": _percentile(self.latency_ms, 99)},
        }


def stage_ms(summary: dict, timed_frames: int) -> dict:
    """ms per timed frame of each stage (None for a stage that never ran).

    With --interval K, preprocess and infer run on every K-th frame only, so dividing by the
    frames they saw (stage_detail's ms_per_item) would overstate their cost."""
    out = {}
    for name in STAGES:
        s = summary.get(name)
        per = timed_frames or (s["items"] if s else 0)
        out[name] = round(s["total_ms"] / per, 4) if s and per else (round(s["mean_ms"], 4) if s else None)
    return out


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


NO_ACCURACY = {"map50": None, "mota": None, "idf1": None, "hota": None}


def accuracy(gt_frames: dict | None, sink: StatsSink, n_frames: int, class_names) -> dict:
    """mAP@0.5 over the frames the detector ran on, MOTA/IDF1/HOTA over every frame, stream 0."""
    if gt_frames is None:
        return {**NO_ACCURACY, "note": "no ground truth: none found beside the input (<stem>.gt.csv)"}
    return accuracy_over([(gt_frames, sink.dets, sink.tracks, n_frames)], class_names)


def accuracy_over(parts: list[tuple], class_names) -> dict:
    """Accuracy of several sequences taken as one: ``parts`` holds one ``(ground truth, detections,
    tracks, frames)`` per sequence (the dicts of a ``StatsSink``). The sequences are laid end to end
    with their object and track ids kept apart, so MOTA and IDF1 equal TrackEval's combination of
    the sequences and mAP@0.5 pools every detected frame."""
    from source_code.metrics import map50, tracking_metrics

    empty = np.zeros((0, 6))
    gts, dets, gt_list, trk_list = [], [], [], []
    for i, (gt, det, trk, n) in enumerate(parts):
        apart = np.array([0, 0, 0, 0, 0, i * 1_000_000])  # ids of sequence i never meet those of another
        for f in range(n):
            g = gt.get(f, empty)
            gt_list.append(g + apart[: g.shape[1]] if len(parts) > 1 else g)
            t = np.concatenate([trk[f][:, :4], trk[f][:, 4:6]], 1) if f in trk else empty
            trk_list.append(t + apart[: t.shape[1]] if len(parts) > 1 else t)
            if f in det:
                gts.append(g[:, :5])
                dets.append(det[f])
    m = (map50(gts, dets, num_classes=len(class_names), class_names=class_names)
         if dets else {"map50": None, "per_class": {}})
    t = tracking_metrics(gt_list, trk_list, class_names=class_names)
    frames = sum(p[3] for p in parts)
    where = "stream 0" if len(parts) == 1 else f"{len(parts)} sequences (stream 0 of every rank) end to end"
    return {"map50": m["map50"], "mota": t["mota"], "idf1": t["idf1"], "hota": t["hota"],
            "per_class": {"map50": m["per_class"], **t["per_class"]},
            "counts": t.get("counts", {}),
            "note": f"{where}, {frames} frames; map50 over the {len(dets)} frames the detector ran on"}
