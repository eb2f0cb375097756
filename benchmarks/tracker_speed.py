"""Benchmark: milliseconds per frame of the tracker alone, fed with noisy ground-truth boxes.

    python benchmarks/tracker_speed.py [--seconds 10] [--seed 11] [--repeats 5]

Generates a 1280x720 scene (``source_code.scenes``, written to a temporary folder), turns its
ground truth into detections (boxes jittered by 2 px, random scores 0.3-0.95, fixed seed) and
times ``Tracker.update`` over every frame; prints the median over ``--repeats`` passes. The
tracker runs once per frame in the pipeline's Python thread, so on a fast GPU its cost bounds
the frames/s of the whole pipeline (see reports/reference/h100/pipeline_table.md).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from source_code.scenes import SceneConfig, gt_path_for, make_video, read_gt
from source_code.tracker import Tracker


def detections(gt: dict, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for f in sorted(gt):
        g = gt[f]
        out.append(np.concatenate([g[:, :4] + rng.normal(0, 2, (len(g), 4)),
                                   rng.uniform(0.3, 0.95, (len(g), 1)), g[:, 4:5]], axis=1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        video, _ = make_video(Path(tmp) / "clip.mp4", seconds=args.seconds, config=SceneConfig(seed=args.seed))
        gt = read_gt(gt_path_for(video))
    dets = detections(gt)
    times = []
    for _ in range(args.repeats):
        trk = Tracker()
        t0 = time.perf_counter()
        for d in dets:
            trk.update(d)
        times.append((time.perf_counter() - t0) / len(dets) * 1e3)
    objects = np.mean([len(d) for d in dets])
    print(f"tracker: {len(dets)} frames, {objects:.1f} objects per frame on average; "
          f"median {statistics.median(times):.3f} ms/frame over {args.repeats} passes "
          f"(min {min(times):.3f}, max {max(times):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
