"""Benchmark: the application's baseline against each single optimization and all of them together,
with the decode-only ceiling of the same sources measured in the same run.

    python benchmarks/pipeline_table.py [--input CLIP] [--seconds 30] [--frames N] [--repeats 3]
        [--repeats-single N] [--warmup 40] [--batch-size 32] [--streams 4] [--all-streams 1,4]
        [--device auto] [--configs a,b,...] [--out reports/pipeline_table] [--overwrite]

Every configuration runs through ``labkit.bench.run`` (measured runs, median and spread of
frames/s, one ledger row each in ``<out>/pipeline_table.jsonl``: not ``ledger.jsonl``, because
``labkit.speedup_table("reports/")`` collects every ``ledger.jsonl`` under reports/, and these rows
are single changes from the baseline, not the lab's cumulative steps of the same names). The baseline is batch 1, synchronous,
CPU preprocessing, display on (draw + write the video), fp32. Each single change adds one flag
to it; ``all_sN`` sets them together with N streams, for each N of ``--all-streams``
(``all_sN_interval3`` also detects on every third frame). ``decode_only_1`` (one stream decoded
in the main thread) and ``decode_only_sN`` (N decoder threads) decode the same sources with the
same decoder threads and nothing else (``detect_video.py --decode-only``): the ceiling of each
run. Prints a markdown table and writes it to ``<out>/pipeline_table.md`` (and ``.csv``):
frames/s, spread, speed-up over the baseline, share of the decode-only ceiling of the same
sources, latency, mAP@0.5 and MOTA (stream 0, against the clip's ground truth).

Without --input a 1280x720 clip (``--seconds``, seed 11, held out from training) is generated
under ``--out``. Runs that this machine cannot do (no GPU for a GPU flag) fail with the
application's message and are reported as such; the table keeps the others.
"""
from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd

from labkit import bench
from labkit.env import cache_dir
from labkit.errors import LabkitError
from labkit.bench.ledger import Ledger, machine_label
from source_code.options import to_argv

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "source_code" / "detect_video.py"


def single_changes(batch: int, streams: int, device: str, all_streams: tuple[int, ...] = (1,)) -> dict[str, dict]:
    """This benchmark's catalogue (not the lab's cumulative steps, ``labbook.catalogue``, although
    some names are the same): name -> detect_video flags: the baseline, each single change, and for each stream count in
    ``all_streams`` every change together (``all_sN``; ``all_sN_interval3`` also detects on every
    third frame), each preceded by the decode-only ceiling of the same decoder threads."""
    gpu = device != "cpu"
    single = {
        "queues": {"queues": True},
        "no_osd": {"osd": False},
        f"batch{batch}": {"batch_size": batch},
        f"streams{streams}": {"streams": streams},
        **({"gpu_preprocess": {"gpu_preprocess": True}, "fp16": {"precision": "fp16"},
            "cuda_graphs": {"cuda_graphs": True}} if gpu else {}),
        "channels_last": {"channels_last": True},
        "interval3": {"interval": 3},
    }
    together = {k: v for name, flags in single.items() if not name.startswith(("interval", "streams"))
                for k, v in flags.items()}
    out = {"decode_only_1": {"decode_only": True}, "baseline": {}, **single}
    for n in dict.fromkeys((*all_streams, streams)):
        out[f"decode_only_s{n}"] = {"decode_only": True, "queues": True, "streams": n}
    for n in all_streams:
        out[f"all_s{n}"] = {**together, "streams": n}
        out[f"all_s{n}_interval3"] = {**together, "streams": n, "interval": 3}
    return out


def ceiling(flags: dict) -> str:
    """The decode-only configuration with the same sources and decoder threads as ``flags``."""
    n = flags.get("streams", 1)
    return f"decode_only_s{n}" if (n > 1 or flags.get("queues")) else "decode_only_1"


def options(clip: Path, frames: int, device: str, flags: dict, out: Path) -> dict:
    """Every option of one configuration's run (what its ledger row records as ``config``); a run
    that draws writes its video under ``out``, passed as a flag, not through the environment."""
    drawn = flags.get("osd", True) is not False and not flags.get("decode_only")
    return {"inputs": [str(clip)], "frames": frames, "device": device, "cache_dir": str(cache_dir() / "backends"),
            **({"output": str(out / f"{clip.stem}.tracked.mp4")} if drawn else {}), **flags}


def command(opts: dict) -> list[str]:
    """The argv of a run with ``opts``: the one place this benchmark turns options into a command line."""
    return [sys.executable, str(APP), *to_argv(opts)]


def table(results: dict[str, object], all_flags: dict[str, dict]) -> pd.DataFrame:
    base = results.get("baseline")
    base_fps = base.fps if base is not None and not isinstance(base, str) else math.nan
    rows = []
    for name, r in results.items():
        flags = all_flags[name]
        if isinstance(r, str):
            rows.append({"config": name, "flags": _flag_text(flags), "status": r})
            continue
        ceiling_run = results.get(ceiling(flags))
        ceiling_fps = ceiling_run.fps if ceiling_run is not None and not isinstance(ceiling_run, str) else math.nan
        med = r.repeats[~r.repeats["profiled"]][["map50", "mota"]].median()
        rows.append({
            "config": name, "flags": _flag_text(flags), "status": "ok" if r.ok else "; ".join(r.flags),
            "fps": r.fps, "spread": r.spread, "runs": int((~r.repeats["profiled"]).sum()),
            "speedup": r.fps / base_fps,
            "of_decode_only": (r.fps / ceiling_fps) if not flags.get("decode_only") else math.nan,
            "latency_p50_ms": r.latency_p50_ms, "latency_p99_ms": r.latency_p99_ms,
            "map50": med.get("map50"), "mota": med.get("mota"),
        })
    return pd.DataFrame(rows)


def _flag_text(flags: dict) -> str:
    if not flags:
        return "batch 1, sync, CPU preprocess, OSD + video, fp32"
    return " ".join(to_argv(flags))


def markdown(df: pd.DataFrame, header: str) -> str:
    show = df.copy()
    if "runs" in show and "spread" in show:
        show["spread"] = show["spread"].where(show["runs"] > 1)  # one run has no spread
    for col, fmt in (("fps", "{:.1f}"), ("spread", "{:.1%}"), ("speedup", "{:.2f}x"), ("of_decode_only", "{:.0%}"),
                     ("latency_p50_ms", "{:.1f}"), ("latency_p99_ms", "{:.1f}"), ("map50", "{:.3f}"),
                     ("mota", "{:.3f}")):
        if col in show:
            show[col] = show[col].map(lambda v, f=fmt: "" if v is None or v != v else f.format(v))
    return header + "\n\n" + show.to_markdown(index=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", type=Path, help="video with <stem>.gt.csv beside it (default: generate one)")
    p.add_argument("--seconds", type=float, default=30.0, help="length of the generated clip")
    p.add_argument("--frames", type=int, default=None, help="frames per stream (default: the whole clip)")
    p.add_argument("--repeats", type=int, default=3, help="runs of the baseline, decode-only and all_* configurations")
    p.add_argument("--repeats-single", type=int, default=None, help="runs of each single change (default --repeats)")
    p.add_argument("--all-streams", default="1,4", help="stream counts of the all-together configurations")
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"))
    p.add_argument("--configs", default=None, help="comma-separated subset of the configuration names")
    p.add_argument("--timeout", type=float, default=1200, help="seconds allowed per run")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "pipeline_table")
    p.add_argument("--overwrite", action="store_true",
                   help="replace pipeline_table.md/.csv of an earlier run in --out (its ledger is only appended to)")
    args = p.parse_args(argv)
    there = [str(args.out / n) for n in ("pipeline_table.md", "pipeline_table.csv") if (args.out / n).exists()]
    if there and not args.overwrite:
        p.error(f"{' and '.join(there)} already exist(s) from an earlier run: pass --overwrite to replace "
                f"them (the rows in pipeline_table.jsonl are kept either way), or another --out")

    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    args.out.mkdir(parents=True, exist_ok=True)
    clip = args.input
    if clip is None:
        clip = args.out / f"clip_{args.seconds:g}s.mp4"
        if not clip.exists():
            subprocess.run([sys.executable, str(ROOT / "source_code" / "make_video.py"), "--out", str(clip),
                            "--seconds", str(args.seconds), "--seed", "11"], check=True)
    frames = args.frames or int(round(args.seconds * 30))
    all_flags = single_changes(args.batch_size, args.streams, device,
                      tuple(int(v) for v in args.all_streams.split(",") if v.strip()))
    names = list(all_flags) if not args.configs else [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [n for n in names if n not in all_flags]
    if unknown:
        p.error(f"unknown configuration(s) {unknown}; known: {', '.join(all_flags)}")
    ledger = Ledger(args.out / "pipeline_table.jsonl")
    # One untimed decode-only pass first, so the first measured configuration does not pay for
    # cold caches (the clip and OpenCV's codec libraries in the page cache); on the H100 the
    # first decode-only rows had the widest spreads.
    subprocess.run(command(options(clip, frames, device, {"decode_only": True}, args.out)), capture_output=True,
                   timeout=args.timeout)
    results: dict[str, object] = {}
    for name in names:
        opts = options(clip, frames, device, all_flags[name], args.out)
        key = name.startswith(("baseline", "decode_only", "all_"))
        repeats = args.repeats if key or args.repeats_single is None else args.repeats_single
        try:
            r = bench.run(command(opts), step=name, repeats=repeats, warmup=args.warmup, ledger=ledger, config=opts,
                          results_dir=args.out / "results", timeout=args.timeout, progress=False)
        except LabkitError as e:
            results[name] = f"failed: {str(e).splitlines()[0]}"
            print(f"{name}: {results[name]}", flush=True)
            continue
        results[name] = r
        print(r, flush=True)
    df = table(results, {n: all_flags[n] for n in names})
    rows = ledger.rows()
    machine = machine_label(rows[-1]["env"]) if rows else "unknown machine"
    given = " ".join(sys.argv[1:] if argv is None else argv)
    header = (f"Pipeline configurations on {machine}: {frames} frames per stream of `{clip.name}` "
              f"(1280x720 unless --input says otherwise), {args.warmup} warm-up frames; `fps` is the median of "
              f"`runs` runs, `spread` their (max - min) / median. Command: `python benchmarks/pipeline_table.py "
              f"{given}`. `of_decode_only`: frames/s over the decode-only frames/s of the same sources and "
              f"decoder threads, measured in the same run.")
    text = markdown(df, header)
    (args.out / "pipeline_table.md").write_text(text)
    df.to_csv(args.out / "pipeline_table.csv", index=False)
    print(text)
    return 0 if all(not isinstance(r, str) for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
