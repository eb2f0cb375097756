"""Export the detector to ONNX with a dynamic batch axis, and check it against PyTorch.

    python source_code/export_onnx.py --out detector.onnx [--weights W] [--opset 17] [--fp16]
        [--check-frames 8] [--check-seed 9901]

The command line over ``source_code.backends.onnx_export`` (the exporter and its notes live
there; its names are re-exported here for callers of this module).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from source_code.backends.artifacts import model_hash
from source_code.backends.calibration import scene_frames
from source_code.backends.onnx_export import (INPUT_NAME, MAX_BATCH, OUTPUT_NAMES, Agreement, ExportError,
                                              Fp16WithFp32IO, check_against_torch, compare_outputs, export_onnx)

__all__ = ["INPUT_NAME", "MAX_BATCH", "OUTPUT_NAMES", "Agreement", "ExportError", "Fp16WithFp32IO",
           "check_against_torch", "compare_outputs", "export_onnx", "main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="ONNX file to write")
    parser.add_argument("--weights", type=Path, default=None, help="detector weights (default: the packaged ones)")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (>= 17, default 17)")
    parser.add_argument("--check-frames", type=int, default=8,
                        help="frames of a generated scene to compare against PyTorch (0: skip the check)")
    parser.add_argument("--check-seed", type=int, default=9901, help="scene seed for the check")
    parser.add_argument("--fp16", action="store_true",
                        help="float16 weights and activations, float32 input/outputs (for strongly typed TensorRT)")
    args = parser.parse_args(argv)

    from source_code.detector import INPUT_HW, load_detector

    try:
        model = load_detector(args.weights, device="cpu")
    except FileNotFoundError as exc:
        print(f"export_onnx: {exc}\n  train the detector first or pass --weights PATH", file=sys.stderr)
        return 2
    path = export_onnx(model, args.out, input_hw=INPUT_HW, opset=args.opset,
                       metadata={"labkit.model_hash": model_hash(model, input_hw=INPUT_HW)}, fp16=args.fp16)
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    print(f"wrote {path} (exporter: {meta.get('labkit.exporter')}, {meta.get('labkit.precision')}, "
          f"opset {args.opset}, dynamic batch)")
    if args.check_frames > 0:
        frames = scene_frames(seed=args.check_seed, count=args.check_frames, seconds=1.0)
        agreement = check_against_torch(model, path, frames)
        print(f"ONNX Runtime (CPU) vs PyTorch on generated scene seed {args.check_seed}, {agreement}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
