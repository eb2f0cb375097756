"""Detect and track vehicles and pedestrians in a video; write the annotated video and a results JSON.

Example: ``python source_code/detect_video.py --input clip.mp4 --results reports/clip.json``
Flags, stage names and the results format are documented in source_code/README.md.
Exit codes: 0 done (status "ok" or "partial"), 1 bad or unreadable input / failure,
2 bad arguments, 3 requested backend/device/weights unavailable.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# OpenMP's default active wait makes torch's CPU threads spin between operators; with the
# pipeline's own threads (decoders, queued stages) on a few cores, the spinning starves them and
# a CPU forward pass at 192x320 measured ~2000 ms instead of ~55 ms on a busy 2-core machine. Passive waiting removes that
# artifact; set OMP_WAIT_POLICY=ACTIVE yourself to see it. Must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

PROG = "detect_video"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        print(f"{PROG}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def _hw(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HxW, e.g. 384x640, got {text!r}") from None
    return h, w


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--input", nargs="+", required=True, metavar="PATH",
                   help="video file(s); one file is copied to every stream, or give one per stream")
    p.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"))
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--streams", type=int, default=1, help="sources decoded concurrently, one decoder thread each")
    p.add_argument("--queues", action="store_true", help="every stage in its own thread with bounded queues")
    p.add_argument("--osd", action=argparse.BooleanOptionalAction, default=True,
                   help="draw boxes and ids and write the output video (--no-osd: no drawing; video only with --output)")
    p.add_argument("--gpu-preprocess", action="store_true", help="upload uint8 frames (pinned) and resize on the GPU")
    p.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "int8"))
    p.add_argument("--backend", default="torch", choices=("torch", "onnxruntime", "tensorrt"))
    p.add_argument("--interval", type=int, default=1, help="run the detector on every K-th frame; track in between")
    p.add_argument("--frames", type=int, default=None, help="process at most N frames per stream")
    p.add_argument("--warmup", type=int, default=10, help="frames excluded from timing")
    p.add_argument("--output", default=None, help="output video (default reports/<input stem>.tracked.mp4)")
    p.add_argument("--results", default=None, help="results JSON path")
    p.add_argument("--weights", default=None, help="detector weights (default source_code/weights/detector.pt)")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--cuda-graphs", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--input-hw", type=_hw, default=None, metavar="HxW",
                   help="network input size (multiples of 32; default 384x640)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--decode-only", action="store_true",
                   help="only decode the same sources with the same decoder threads (the ceiling for frames/s)")
    return p


def flag_args(flags: dict) -> list[str]:
    """Command-line options from snake-case ``flags``: ``batch_size=4`` -> ``--batch-size 4``,
    ``queues=True`` -> ``--queues``, ``osd=False`` -> ``--no-osd``; ``None``/``False`` leave an
    option out. Used by the lab and the benchmarks to build this program's command."""
    out: list[str] = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False and key == "osd":
            out.append("--no-osd")
        elif value is not None and value is not False:
            out += [flag, str(value)]
    return out


def _write_results(path: str | None, doc: dict) -> None:
    if not path:
        return
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(p)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from source_code.pipeline import PipelineConfig, PipelineError, run_pipeline

    cfg = PipelineConfig(
        inputs=tuple(args.input), device=args.device, batch_size=args.batch_size, streams=args.streams,
        queues=args.queues, osd=args.osd, gpu_preprocess=args.gpu_preprocess, precision=args.precision,
        backend=args.backend, interval=args.interval, frames=args.frames, warmup=args.warmup, output=args.output,
        results=args.results, weights=args.weights, channels_last=args.channels_last, cuda_graphs=args.cuda_graphs,
        compile=args.compile, input_hw=args.input_hw, decode_only=args.decode_only)
    if args.results and any(Path(args.results).resolve() == Path(i).resolve() for i in args.input):
        print(f"{PROG}: error: --results {args.results} is an input file", file=sys.stderr)
        return 2
    try:
        if args.threads:
            import torch
            torch.set_num_threads(args.threads)
        doc = run_pipeline(cfg)
    except PipelineError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        _write_results(args.results, {"status": "failed", "error": str(e), "config": vars(args)})
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - never a traceback for the user
        if os.environ.get("LABKIT_DEBUG"):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"{PROG}: error: {type(e).__name__}: {first} (set LABKIT_DEBUG=1 for the traceback)", file=sys.stderr)
        _write_results(args.results, {"status": "failed", "error": f"{type(e).__name__}: {first}", "config": vars(args)})
        return 1
    _write_results(args.results, doc)
    for w in doc["warnings"]:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    acc = doc["accuracy"]

    def fmt(v):
        return "n/a" if v is None else f"{v:.4f}"

    fps = "n/a" if doc["fps"] is None else f"{doc['fps']:.2f}"
    print(f"{doc['status']}: {doc['frames']} frames, {fps} fps, mAP@0.5 {fmt(acc['map50'])}, MOTA {fmt(acc['mota'])}, "
          f"IDF1 {fmt(acc['idf1'])}, HOTA {fmt(acc['hota'])}"
          + (f", video {doc['config']['output']}" if doc['config']['output'] else "")
          + (f", results {args.results}" if args.results else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
