"""The application as the lab runs it: its options as a dict, its argv built in one place, and
what this machine can run.

Locations go to the application as flags (``--output`` for the drawn video, ``--cache-dir`` for
converted models; ``labkit.bench`` adds ``--results``), so a run writes under ``REPORTS`` whatever the working directory. The lab sets
no environment variable for the application.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

from labbook.settings import APP, MODE, VIDEOS, gpu_available, settings
from labkit.errors import check_writable
from labkit.env import cache_dir


def app_options(flags: dict, *, video: Path | None = None, mode: str = MODE) -> dict:
    """Every option of a lab run of ``detect_video.py``: the mode's input, frames, warm-up and
    network size, the output video's location, then ``flags`` (snake case; they win). Record mode
    sizes each step's frames by what its queues hold (``labbook.record_plan.frames_for``)."""
    from labbook.record_plan import frames_for
    from labbook.video import sample_video

    s = settings(mode)
    video = Path(video or sample_video(mode))
    opts: dict = {"inputs": [str(video)], "frames": frames_for(flags, mode), "warmup": s.warmup,
                  "cache_dir": str(cache_dir() / "backends")}
    if s.input_hw:
        opts["input_hw"] = s.input_hw
    if flags.get("osd", True) is not False:  # drawing on: the video is written, under REPORTS
        check_writable(VIDEOS, what="write the output video into")  # the lab's folder: make reset removes it
        opts["output"] = str(VIDEOS / f"{video.stem}.tracked.mp4")
    return {**opts, **flags}


def app_argv(options: dict) -> list[str]:
    """The argv of ``detect_video.py`` with ``options``: the one place the lab turns flags into
    a command line (``queues=True`` -> ``--queues``, ``osd=False`` -> ``--no-osd``)."""
    from source_code.options import to_argv

    return [sys.executable, str(APP), *to_argv(options)]


def app_command(*, video: Path | None = None, mode: str = MODE, **flags) -> list[str]:
    """The application's argv for this mode with ``flags`` set (see :func:`app_options`), e.g.
    to paste into a terminal or to profile by hand with ``labkit.profile``."""
    return app_argv(app_options(flags, video=video, mode=mode))


@functools.lru_cache(maxsize=1)
def _backends() -> tuple:
    from source_code.backends import available_backends

    return tuple(available_backends())


def backends():
    """What this machine can run: backend, precision, device, variant, available, reason. Replaying a
    recording (``REPLAY``): what the recording machine could, as its rows say
    (:func:`labbook.recording.recorded_backends`), as every other platform fact of a replay."""
    import pandas as pd

    from labbook.settings import REPLAY
    from labkit.style import full_text

    rows = list(_backends())
    if REPLAY is not None:
        from labbook.recording import recorded_backends

        rows = recorded_backends(REPLAY, rows)
    return full_text(pd.DataFrame(rows))


def device_of(flags: dict) -> str:
    """The device a run with these flags uses (``auto`` resolved as the application does)."""
    dev = flags.get("device", "auto")
    return ("cuda" if gpu_available() else "cpu") if dev == "auto" else dev


def device_kind(flags: dict) -> str:
    """``cuda`` or ``cpu``: the kind of the run's device (``cuda:1`` is a CUDA device)."""
    return device_of(flags).split(":")[0]


def unavailable(**flags) -> str:
    """Why a run with these flags cannot run here ('' when it can)."""
    device = device_kind(flags)
    if device == "cuda" and not gpu_available():
        return "it needs a CUDA GPU and this machine has none"
    if flags.get("gpu_preprocess") and device != "cuda":
        return "--gpu-preprocess needs a CUDA GPU"
    backend, precision = flags.get("backend", "torch"), flags.get("precision", "fp32")
    variants = [v for v in ("channels_last", "cuda_graphs", "compile") if flags.get(v)] or [""]
    rows = {(r["backend"], r["precision"], r["device"], r["variant"]): r for r in _backends()}
    for variant in variants:
        row = rows.get((backend, precision, device, variant))
        if row is None:
            return f"{backend} {precision} {variant} is not offered on {device}".replace("  ", " ")
        if not row["available"]:
            return row["reason"]
    return ""


def capture_range(flags: dict) -> str | None:
    """What nsys records of a step's profiled run: TensorRT steps from the application's
    cudaProfilerStart (its first frame) on, so that the engine build, with its thousands of
    tactic-timing kernels, stays out of the kernel tables (TensorRT's guide advises this);
    every other step the whole run, so that set-up such as ``torch_compile`` shows in it."""
    if flags.get("backend") == "tensorrt" and device_kind(flags) == "cuda":
        return "cudaProfilerApi"
    return None
