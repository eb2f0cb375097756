"""Prepare the INT8 model ahead of a run: export to ONNX, calibrate on generated scenes, cache.

    python source_code/calibrate.py [--weights W] [--cache-dir D] [--seeds 9101,9102,9103,9104]
        [--frames-per-seed 16] [--seconds 2] [--method minmax|entropy|percentile] [--target cpu|tensorrt]

``make_backend(..., precision="int8")`` does the same on first use; running this first keeps
calibration (tens of seconds on a CPU) out of the first profiled run. Scene seeds must differ
from the seeds of the clips used for evaluation.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


from source_code.backends.artifacts import default_cache_dir, ensure_int8_onnx, ensure_onnx
from source_code.backends.calibration import TARGETS, CalibrationSettings


def main(argv: list[str] | None = None) -> int:
    defaults = CalibrationSettings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", type=Path, default=None, help="detector weights (default: the packaged ones)")
    parser.add_argument("--cache-dir", type=Path, default=None, help=f"default: {default_cache_dir()}")
    parser.add_argument("--seeds", default=",".join(map(str, defaults.seeds)))
    parser.add_argument("--frames-per-seed", type=int, default=defaults.frames_per_seed)
    parser.add_argument("--seconds", type=float, default=defaults.seconds)
    parser.add_argument("--method", default=defaults.method, choices=["minmax", "entropy", "percentile"])
    parser.add_argument("--target", default=defaults.target, choices=list(TARGETS),
                        help="cpu: every Conv as ONNX Runtime's QLinearConv (U8S8); tensorrt: symmetric INT8")
    args = parser.parse_args(argv)

    from source_code.detector import INPUT_HW, load_detector

    try:
        model = load_detector(args.weights)
    except FileNotFoundError as exc:
        print(f"calibrate: {exc}", file=sys.stderr)
        return 2
    settings = CalibrationSettings(seeds=tuple(int(s) for s in args.seeds.split(",")),
                                   frames_per_seed=args.frames_per_seed, seconds=args.seconds,
                                   method=args.method, per_channel=defaults.per_channel, target=args.target)
    cache = args.cache_dir or default_cache_dir()
    t0 = time.perf_counter()
    fp32 = ensure_onnx(model, cache_dir=cache, input_hw=INPUT_HW)
    int8 = ensure_int8_onnx(fp32, calibration=settings, input_hw=INPUT_HW, cache_dir=cache,
                            workdir=cache / "calibration_scenes")
    print(f"fp32 ONNX: {fp32}\nint8 QDQ:  {int8}\n({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
