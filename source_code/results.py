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


CI_BLOCKS = 12
"""Blocks of consecutive batches the fps interval resamples (a block bootstrap: batches next to
each other share the machine's load, so they are not independent)."""
THROUGHPUT_RULE = 0.10
"""Little's law: a run measures throughput only when the frames its queues and stages can hold at
once (``capacity_frames``) are at most this share of its timed frames."""


class StatsSink:
    """Receives every finished batch: counts frames, times the window after warm-up, keeps
    each frame's latency (arrival to the end of display, ms) and stream 0's detections and
    tracks for the accuracy.

    The timed window opens when the last warm-up batch completes (or when the run starts) and
    closes when the last batch completes. A frame counts as timed only when it was read from its
    source inside the window: frames read earlier and still in a queue when the window opened
    (``carried_frames``) are finished inside it but not counted, so no work done before the window
    inflates the frames per second (``labkit.annotate.RESULTS_FIELDS``: ``fps``)."""

    def __init__(self, *, warmup_batches: int, progress: Callable[[str], None] | None = None):
        self.warmup_batches = warmup_batches
        self.progress = progress
        self.frames = 0
        self.timed_frames = 0  # read inside the window
        self.carried_frames = 0  # finished inside the window, read before it opened
        self.batch_frames = 0  # every frame of the batches after warm-up
        self.capacity_frames: int | None = None  # set by the runner: frames its queues and stages can hold
        self.t_run = time.perf_counter_ns()
        self.t_start: int | None = None  # end of the last warm-up batch
        self.t_end: int | None = None
        self.batches: list[tuple[int, int]] = []  # timed batches: (frames counted, done_ns)
        self.latency_ms: list[float] = []
        self.dets: dict[int, np.ndarray] = {}  # stream 0: frame -> (K, 6) detections
        self.tracks: dict[int, np.ndarray] = {}  # stream 0: frame -> (K, 7) tracks

    def _open(self) -> int:
        return self.t_start if self.t_start is not None else self.t_run

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
        opened = self._open()
        counted = sum(1 for t0 in b.read_ns if t0 >= opened)
        self.timed_frames += counted
        self.carried_frames += len(b.frames) - counted
        self.batch_frames += len(b.frames)
        self.batches.append((counted, b.done_ns))
        self.t_end = b.done_ns
        self.latency_ms.extend((b.done_ns - t0) / 1e6 for t0 in b.read_ns)
        if self.progress and b.index % 50 == 0:
            self.progress(f"batch {b.index}: {self.frames} frames")

    def seconds(self) -> float | None:
        """Wall time of the timed window, s (from the end of warm-up, or the start of the run)."""
        if not self.t_end or not self.timed_frames:
            return None
        return (self.t_end - self._open()) / 1e9

    def window_ns(self) -> tuple[int, int] | None:
        """The timed window on the wall clock, (start, end) in ns since the epoch, so that
        processes (ranks) can be put on one clock; None without timing."""
        if not self.t_end:
            return None
        to_epoch = time.time_ns() - time.perf_counter_ns()
        return self._open() + to_epoch, self.t_end + to_epoch

    def fps_ci95(self) -> list[float] | None:
        """Bootstrap 95 % interval of the frames per second over the timed window (scipy.stats.bootstrap,
        percentile): the batches are cut into up to ``CI_BLOCKS`` consecutive blocks (frames counted,
        seconds taken), resampled as pairs, so that slow drifts (another process taking the CPU for a
        while) widen the interval as they should; None with fewer than 3 timed batches."""
        if len(self.batches) < 3:
            return None
        frames = np.array([f for f, _ in self.batches], dtype=float)
        ends = np.array([self._open()] + [t for _, t in self.batches], dtype=float)
        gaps = np.diff(ends) / 1e9
        if gaps.sum() <= 0 or frames.sum() <= 0:
            return None
        blocks = np.array_split(np.arange(len(frames)), min(CI_BLOCKS, len(frames)))
        frames = np.array([frames[b].sum() for b in blocks])
        gaps = np.array([gaps[b].sum() for b in blocks])
        from scipy.stats import bootstrap

        def rate(f, g, axis=-1):
            return f.sum(axis=axis) / g.sum(axis=axis)

        res = bootstrap((frames, gaps), rate, paired=True, vectorized=True, confidence_level=0.95,
                        n_resamples=2000, method="percentile", random_state=np.random.default_rng(0))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        return [round(lo, 4), round(hi, 4)] if math.isfinite(lo) and math.isfinite(hi) else None

    def held_frames(self) -> int:
        """Frames in flight: what the queues can hold (``capacity_frames``), or more when more were
        measured in flight as the window opened (``carried_frames``)."""
        return max(self.capacity_frames or 0, self.carried_frames)

    def too_short(self) -> bool:
        """True when the frames in flight exceed ``THROUGHPUT_RULE`` of the timed frames."""
        return not self.timed_frames or self.held_frames() > THROUGHPUT_RULE * self.timed_frames

    def figures(self) -> dict:
        """frames, timed_frames, carried_frames, warmup_frames, seconds, fps, fps_ci95,
        capacity_frames, too_short, stages, stage_detail, latency_ms."""
        seconds = self.seconds()
        summary = annotate.stage_summary(skip_batches=self.warmup_batches)
        return {
            "frames": self.frames,
            "timed_frames": self.timed_frames,
            "warmup_frames": self.frames - self.timed_frames,
            "carried_frames": self.carried_frames,
            "seconds": round(seconds, 6) if seconds else None,
            "fps": round(self.timed_frames / seconds, 4) if seconds else None,
            "fps_ci95": self.fps_ci95() if seconds else None,
            "capacity_frames": self.capacity_frames,
            "too_short": self.too_short(),
            "stages": stage_ms(summary, self.batch_frames),
            "stage_detail": {k: {kk: (round(vv, 4) if isinstance(vv, float) else vv) for kk, vv in v.items()}
                             for k, v in summary.items()},
            "latency_ms": {"p50": _percentile(self.latency_ms, 50), "p99": _percentile(self.latency_ms, 99)},
        }

    def too_short_warning(self) -> str | None:
        """The warning of a run too short to measure throughput, or None."""
        if not self.too_short() or not self.t_end:
            return None
        held = self.held_frames()
        return (f"too short to measure throughput: the queues hold {held} frames, more than "
                f"{THROUGHPUT_RULE:.0%} of the {self.timed_frames} timed frames (Little's law); run at least "
                f"{math.ceil(held / THROUGHPUT_RULE) + (self.frames - self.timed_frames)} frames (--frames)")


def stage_ms(summary: dict, timed_frames: int) -> dict:
    """ms per frame of the batches after warm-up, for each stage (None for a stage that never ran).

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


NO_ACCURACY = {"map50": None, "map50_detected": None, "detected_frames": None, "mota": None, "idf1": None,
               "hota": None}


def accuracy(gt_frames: dict | None, sink: StatsSink, n_frames: int, class_names) -> dict:
    """mAP@0.5, MOTA, IDF1 and HOTA over every frame's output boxes (the tracks the viewer sees),
    stream 0; ``map50_detected`` over the frames the detector ran on (``detected_frames``)."""
    if gt_frames is None:
        return {**NO_ACCURACY, "note": "no ground truth: none found beside the input (<stem>.gt.csv)"}
    return accuracy_over([(gt_frames, sink.dets, sink.tracks, n_frames)], class_names)


def output_digest(sink: StatsSink, n_frames: int, gt_file) -> str:
    """SHA-256 of what accuracy scores: stream 0's detections and tracks of every frame, the frame
    count and the ground truth file's bytes. Two runs with the same digest score the same."""
    import hashlib
    from pathlib import Path

    h = hashlib.sha256(f"{n_frames}".encode())
    h.update(Path(gt_file).read_bytes() if gt_file and Path(gt_file).is_file() else b"")
    for name, per_frame in (("dets", sink.dets), ("tracks", sink.tracks)):
        h.update(name.encode())
        for f in sorted(per_frame):
            a = np.ascontiguousarray(per_frame[f], dtype=np.float64)
            h.update(f"{f}:{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def accuracy_cached(gt_frames: dict | None, sink: StatsSink, n_frames: int, class_names, *, gt_file,
                    cache_dir) -> dict:
    """:func:`accuracy`, scored once per output: the score of an output already scored (the same
    :func:`output_digest`, as repeats of a deterministic run produce) is read back from
    ``<cache_dir>/accuracy/<digest>.json`` instead of scored again (pycocotools and TrackEval take
    seconds per thousand frames). The document says which (``scored``: ``computed`` or ``cached``)."""
    import json
    import os
    from pathlib import Path

    if gt_frames is None or cache_dir is None:
        return accuracy(gt_frames, sink, n_frames, class_names)
    digest = output_digest(sink, n_frames, gt_file)
    path = Path(cache_dir) / "accuracy" / f"{digest}.json"
    try:
        return {**json.loads(path.read_text()), "scored": "cached", "output_digest": digest}
    except (OSError, ValueError):
        pass
    acc = accuracy(gt_frames, sink, n_frames, class_names)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(acc))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs the next run its scoring time
    return {**acc, "scored": "computed", "output_digest": digest}


def track_boxes(tracks: np.ndarray) -> np.ndarray:
    """Tracks ``(K, 7) [x1, y1, x2, y2, cls, track_id, score]`` as scored boxes ``(K, 6) [x1, y1,
    x2, y2, score, cls]``: a track carries the score of its last detection
    (``source_code.tracker.Track.score``)."""
    if tracks is None or len(tracks) == 0:
        return np.zeros((0, 6))
    return np.concatenate([tracks[:, :4], tracks[:, 6:7], tracks[:, 4:5]], 1)


def accuracy_over(parts: list[tuple], class_names) -> dict:
    """Accuracy of several sequences taken as one: ``parts`` holds one ``(ground truth, detections,
    tracks, frames)`` per sequence (the dicts of a ``StatsSink``). The sequences are laid end to end
    with their object and track ids kept apart, so MOTA and IDF1 equal TrackEval's combination of
    the sequences. ``map50`` scores what the viewer sees: every frame's tracks, those the tracker
    carried between detections included (each with its last detection's score);
    ``map50_detected`` scores the detector's own boxes on the ``detected_frames`` it ran on."""
    from source_code.metrics import map50, tracking_metrics

    empty = np.zeros((0, 6))
    gts, dets, gt_list, trk_list, shown = [], [], [], [], []
    for i, (gt, det, trk, n) in enumerate(parts):
        apart = np.array([0, 0, 0, 0, 0, i * 1_000_000])  # ids of sequence i never meet those of another
        for f in range(n):
            g = gt.get(f, empty)
            gt_list.append(g + apart[: g.shape[1]] if len(parts) > 1 else g)
            t = np.concatenate([trk[f][:, :4], trk[f][:, 4:6]], 1) if f in trk else empty
            trk_list.append(t + apart[: t.shape[1]] if len(parts) > 1 else t)
            shown.append(track_boxes(trk.get(f)))
            if f in det:
                gts.append(g[:, :5])
                dets.append(det[f])
    n_cls = len(class_names)
    every = map50([g[:, :5] for g in gt_list], shown, num_classes=n_cls, class_names=class_names) if gt_list \
        else {"map50": None, "per_class": {}}
    m = (map50(gts, dets, num_classes=n_cls, class_names=class_names)
         if dets else {"map50": None, "per_class": {}})
    t = tracking_metrics(gt_list, trk_list, class_names=class_names)
    frames = sum(p[3] for p in parts)
    where = "stream 0" if len(parts) == 1 else f"{len(parts)} sequences (stream 0 of every rank) end to end"
    return {"map50": every["map50"], "map50_detected": m["map50"], "detected_frames": len(dets),
            "mota": t["mota"], "idf1": t["idf1"], "hota": t["hota"],
            "per_class": {"map50": every["per_class"], "map50_detected": m["per_class"], **t["per_class"]},
            "counts": t.get("counts", {}),
            "note": f"{where}, {frames} frames; map50 over every frame's tracks (what the viewer sees), "
                    f"map50_detected over the {len(dets)} frames the detector ran on"}
