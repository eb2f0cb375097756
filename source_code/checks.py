"""Checks done once, before any work: the request (option ranges, inputs), every path the run
will write (never an input or a ground truth; never a file this program did not write unless
``--overwrite``; its folder creatable and writable; the model cache where models are converted),
free disk, and the device.

How the application recognises its own files: a results JSON carries the schema marker of
``labkit.annotate`` (``"schema": "labkit-results"``); an output video has a sidecar
``.<name>.detect_video.json`` beside it holding the size and mtime the app left it with, so a
video replaced since (by the user, or by another program) is not taken for ours.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from labkit import annotate
from source_code.errors import EXIT_UNAVAILABLE, EXIT_USAGE, PipelineError
from source_code.options import BY_NAME, check_ranges

VIDEO_SUFFIXES = (".mp4", ".mov", ".m4v", ".avi")
_URL_SCHEMES = ("http://", "https://", "rtsp://", "rtmp://", "ftp://", "udp://", "tcp://", "file://")


def validate(cfg: Any) -> None:
    """Reject a bad request: option ranges, inputs (URL, missing, not a file, unreadable)."""
    if not cfg.inputs:
        raise PipelineError("no --input given", EXIT_USAGE)
    bad = check_ranges(cfg)
    if bad:
        raise PipelineError(bad, EXIT_USAGE)
    if cfg.input_hw is not None and (cfg.input_hw[0] % 32 or cfg.input_hw[1] % 32 or min(cfg.input_hw) < 32):
        raise PipelineError(f"--input-hw {cfg.input_hw[0]} {cfg.input_hw[1]}: both must be multiples of 32", EXIT_USAGE)
    if len(cfg.inputs) > 1 and len(cfg.inputs) != cfg.streams:
        raise PipelineError(f"{len(cfg.inputs)} inputs but --streams {cfg.streams}: give one input (copied to every "
                            "stream) or one per stream", EXIT_USAGE)
    for p in cfg.inputs:
        try:  # OpenCV takes the name as UTF-8 text: a name in another encoding crashed it (SIGSEGV)
            str(p).encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(str(p)).decode("ascii", "backslashreplace")
            raise PipelineError(f"--input {shown}: its file name is not valid UTF-8, which OpenCV cannot open: rename "
                                "the file (e.g. convmv -f latin1 -t utf8 --notest) or link it under a UTF-8 name",
                                EXIT_USAGE) from None
        if str(p).lower().startswith(_URL_SCHEMES):
            raise PipelineError(f"--input {p}: URLs are not supported: download the video first", EXIT_USAGE)
        if not Path(p).exists():
            raise PipelineError(f"input not found: {p}", EXIT_USAGE)
        if not Path(p).is_file():
            raise PipelineError(f"input is not a file: {p}", EXIT_USAGE)
        if not os.access(p, os.R_OK):
            raise PipelineError(f"input {p} is not readable: check its permissions (chmod +r)", EXIT_USAGE)


def output_video(cfg: Any) -> Path | None:
    """Where stream 0's video goes: ``--output``, else beside ``--results`` (same stem, .mp4)
    when drawing, else nowhere. Explicit, so a run writes only where it was told to."""
    if cfg.output:
        return Path(cfg.output)
    if cfg.results and cfg.osd and not cfg.decode_only:
        return Path(cfg.results).with_suffix(".mp4")
    return None


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _sidecar(video: Path) -> Path:
    return video.with_name(f".{video.name}.detect_video.json")


def _write_sidecar(video: Path, record: dict) -> None:
    side = _sidecar(video)
    tmp = side.with_name(f"{side.name}.{os.getpid()}.tmp")
    try:  # whole or not at all: a full disk never leaves an empty sidecar
        tmp.write_text(json.dumps(record))
        os.replace(tmp, side)
    except OSError:
        tmp.unlink(missing_ok=True)


def claim_output(video: Path) -> None:
    """Note, before writing starts, that this program is writing ``video``: a run stopped half-way
    (a full disk, a kill) leaves a partial video the next run may replace, not one it must refuse."""
    _write_sidecar(video, {"writing": True})


def record_output(video: Path) -> None:
    """Note that this program wrote ``video`` (see the module docstring)."""
    try:
        st = video.stat()
    except OSError:
        return  # without the record, the next run asks for --overwrite: nothing is lost
    _write_sidecar(video, {"size": st.st_size, "mtime_ns": st.st_mtime_ns})


def _ours(path: Path, *, video: bool) -> bool:
    if not video:
        return annotate.is_results_file(path)
    try:
        rec = json.loads(_sidecar(path).read_text())
        if rec.get("writing"):  # a run of ours stopped while writing it
            return True
        st = path.stat()
        return rec.get("size") == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns
    except (OSError, ValueError, AttributeError):
        return False


def _folder_problem(folder: Path) -> str | None:
    """Why files cannot be written in ``folder`` (created if missing), or None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def target_problem(cfg: Any, path: Path, flag: str) -> str | None:
    """Why the run must not write ``path`` (given as ``flag``), as a one-line message, or None."""
    from source_code.scenes import gt_path_for

    video = flag == "--output"
    for p in cfg.inputs:
        if _same(path, Path(p)):
            return f"{flag} {path} is an input video: refusing to overwrite it; choose another path"
        if _same(path, gt_path_for(p)) or path.name.endswith(".gt.csv"):
            return f"{flag} {path} is ground truth: refusing to overwrite it; choose another path"
    if video and path.suffix.lower() not in VIDEO_SUFFIXES:
        return f"{flag} {path}: use a .mp4 or .avi path"
    if path.is_dir():
        return f"{flag} {path} is a folder: give a file path"
    if path.exists() and not cfg.overwrite and not _ours(path, video=video):
        return (f"{flag} {path} exists and was not written by detect_video: pass --overwrite to replace it, "
                "or choose another path")
    problem = _folder_problem(path.parent if str(path.parent) else Path("."))
    if problem:
        return f"{flag} {path}: cannot write in {path.parent} ({problem}): choose a writable folder"
    return None


CONVERTING_BACKENDS = ("onnxruntime", "tensorrt")
"""Backends whose models are converted (ONNX, INT8, engines) into the cache before the first frame;
the others only cache what they can (the FLOPs count, scores) and go on without it."""


def cache_folder(cfg: Any) -> Path:
    """The run's cache of converted models, FLOPs counts and scores: ``--cache-dir``, else the default."""
    from source_code.backends.artifacts import default_cache_dir

    return Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()


def _owner(folder: Path) -> str:
    """", owned by NAME" where the folder (or the nearest one that exists above it) is another user's."""
    import pwd

    here = folder
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        uid = here.stat().st_uid
        return "" if uid == os.geteuid() else f", {here} owned by {pwd.getpwuid(uid).pw_name}"
    except (OSError, KeyError):
        return ""


def check_cache(cfg: Any) -> None:
    """A backend that converts its model can write it into the cache: a folder another user owns, or
    a read-only disk, is said now, with the fix, not when the first model is written."""
    if cfg.backend not in CONVERTING_BACKENDS:
        return
    cache = cache_folder(cfg)
    problem = _folder_problem(cache)
    if problem:
        raise PipelineError(f"--cache-dir {cache}: cannot write the converted models there ({problem}{_owner(cache)}): "
                            f"pass --cache-dir with a folder of your own", EXIT_USAGE)


def check_targets(cfg: Any) -> None:
    """Every path the run writes (results, output video, the model cache where models are converted)
    may be written; raises PipelineError."""
    targets = [(Path(cfg.results), BY_NAME["results"].flag)] if cfg.results else []
    out = output_video(cfg)
    if out is not None:
        targets.append((out, BY_NAME["output"].flag))
    for path, flag in targets:
        problem = target_problem(cfg, path, flag)
        if problem:
            raise PipelineError(problem, EXIT_USAGE)
    check_cache(cfg)
    if out is not None:
        claim_output(out)


def results_writable(cfg: Any) -> bool:
    """Whether a failed run may leave its results document at ``--results``."""
    return bool(cfg.results) and target_problem(cfg, Path(cfg.results), "--results") is None


def check_video_target(video: Path | None, *, frames: int, width: int, height: int) -> None:
    """The output video can hold these frames: a size its encoder accepts (mp4v refuses frames
    under 2x2) and enough free disk (an estimate: mp4v about 1/20 of raw BGR, MJPG about 1/8,
    plus the results). Raises PipelineError naming the path and the fix."""
    if video is None:
        return
    avi = video.suffix.lower() == ".avi"
    if min(width, height) < 2 and not avi:
        raise PipelineError(f"--output {video}: the mp4 encoder cannot write {width}x{height} frames; use an .avi "
                            "--output, or --no-osd without --output", EXIT_USAGE)
    need = frames * width * height * 3 // (8 if avi else 20) + (1 << 20)
    folder = video.parent if str(video.parent) else Path(".")
    free = shutil.disk_usage(folder).free
    if free < need:
        raise PipelineError(f"not enough free disk in {folder} for the output video: about {need / 1e6:.0f} MB needed, "
                            f"{free / 1e6:.0f} MB free; free some space, pass --frames, or --no-osd without --output",
                            EXIT_USAGE)


def resolve_device(requested: str):
    """The torch device of ``--device`` (auto, cpu, cuda, cuda:N); raises PipelineError."""
    import torch

    req = (requested or "auto").lower()
    if req == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if req.startswith("cuda"):
        if not torch.cuda.is_available():
            raise PipelineError(f"--device {requested}: no CUDA GPU is visible to torch {torch.__version__}; "
                                "use --device cpu (or auto)", EXIT_UNAVAILABLE)
        dev = torch.device(req)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise PipelineError(f"--device {requested}: this machine has {torch.cuda.device_count()} CUDA GPU(s) "
                                f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})", EXIT_UNAVAILABLE)
        return dev
    if req == "cpu":
        return torch.device("cpu")
    raise PipelineError(f"unknown --device {requested!r}: choose cpu, cuda, cuda:N or auto", EXIT_USAGE)
