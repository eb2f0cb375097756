"""Latency against throughput in notebook 03: Little's law on the ledger's figures, the frames the
queued pipeline can hold ahead of ``infer``, and a clip paced like a camera (``--realtime``).

Little's law: frames in flight = throughput x latency. With a file as input the decoders read
as fast as the queues take frames, so the queues ahead of the slowest stage fill and a frame's
latency is the backlog ahead of it. Paced at a camera's rate slower than the pipeline, the
queues stay empty and a frame waits for the rest of its batch to arrive (batch fill).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from labbook.reference import ledger
from labbook.settings import MODE, REPLAY, settings
from labbook.text import say


def queue_size_default() -> int:
    """``--queue-size``'s default, from the application's option table (its one home)."""
    from source_code.options import BY_NAME

    return int(BY_NAME["queue_size"].default)


def frames_held(batch: int, queue_size: int | None = None, streams: int = 1) -> int:
    """Frames the queued pipeline (``--queues``) holds up to and including ``infer`` when
    ``infer`` is the slowest stage (``source_code.runner.run_queued``, ``sources.Muxer``): per
    stream a decoder queue of max(2, queue_size x batch) frames plus the frame its blocked
    decoder holds; the muxer's and ``preprocess``'s batch in hand; the two queues of
    ``queue_size`` batches before ``preprocess`` and ``infer``; and the batch in ``infer``."""
    q = queue_size_default() if queue_size is None else int(queue_size)
    return streams * (max(2, q * batch) + 1) + 2 * q * batch + 3 * batch


def _int(x, default: int) -> int:
    return int(x) if isinstance(x, (int, float)) and x == x else default


def littles_law(steps) -> pd.DataFrame:
    """Little's law for ledger steps (latest row each): throughput, p50 latency, the frames in
    flight they imply, and what the queues can hold.

    Returns: step, batch_size, queue_size, realtime (bool), fps (frames/s), latency_p50_ms (ms),
        in_flight (frames, fps x p50 latency), frames_held (frames the queued pipeline holds up
        to infer; NaN without --queues), frames (frames each run reads).
    """
    rows = []
    for r in ledger(steps).to_dict("records"):
        b, q = _int(r.get("config.batch_size"), 1), _int(r.get("config.queue_size"), queue_size_default())
        s = _int(r.get("config.streams"), 1)
        held = frames_held(b, q, s) if r.get("config.queues") is True else math.nan
        rows.append({"step": r["step"], "batch_size": b, "queue_size": q, "realtime": r.get("config.realtime") is True,
                     "fps": r.get("fps"), "latency_p50_ms": r.get("latency_p50_ms"),
                     "in_flight": r.get("fps") * r.get("latency_p50_ms") / 1e3, "frames_held": held,
                     "frames": s * _int(r.get("config.frames"), 0)})
    return pd.DataFrame(rows)


def camera_clip(fps: float, mode: str = MODE, *, folder: Path | None = None) -> Path:
    """The sample scene rendered at ``fps`` frames/s (a camera's rate), long enough for a run of
    the mode's frames; written once (in ``folder``, else where :func:`labbook.video.clip_path` keeps
    the lab's clips), then reused. Replaying a recording (``labbook.replay``) it is only named: nothing runs on it."""
    from source_code.scenes import SceneConfig, gt_path_for, make_video

    from labbook.video import clip_path

    s = settings(mode)
    w, h = s.video_size
    video = clip_path(f"camera_{mode}_{fps:g}fps.mp4", folder)
    if REPLAY is None and not (video.exists() and gt_path_for(video).exists()):  # a replay reads no clip
        make_video(video, seconds=(s.frames + 1) / fps, config=SceneConfig(seed=s.seed, width=w, height=h, fps=fps))
    return video


def lesson(file_step: str, paced_step: str, camera_fps: float):
    """The latency lesson from two measured steps, one reading a file, one paced at
    ``camera_fps``: Little's law for each and what sets its latency, as computed sentences."""
    t = littles_law([file_step, paced_step]).set_index("step")
    f, p = t.loc[file_step], t.loc[paced_step]
    cap = min(f["frames_held"], f["frames"]) if f["frames"] else f["frames_held"]
    fill_ms = (p["batch_size"] - 1) / 2 / camera_fps * 1e3  # the middle frame of a batch waits for half of it
    held = (f"the queues hold up to {f['frames_held']:.0f} frames up to `infer` (queue size {f['queue_size']}, "
            f"batch {f['batch_size']}) and a run reads {f['frames']}, so at most {cap:.0f} can be waiting")
    rest = p["latency_p50_ms"] - fill_ms
    rest = (f"the rest, {rest:.0f} ms, is processing" if rest > 0 else
            "batch fill alone accounts for it (the median frame's batch was processed as soon as it filled)")
    backlog = f["in_flight"] >= 2 * f["batch_size"]  # more than two batches waiting: a queue formed
    file_says = ("The latency is backlog: a new frame waits behind those frames, while its own batch fills as fast "
                 "as the decoder reads." if backlog else
                 "Fewer than two batches were waiting: no backlog formed, so the source did not outpace the pipeline.")
    kept_up = p["in_flight"] < 2 * p["batch_size"]
    paced_says = (f"No backlog: latency is batch fill plus processing, and each extra frame in a batch adds half a "
                  f"camera interval ({500 / camera_fps:.0f} ms) to the median frame's wait." if kept_up else
                  "More than two batches were waiting: the pipeline did not keep up with the camera, and a backlog "
                  "formed here too (choose a slower camera rate).")
    return say(
        f"**File input** (`{file_step}`): {f['fps']:.1f} frames/s x {f['latency_p50_ms']:.0f} ms = "
        f"**{f['in_flight']:.0f} frames in flight**, {f['in_flight'] / cap:.0%} of the {cap:.0f} that can be "
        f"waiting ({held}). {file_says}\n\n"
        f"**Paced at {camera_fps:g} frames/s** (`{paced_step}`, `--realtime`): {p['fps']:.1f} frames/s x "
        f"{p['latency_p50_ms']:.0f} ms = **{p['in_flight']:.1f} frames in flight**, against the {p['frames_held']:.0f} "
        f"the queues could hold. The median frame waits (batch - 1) / 2 = {(p['batch_size'] - 1) / 2:g} camera "
        f"intervals, {fill_ms:.0f} ms, for its batch to fill; {rest}. {paced_says}")
