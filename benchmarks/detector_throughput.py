"""Benchmark: detector-only throughput (frames/s) of every inference backend at several batch sizes.

    python benchmarks/detector_throughput.py --out reports/bench/detector_throughput.csv
        [--device cuda|cpu] [--batch-sizes 1,8,32] [--configs torch-fp32,onnxruntime-int8,...]
        [--min-seconds 2] [--max-iters 200] [--weights W] [--cache-dir D] [--tf32 default|on|off]

Writes the CSV at ``--out`` and a markdown table beside it (same stem, ``.md``). Configurations
this machine cannot run (no GPU, no TensorRT, no onnxruntime-gpu) are rows with status
``skipped`` and the reason ``make_backend`` gave. Only the forward pass is timed: the input is
a float32 batch already on the device, and on CUDA the loop ends with a synchronize.
Backend creation (ONNX export, INT8 calibration, engine build, torch.compile, graph capture)
happens before timing and is reported as ``setup_s``; it is cached across runs except for
compile and capture.

``--tf32``: PyTorch's default lets cuDNN run FP32 convolutions as TF32 on Ampere/Hopper GPUs, so
"fp32" rows there are TF32 unless ``--tf32 off`` (``make_backend(tf32=...)``; column ``tf32``).

Frames are random: a dense convolutional network does the same work whatever the pixels.
Without trained weights the detector is built with random weights for the same reason.
"""
from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import time
from pathlib import Path

import torch

from source_code.stage_alone import time_backend  # one home: the detector stage timed alone

# label -> make_backend keyword arguments
CONFIGS: dict[str, dict] = {
    "torch-fp32": dict(backend="torch", precision="fp32"),
    "torch-fp16": dict(backend="torch", precision="fp16"),
    "torch-fp32-channels_last": dict(backend="torch", precision="fp32", channels_last=True),
    "torch-fp16-channels_last": dict(backend="torch", precision="fp16", channels_last=True),
    "torch-fp32-cuda_graphs": dict(backend="torch", precision="fp32", cuda_graphs=True),
    "torch-fp16-channels_last-cuda_graphs": dict(backend="torch", precision="fp16", channels_last=True, cuda_graphs=True),
    "torch-fp32-compile": dict(backend="torch", precision="fp32", compile=True),
    "torch-fp16-compile": dict(backend="torch", precision="fp16", compile=True),
    "onnxruntime-fp32": dict(backend="onnxruntime", precision="fp32"),
    "onnxruntime-int8": dict(backend="onnxruntime", precision="int8"),
    "tensorrt-fp32": dict(backend="tensorrt", precision="fp32"),
    "tensorrt-fp16": dict(backend="tensorrt", precision="fp16"),
    "tensorrt-int8": dict(backend="tensorrt", precision="int8"),
}
COLUMNS = ["config", "backend", "precision", "device", "batch_size", "frames_per_s", "ms_per_batch", "iters",
           "setup_s", "status", "reason", "backend_name", "device_name", "torch", "threads", "load_avg_1m", "tf32"]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def run(*, configs: list[str], batch_sizes: list[int], device: str, min_seconds: float, max_iters: int,
        weights: Path | None, cache_dir: Path | None, warmup: int = 2, log=print,
        tf32: bool | None = None) -> list[dict]:
    """Benchmark each configuration at each batch size; one row dict per pair (``COLUMNS``)."""
    from source_code.backends import BackendUnavailable, make_backend
    from source_code.detector import DEFAULT_WEIGHTS, INPUT_HW, build_detector, load_detector

    path = weights or DEFAULT_WEIGHTS
    if path.is_file():
        model = load_detector(path)
    else:
        log(f"no weights at {path}: timing the detector with random weights")
        torch.manual_seed(0)
        model = build_detector().eval()
    dev = torch.device(device)
    common = dict(device_name=device_name(dev) if dev.type == "cpu" or torch.cuda.is_available() else device,
                  torch=torch.__version__, threads=torch.get_num_threads(), device=device,
                  tf32="default" if tf32 is None else ("on" if tf32 else "off"))
    rows = []
    for label in configs:
        kwargs = CONFIGS[label]
        for batch in batch_sizes:
            row = dict(config=label, backend=kwargs["backend"], precision=kwargs["precision"], batch_size=batch,
                       frames_per_s="", ms_per_batch="", iters="", setup_s="", status="ok", reason="",
                       backend_name="", load_avg_1m="", **common)
            if kwargs.get("compile"):
                # a fresh compiler cache per point: after 8 shapes/dtypes of the same forward, dynamo
                # stops recompiling and silently runs it eagerly (seen on the H100 at fp16, batch 32)
                torch._dynamo.reset()
            t0 = time.perf_counter()
            try:
                backend = make_backend(model, device=device, batch_size=batch, cache_dir=cache_dir, tf32=tf32, **kwargs)
            except BackendUnavailable as exc:
                row.update(status="skipped", reason=str(exc))
                rows.append(row)
                log(f"{label:<38} b={batch:<3} skipped: {exc}")
                break  # the same reason holds for every batch size
            row["setup_s"] = round(time.perf_counter() - t0, 2)
            # Other processes on the machine skew CPU figures badly (OpenMP threads wait on each
            # other), so each row records the load it was measured under.
            row["load_avg_1m"] = round(os.getloadavg()[0], 2)
            try:
                x = torch.rand(batch, 3, *INPUT_HW, device=dev)
                sec, iters = time_backend(backend, x, min_seconds=min_seconds, max_iters=max_iters, warmup=warmup)
                row.update(frames_per_s=round(batch / sec, 2), ms_per_batch=round(sec * 1e3, 3), iters=iters,
                           backend_name=backend.name)
                log(f"{label:<38} b={batch:<3} {batch / sec:9.2f} frames/s  {sec * 1e3:9.2f} ms/batch  "
                    f"({iters} iters, setup {row['setup_s']} s)")
            except (RuntimeError, MemoryError) as exc:  # e.g. out of memory at a large batch
                row.update(status="failed", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                log(f"{label:<38} b={batch:<3} failed: {row['reason']}")
            finally:
                backend.close()
            rows.append(row)
    return rows


def write(rows: list[dict], out: Path) -> tuple[Path, Path]:
    """Write ``rows`` as CSV at ``out`` and as a markdown table at ``out`` with suffix ``.md``."""
    from tabulate import tabulate

    out.parent.mkdir(parents=True, exist_ok=True)
    csv_path = out if out.suffix == ".csv" else out.with_suffix(".csv")
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    md_path = out.with_suffix(".md")
    first = rows[0] if rows else {}
    head = (f"Detector throughput (frames/s, forward pass only) on {first.get('device_name', '?')}, "
            f"torch {first.get('torch', '?')}, {first.get('threads', '?')} threads\n\n")
    table = [[r["config"], r["batch_size"] if r["status"] != "skipped" else "all", r["frames_per_s"],
              r["ms_per_batch"], r["setup_s"], r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}"]
             for r in rows]
    md_path.write_text(head + tabulate(table, headers=["config", "batch", "frames/s", "ms/batch", "setup s", "status"],
                                       tablefmt="github") + "\n")
    return csv_path, md_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="CSV to write (markdown beside it, .md)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing CSV/markdown at --out")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-sizes", default="1,8,32", help="comma-separated (default 1,8,32)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated from: {', '.join(CONFIGS)}")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="timed seconds per point, at least")
    parser.add_argument("--max-iters", type=int, default=200, help="timed iterations per point, at most")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls before timing each point")
    parser.add_argument("--weights", type=Path, default=None)
    parser.add_argument("--cache-dir", type=Path, default=None, help="ONNX/engine cache (default: backends default)")
    parser.add_argument("--tf32", choices=["default", "on", "off"], default="default",
                        help="TF32 for FP32 convolutions/matmuls (default: PyTorch's, TF32 convolutions on Ampere+)")
    args = parser.parse_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown config(s) {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    targets = [args.out if args.out.suffix == ".csv" else args.out.with_suffix(".csv"), args.out.with_suffix(".md")]
    there = [str(t) for t in targets if t.exists()]
    if there and not args.overwrite:
        parser.error(f"{' and '.join(there)} already exist(s): pass --overwrite to replace, or another --out")
    batches = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    rows = run(configs=configs, batch_sizes=batches, device=args.device, min_seconds=args.min_seconds,
               max_iters=args.max_iters, weights=args.weights, cache_dir=args.cache_dir, warmup=args.warmup,
               tf32={"default": None, "on": True, "off": False}[args.tf32])
    csv_path, md_path = write(rows, args.out)
    print(f"wrote {csv_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
