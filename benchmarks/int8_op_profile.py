"""Benchmark: ONNX Runtime INT8 (QDQ) against FP32 on this CPU: speed, op profile, mAP@0.5.

    python benchmarks/int8_op_profile.py [--batch 4] [--repeats 10] [--cache-dir D] [--eval-seed 4242]

Builds (or reuses) the FP32 ONNX model and the application's INT8 QDQ model (its default
calibration), then for each:
- times ``session.run`` on one batch of frames of a generated scene (median of ``--repeats``
  after one warm-up run, with the interquartile range), with ONNX Runtime's profiling on;
- reads ONNX Runtime's op profile (``labkit.report.ort_profile``): share of kernel time in quantized
  ops, in QuantizeLinear/DequantizeLinear and in float ops;
- scores mAP@0.5 of the trained detector on every 3rd frame of a held-out 3 s scene
  (``--eval-seed``), with ``source_code.metrics.map50``.
Prints the INT8/FP32 speed ratio, both op profiles and the mAP difference in points.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed_profile(path: Path, x: np.ndarray, repeats: int, prefix: Path):
    """(run times in ms, profile JSON path) of ``repeats`` runs of ``path`` on ``x``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(prefix)
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    sess.run(None, {name: x})
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        times.append((time.perf_counter() - t0) * 1e3)
    return np.array(times), Path(sess.end_profiling())


def clip_map50(backend, video, *, every: int = 3, batch: int = 8) -> float:
    """mAP@0.5 of ``backend``'s detections on every ``every``-th frame of a generated ``video``."""
    import torch

    from source_code.backends import read_video_frames
    from source_code.detector import INPUT_HW, NUM_CLASSES, decode, preprocess_frames, scale_boxes
    from source_code.metrics import map50
    from source_code.scenes import gt_path_for, read_gt

    frames = read_video_frames(video)
    picks = list(range(0, len(frames), every))
    gt = read_gt(gt_path_for(video))
    dets = []
    for i in range(0, len(picks), batch):
        chunk = preprocess_frames(np.stack([frames[j] for j in picks[i:i + batch]]), INPUT_HW)
        outs = backend(torch.from_numpy(chunk))
        dets += [scale_boxes(d, INPUT_HW, frames[0].shape[:2]) for d in decode(outs, score_thresh=0.05, max_det=100)]
    return map50([gt.get(j, np.zeros((0, 6))) for j in picks], dets, num_classes=NUM_CLASSES)["map50"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "labkit" / "backends")
    parser.add_argument("--eval-seed", type=int, default=4242)
    parser.add_argument("--no-map", action="store_true", help="skip the mAP comparison")
    args = parser.parse_args(argv)

    import onnx

    from labkit.report.ort_profile import class_shares, op_profile
    from source_code import backends as B
    from source_code.detector import INPUT_HW, load_detector

    model = load_detector(None, device="cpu")
    cache = args.cache_dir
    fp32 = B.ensure_onnx(model, cache_dir=cache, input_hw=INPUT_HW)
    int8 = B.ensure_int8_onnx(fp32, calibration=B.CalibrationSettings(), input_hw=INPUT_HW, cache_dir=cache,
                              workdir=cache / "calibration_scenes")
    ops = collections.Counter(n.op_type for n in onnx.load(str(int8)).graph.node)
    print(f"INT8 model {int8.name}: {dict(ops)}")
    x = B.scene_frames(seed=args.eval_seed, count=args.batch, seconds=1.0, workdir=cache / "calibration_scenes")
    medians = {}
    for tag, path in (("fp32", fp32), ("int8", int8)):
        times, prof = timed_profile(path, x, args.repeats, cache / f"ort_profile_{tag}")
        q1, med, q3 = np.percentile(times, [25, 50, 75])
        medians[tag] = med
        shares = class_shares(prof)
        print(f"\n{tag}: {med:.1f} ms per batch of {args.batch} (IQR {q1:.1f}-{q3:.1f}, {args.repeats} runs); "
              f"kernel time: quantized {shares['quantized']:.1%}, Q/DQ {shares['qdq']:.1%}, float {shares['float']:.1%}")
        print(op_profile(prof).head(8).to_string(index=False))
    print(f"\nINT8/FP32 speed: {medians['fp32'] / medians['int8']:.2f}x")
    if not args.no_map:
        video = B.scene_video(seed=args.eval_seed, seconds=3.0, workdir=cache / "calibration_scenes")
        maps = {p: clip_map50(B.make_backend(model, backend="onnxruntime", precision=p, batch_size=8,
                                             cache_dir=cache), video) for p in ("fp32", "int8")}
        print(f"mAP@0.5 on scene seed {args.eval_seed} (3 s, every 3rd frame): fp32 {maps['fp32']:.4f}, "
              f"int8 {maps['int8']:.4f} ({100 * (maps['int8'] - maps['fp32']):+.2f} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
