"""Detect and track vehicles and pedestrians in a video; write the annotated video and a results JSON.

Example: ``python source_code/detect_video.py --input clip.mp4 --results reports/clip.json``
Under torchrun (``python -m torch.distributed.run --nproc-per-node 2 source_code/detect_video.py
--input clip.mp4 --streams 2 ...``) each rank runs its share of the sources and rank 0 writes one
results file (source_code/distributed.py). Options are declared in source_code/options.py; stage names, the output video's default place
and the results format are documented in source_code/README.md.
Exit codes: 0 done (status "ok" or "partial"), 1 bad or unreadable input / failure,
2 bad arguments or a refused path (an input, ground truth, or a file this program did not write
without --overwrite; an unwritable folder; too little disk), 3 requested backend/device/weights
unavailable, 4 out of memory. 130 interrupted. Every failure is one line on stderr.
"""
from __future__ import annotations

import errno
import os
import sys

# OpenMP's default active wait makes torch's CPU threads spin between operators; with the
# pipeline's own threads (decoders, queued stages) on a few cores, the spinning starves them and
# a CPU forward pass at 192x320 measured ~2000 ms instead of ~55 ms on a busy 2-core machine.
# Passive waiting removes that artifact; set OMP_WAIT_POLICY=ACTIVE yourself to see it. This is
# the one place it is set, before torch loads (nothing above imports it).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from source_code.options import PROG, build_parser, config_from_args  # noqa: E402


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def _summary(doc: dict, results: str | None) -> str:
    acc = doc["accuracy"]
    fps = "n/a" if doc["fps"] is None else f"{doc['fps']:.2f}"
    return (f"{doc['status']}: {doc['frames']} frames, {fps} fps, mAP@0.5 {_fmt(acc['map50'])}, "
            f"MOTA {_fmt(acc['mota'])}, IDF1 {_fmt(acc['idf1'])}, HOTA {_fmt(acc['hota'])}"
            + (f", video {doc['config']['output']}" if doc['config']['output'] else "")
            + (f", results {results}" if results else ""))


def main(argv: list[str] | None = None) -> int:
    cfg = config_from_args(build_parser(__doc__.splitlines()[0]).parse_args(argv))
    from labkit.annotate import write_results
    from source_code import checks, distributed
    from source_code.errors import PipelineError, first_line
    from source_code.pipeline import run_pipeline

    world = distributed.World.from_env()  # under torchrun: this rank; rank 0 alone writes the results

    def record(message: str) -> None:
        if world.rank == 0 and checks.results_writable(cfg):  # never over a file that is not ours, nor an input
            try:
                write_results(cfg.results, {"status": "failed", "error": message,
                                             "config": dict(vars(cfg))})
            except OSError:
                pass  # the one line fail() prints already says what went wrong

    def fail(message: str, code: int) -> int:
        sys.stderr.write(f"{PROG}: error: {message}\n")  # one write: ranks that fail alike print whole lines
        record(message)
        return code

    try:
        if cfg.threads:
            import torch
            torch.set_num_threads(cfg.threads)
        # under torchrun rank 0 records a failure before any rank leaves (torchrun then stops them all)
        doc = distributed.run(cfg, world, run_pipeline, record) if world.size > 1 else run_pipeline(cfg)
        if doc is None:  # a rank other than 0: rank 0 reports the run
            return 0
        if cfg.results:
            write_results(cfg.results, doc)
    except PipelineError as e:
        return fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # e.g. the disk filled up while writing
        from source_code.checks import cache_folder

        in_cache = str(e.filename or "").startswith(str(cache_folder(cfg)))
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)  # else a permission or a read-only disk: space is no fix
        where = {(True, True): "free space there or pass another --cache-dir",
                 (True, False): "pass --cache-dir with a folder you can write to",
                 (False, True): "free space or choose another folder",
                 (False, False): "choose a folder you can write to"}[in_cache, full]
        return fail(f"{first_line(e)}{f' ({e.filename})' if e.filename else ''}: {where}", 1)
    except Exception as e:  # noqa: BLE001 - never a traceback for the user
        if os.environ.get("LABKIT_DEBUG"):
            raise
        return fail(f"{first_line(e)} (set LABKIT_DEBUG=1 for the traceback)", 1)
    for w in doc["warnings"]:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    print(_summary(doc, cfg.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
