"""Benchmark: how repeatable is one configuration of the application on this machine?

Runs source_code/detect_video.py REPEATS times with the same flags through ``labkit.bench.run``,
appends the result to a ledger and prints each run's frames/s, the medians and the spread
((max - min) / median) of fps and latency p50/p99, and the 95 % bootstrap interval of fps over the
repeats and over each run's batches (+-% of the median: a mode's frames and repeats should keep a
typical step within +-15 %).

    python benchmarks/repeatability.py [--input CLIP] [--repeats 3] [--frames 60] [--warmup 10]
        [--batch-size 4] [--device cpu] [--out reports/repeatability] [-- EXTRA APP FLAGS]

Without --input a 640x360 clip (4 s, seed 7) is generated under --out. The ledger is
``<out>/repeatability.jsonl`` (not ``ledger.jsonl``, so the lab's speed-up table, which collects
every ``ledger.jsonl`` under reports/, leaves these rows out).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from labkit import bench
from labkit.bench.ledger import Ledger, machine_label

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "source_code" / "detect_video.py"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", type=Path, help="video (default: generate one under --out)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "repeatability")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per run")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    clip = args.input
    if clip is None:
        clip = args.out / "clip.mp4"
        if not clip.exists():
            subprocess.run([sys.executable, str(ROOT / "source_code" / "make_video.py"), "--out", str(clip),
                            "--seconds", "4", "--seed", "7", "--width", "640", "--height", "360"], check=True)
    command = [sys.executable, str(APP), "--input", str(clip), "--frames", str(args.frames),
               "--batch-size", str(args.batch_size), "--device", args.device, "--no-osd", *extra]
    ledger = Ledger(args.out / "repeatability.jsonl")
    r = bench.run(command, step="repeatability", repeats=args.repeats, warmup=args.warmup,
                  results_dir=args.out / "results", ledger=ledger, timeout=args.timeout)
    row = ledger.rows()[-1]
    print(f"machine: {machine_label(row['env'])}; {args.frames} frames ({args.warmup} warm-up), "
          f"batch {args.batch_size}, device {args.device}; {args.repeats} runs")
    print(r.repeats[["repeat", "fps", "latency_p50_ms", "latency_p99_ms", "wall_s"]].round(2).to_string(index=False))
    for m in bench.HEADLINE:
        key = "spread" if m == "fps" else f"spread_{m}"
        print(f"{m:>15}: median {r.metrics[m]:9.2f}  spread {r.metrics[key]:6.1%}")
    _intervals(r)
    print(f"ledger: {ledger.path} (line {row['line']}); results: {args.out / 'results'}")
    if not r.ok:
        print("FLAGGED: " + "; ".join(r.flags), file=sys.stderr)
        return 1
    return 0


def _intervals(r) -> None:
    """The 95 % interval of fps the ledger row carries, and each run's own (over its batches), as
    +-% of the median: the figure a mode's frames and repeats must keep within +-15 %."""
    from labkit import annotate
    from labkit.bench.truth import bootstrap_ci

    fps = r.metrics["fps"]
    ci = bootstrap_ci(list(r.repeats["fps"]))
    if ci:
        print(f"95 % interval over {len(r.repeats)} repeats: {ci[0]:.2f} to {ci[1]:.2f} frames/s "
              f"(+-{max(ci[1] - fps, fps - ci[0]) / fps:.1%} of the median)")
    for i, p in enumerate(r.results_paths, 1):
        doc = annotate.read_results(p)
        lo, hi = doc.get("fps_ci95") or (float("nan"), float("nan"))
        print(f"run {i}: {doc['timed_frames']} timed frames, {doc['fps']:.2f} frames/s, 95 % interval over its "
              f"batches {lo:.2f} to {hi:.2f} (+-{max(hi - doc['fps'], doc['fps'] - lo) / doc['fps']:.1%}); "
              f"too short: {doc.get('too_short')}")


if __name__ == "__main__":
    sys.exit(main())
