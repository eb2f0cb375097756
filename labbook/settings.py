"""Run modes, their settings, and the lab's locations (every path absolute, so the working
directory does not matter: the notebooks run with ``notebooks/`` as theirs).

``LABKIT_MODE`` (``small`` or ``full``, default ``full``) picks the settings; ``LABKIT_REPORTS``
(default ``<project>/reports``) is where profiles, results, videos and the ledger go.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path

from labkit.env import reports_dir
from source_code.stages import STAGES  # noqa: F401  (the app's stage names, one home)

REPLAY = Path(os.environ["LABKIT_REPLAY"]).resolve() if os.environ.get("LABKIT_REPLAY", "").strip() else None
"""A recorded lab the notebooks replay instead of running steps (``labbook.replay``;
``scripts/run_lab.py --replay``), or None."""

MODES = ("small", "full", "record")  # record: scripts/record_reference.py's GPU reference (full-gpu, fewer sweeps)
MODE = os.environ.get("LABKIT_MODE", "full").strip().lower() or "full"
if MODE not in MODES:
    raise ValueError(f"LABKIT_MODE={MODE!r}: use 'small' (a few minutes) or 'full'")

ROOT = Path(__file__).resolve().parents[1]
REPORTS = reports_dir(ROOT / "reports").resolve()
LEDGER = REPORTS / "ledger.jsonl"
PROFILES = REPORTS / "profiles"
RESULTS = REPORTS / "results"
VIDEOS = REPORTS / "videos"
REFERENCE = ROOT / "reports" / "reference" / "h100"
APP = ROOT / "source_code" / "detect_video.py"
DATA = ROOT / "data"
"""The lab's generated clips, where the checkout can be written (else labkit's per-user cache:
``labbook.video.clip_path``)."""


@dataclass(frozen=True)
class Settings:
    """How big each run is in one mode; the notebooks read these, never literal numbers."""

    video_seconds: float
    video_size: tuple[int, int]  # width, height
    seed: int  # scene seed of the sample video (held out from training and calibration)
    frames: int  # frames processed per run (per stream); small mode: the most a step runs (labbook.record_plan.frames_for)
    warmup: int  # frames left out of the timing at the start of each run
    repeats: int  # measured runs per step (the profiled run comes on top)
    input_hw: str | None  # network input size; None: the detector's default
    batch_sizes: tuple[int, ...]  # batch sizes swept besides 1 (the step before) and `batch`
    batch: int  # batch size profiled, and the one the later steps build on
    streams: tuple[int, ...]  # stream counts swept besides 1
    intervals: tuple[int, ...]  # detector intervals swept besides 1 and `interval`: on until MOTA drops (06)
    interval: int  # detector interval profiled in notebook 06


SETTINGS = {
    # every mode is long enough to measure throughput (Little's law) with room to spare: the frames its
    # most queued step holds up to the detector (source_code.runner.frames_held: batch 4 with the default
    # queue size holds 61 frames, 78 with 2 streams), plus the batch each stage past the detector has in
    # hand, are at most 10 % of its timed frames (tests/test_modes.py). 700 frames left 2 % to spare, and
    # a CI run on the loaded 2-core VM carried 69 frames into one rank's window and was flagged.
    # small: a rehearsal CI can afford (one run per step: its spread is over the run's batches; each step
    # runs the frames its queues need, 600 to 811 on a CPU box, at most these 900)
    "small": Settings(video_seconds=31.0, video_size=(640, 360), seed=11, frames=900, warmup=8, repeats=1,
                      input_hw="192x320", batch_sizes=(2,), batch=4, streams=(2,), intervals=(2, 8, 16), interval=4),
    # full-cpu: one measured run per step (its interval over the run's batches, as small and record mode): the
    # profiled run plus three repeats made the full CPU lab 3,116 s with 03 at 1,058 s; the timing plan is 30
    # minutes of runs and no cell over 5 (notebooks/README.md)
    "full-cpu": Settings(video_seconds=31.0, video_size=(1280, 720), seed=11, frames=900, warmup=16, repeats=1,
                         input_hw=None, batch_sizes=(2,), batch=4, streams=(2,), intervals=(2, 5, 10, 20, 30), interval=3),
    # batch 32: the batch of the H100 configuration that reached 21.5x (benchmarks/pipeline_table.py); it holds
    # 481 frames up to the detector and 96 past it, so a run times 5,900 (the full GPU lab has not been timed
    # end to end: see reports/reference/README.md)
    "full-gpu": Settings(video_seconds=222.0, video_size=(1280, 720), seed=11, frames=6600, warmup=64, repeats=2,
                         input_hw=None, batch_sizes=(4, 8, 16), batch=32, streams=(2, 4), intervals=(2, 5, 10, 20, 30), interval=3),
}
"""Each mode's settings. Small mode is a rehearsal: its tables say so (``REHEARSAL``)."""
# The H100 reference in budgeted device calls (scripts/record_reference.py): full-gpu's clip and batch, one value
# per sweep, one measured run per step (its interval over the run's batches); frames sized per step
# (labbook.record_plan.frames_for).
SETTINGS["record"] = replace(SETTINGS["full-gpu"], batch_sizes=(8,), streams=(4,), repeats=1)


REHEARSAL = {"small": "small mode: a rehearsal (short runs, one each), not a measurement to quote"}
"""What a table of each mode must say about it (none for the full modes)."""


def mode_note(mode: str = MODE) -> str | None:
    """The line a table of ``mode`` carries (small mode: a rehearsal), or None."""
    return REHEARSAL.get(mode)


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when torch can use a CUDA GPU here (replaying: when the recording machine had one)."""
    if REPLAY is not None:
        from labbook.recording import recorded_gpu

        return recorded_gpu(REPLAY) is not None
    import torch

    return bool(torch.cuda.is_available())


def gpu_count() -> int:
    """CUDA GPUs torch sees here (replaying: the recording machine's ``gpu_count``)."""
    if REPLAY is not None:
        from labbook.recording import recorded_env

        return int(recorded_env(REPLAY).get("gpu_count") or 0)
    import torch

    return int(torch.cuda.device_count())


def settings(mode: str = MODE, gpu: bool | None = None) -> Settings:
    """The settings of ``mode`` (``small`` is the same everywhere; ``full`` depends on the GPU)."""
    if mode in ("small", "record"):
        return SETTINGS[mode]
    return SETTINGS["full-gpu" if (gpu_available() if gpu is None else gpu) else "full-cpu"]


def strict() -> bool:
    """``LABKIT_STRICT`` is set (the tests): a failing run raises instead of becoming a failed step."""
    return os.environ.get("LABKIT_STRICT", "") not in ("", "0")
