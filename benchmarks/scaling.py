"""Benchmark: one process, several processes, several ranks under torchrun: aggregate frames/s.

Runs source_code/detect_video.py on the same clip and the same frames per source through
``labkit.bench``: one process with one stream, one process with N streams, N processes side by
side (``bench.run_parallel``, one stream each) and N ranks under torchrun (``bench.run(...,
launcher="torchrun", nproc=N)`` with ``--streams N``: one stream per rank, gloo on the CPU).
Prints one row per way with its frames/s (median of the repeats; summed over processes, or
rank 0's aggregate over the common window) and the ledger it appended to.

    python benchmarks/scaling.py [--input CLIP] [--n 2] [--frames 64] [--repeats 3] [--device cpu]
        [--out reports/scaling] [-- EXTRA APP FLAGS]

Threads: the one process uses every core (torch's default); each of the N processes or ranks gets
``--threads`` cores / N (torchrun alone would give each rank 1 thread, and processes side by side
would each take every core), so the multi-process rows differ only in how they are started.
Without --input a 640x360 clip (4 s, seed 7) is generated under --out. The ledger is
``<out>/scaling.jsonl`` (not ``ledger.jsonl``: the lab's speed-up table leaves these rows out).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from labkit import bench
from labkit.bench.ledger import Ledger, machine_label

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "source_code" / "detect_video.py"


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    cut = given.index("--") if "--" in given else len(given)  # after "--": the application's own flags
    args, extra = _parser().parse_args(given[:cut]), given[cut + 1:]
    args.out.mkdir(parents=True, exist_ok=True)
    clip = args.input or _clip(args.out / "clip.mp4")
    n = args.n
    command = [sys.executable, str(APP), "--input", str(clip), "--frames", str(args.frames), "--device", args.device,
               "--no-osd", *extra]
    ledger = Ledger(args.out / "scaling.jsonl")
    kw = dict(warmup=args.warmup, ledger=ledger, results_dir=args.out / "results", timeout=args.timeout)
    share = command + ["--threads", str(max(1, (os.cpu_count() or 1) // n))]  # each of n gets its share of cores
    ways = [
        ("1 process, 1 stream", lambda: bench.run(command, step="scale_1p", repeats=args.repeats, **kw)),
        (f"1 process, {n} streams",
         lambda: bench.run(command + ["--streams", str(n)], step=f"scale_1p_s{n}", repeats=args.repeats, **kw)),
        (f"{n} processes, 1 stream each", lambda: _median_parallel(share, n, args.repeats, kw)),
        (f"{n} ranks (torchrun), 1 stream each",
         lambda: bench.run(share + ["--streams", str(n)], step=f"scale_ranks{n}", repeats=args.repeats,
                           launcher="torchrun", nproc=n, **kw)),
    ]
    rows = [(label, run()) for label, run in ways]
    env = ledger.rows()[-1]["env"]
    print(f"machine: {machine_label(env)}; clip {clip.name}, {args.frames} frames per source "
          f"({args.warmup} warm-up), device {args.device}; median of {args.repeats}")
    base = rows[0][1].fps
    for label, r in rows:
        print(f"{label:<36} {r.fps:8.1f} frames/s  {r.fps / base:5.2f}x")
    print(f"ledger: {ledger.path}")
    return 0 if all(r.ok for _, r in rows) else 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kw in (("--input", {"type": Path, "help": "video (default: generate one under --out)"}),
                     ("--n", {"type": int, "default": 2, "help": "processes and ranks"}),
                     ("--frames", {"type": int, "default": 64, "help": "frames per source"}),
                     ("--warmup", {"type": int, "default": 8}), ("--repeats", {"type": int, "default": 3}),
                     ("--device", {"default": "cpu", "choices": ("cpu", "cuda", "auto")}),
                     ("--out", {"type": Path, "default": ROOT / "reports" / "scaling"}),
                     ("--timeout", {"type": float, "default": 1800, "help": "seconds allowed per run"})):
        p.add_argument(flag, **kw)
    return p


def _clip(path: Path) -> Path:
    """A 640x360 clip of 4 s at 30 frames/s (seed 7) with its ground truth, made once."""
    from source_code.scenes import SceneConfig, gt_path_for, make_video

    if not (path.exists() and gt_path_for(path).exists()):
        make_video(path, seconds=4, config=SceneConfig(seed=7, width=640, height=360, fps=30.0))
    return path


def _median_parallel(command, n, repeats, kw):
    """``run_parallel`` ``repeats`` times; the result with the median summed fps."""
    runs = sorted((bench.run_parallel(command, processes=n, step=f"scale_{n}p", **kw)
                   for _ in range(repeats)), key=lambda r: r.fps)
    return runs[len(runs) // 2]


if __name__ == "__main__":
    sys.exit(main())
