"""Benchmark: what tracing OS runtime calls (``osrt``, labkit's default as nsys's own) and children that fork
without exec (``--trace-fork-before-exec=true``, labkit's default) cost a run.

Runs one configuration of the application under ``nsys profile`` with ``--trace=cuda,nvtx``, with
``--trace=cuda,nvtx,osrt`` and with that but forks not followed (``--trace-fork-before-exec=false``),
alternating, ROUNDS times each (plus the same number of runs without nsys),
and prints per trace: the application's own frames/s (median and range; its timed frames only, so
nsys's start and the export are not in it), the run's wall time, the report's size, labkit's load of
it (the export to SQLite and the read, seconds) and the OS runtime calls recorded. The default is the
lab's baseline on the small clip (the synchronous pipeline: decode reads the file, the stages run one
after another).

Seen on the 2-core CPU VM (2026-11-26, Debian nsys 2022.4.2.1, nothing else running; the defaults):
no nsys 34.01 frames/s (32.01-34.40); ``cuda,nvtx`` 33.46 (-1.6 %), a 0.17 MiB report; ``cuda,nvtx,osrt``
33.17 (-2.5 %), 0.32 MiB and 8,761 OS runtime calls: tracing OS runtime calls cost about one per cent
of frames/s more, inside the runs' own range, and doubled the report. Following forks (2026-12-01, the
VM loaded by other jobs, 2 rounds: 'no nsys' ran at 10 frames/s then): ``cuda,nvtx,osrt`` 24.52
frames/s (24.42-24.61) against 22.85 (21.36-24.35) with forks not followed, inside the runs' range;
the baseline is one process, so nothing more is traced.

    python benchmarks/osrt_cost.py [--input CLIP] [--frames 300] [--rounds 3] [--out reports/osrt-cost]
        [-- EXTRA APP FLAGS]

Without --input the lab's small-mode clip is used (``labbook.video.sample_video("small")``, made if
missing). Frames/s of a CPU run vary by a few per cent from run to run on a shared machine: read the
difference of the medians beside the ranges.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "source_code" / "detect_video.py"
TRACES = ("cuda,nvtx", "cuda,nvtx,osrt", "cuda,nvtx,osrt nofork")
"""The traces compared (each as labkit records it: forks followed), the last with forks not followed."""


def _fps(results: Path) -> float:
    return float(json.loads(results.read_text())["fps"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", type=Path, help="video (default: the lab's small-mode clip)")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--input-hw", default="192x320", help="the detector's input (small mode's by default)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "osrt-cost")
    p.add_argument("extra", nargs="*", metavar="-- EXTRA", help="the application's own flags, after --")
    args = p.parse_args(argv)
    extra = args.extra
    sys.path.insert(0, str(ROOT))
    import labkit
    from labkit.bench.ledger import machine_label
    from labkit.env import cache_dir, fingerprint
    from labkit.record.nsys import record

    clip = args.input
    if clip is None:
        from labbook.video import sample_video

        clip = sample_video("small")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows: dict[str, list[dict]] = {"none": [], **{t: [] for t in TRACES}}
    for rnd in range(args.rounds):
        for trace in ("none", *TRACES):
            tag = "none" if trace == "none" else trace.replace(",", "_").replace(" ", "_")
            name = f"osrt-{stamp}-{tag}-{rnd}"
            res = args.out / f"{name}.json"
            cmd = [sys.executable, str(APP), "--input", str(clip), "--frames", str(args.frames), "--warmup",
                   str(args.warmup), "--input-hw", args.input_hw, "--no-osd", "--cache-dir",
                   str(cache_dir() / "backends"), "--results", str(res), *extra]
            t0 = time.perf_counter()
            if trace == "none":
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                rows[trace].append({"fps": _fps(res), "wall_s": time.perf_counter() - t0})
                continue
            rec = record(cmd, name=name, trace=trace.split()[0], outdir=args.out, progress=False,
                         nsys_args=["--trace-fork-before-exec=false"] if trace.endswith("nofork") else ())
            wall = time.perf_counter() - t0
            t1 = time.perf_counter()
            rep = labkit.load_report(rec.nsys_rep)  # exports to SQLite beside it, then reads it
            rows[trace].append({"fps": _fps(res), "wall_s": wall, "load_s": time.perf_counter() - t1,
                                "report_mb": rec.nsys_rep.stat().st_size / 2**20, "osrt_calls": len(rep.osrt)})
            print(f"round {rnd + 1}: {trace:>15}: {rows[trace][-1]['fps']:.2f} frames/s", file=sys.stderr)
    env = fingerprint()
    print(f"machine: {machine_label(env)}; nsys {env.get('nsys')}; clip {clip.name}, {args.frames} frames "
          f"({args.warmup} warm-up), input {args.input_hw}, {' '.join(extra) or 'the baseline'}; "
          f"{args.rounds} rounds, alternating")
    print("| trace | frames/s, median (range) | wall s | report MiB | load s (export + read) | OS runtime calls |")
    print("|---|---|---|---|---|---|")
    base = statistics.median(r["fps"] for r in rows["none"])
    for trace, rs in rows.items():
        fps = [r["fps"] for r in rs]
        med = statistics.median(fps)

        def cell(key: str, fmt: str, rs=rs) -> str:
            return f"{statistics.median(r[key] for r in rs):{fmt}}" if key in rs[0] else "-"

        print(f"| {'no nsys' if trace == 'none' else trace} | {med:.2f} ({min(fps):.2f}-{max(fps):.2f}), "
              f"{med / base - 1:+.1%} | {cell('wall_s', '.1f')} | {cell('report_mb', '.2f')} | "
              f"{cell('load_s', '.2f')} | {cell('osrt_calls', '.0f')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
