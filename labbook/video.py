"""The lab's sample video: made once with the scene generator, its frames and ground truth."""
from __future__ import annotations

import os
from pathlib import Path

from labkit.env import cache_dir
from labkit.errors import check_writable

from labbook.settings import DATA, MODE, REPLAY, settings


def clip_path(name: str, folder: Path | None = None) -> Path:
    """Where the lab's clip ``name`` lies: in ``folder`` when given; else in the checkout's ``data/``
    (:data:`labbook.settings.DATA`) where it is there already or can be written, and otherwise (a
    read-only checkout, e.g. a shared course folder) in labkit's per-user cache, ``data/`` under
    :func:`labkit.env.cache_dir`. Clips are made from a seed, so either place gives the same clip."""
    if folder is not None:
        return Path(folder) / name
    data = Path(DATA)
    here = data if data.exists() else data.parent
    if (data / name).exists() or os.access(here, os.W_OK | os.X_OK):
        return data / name
    return cache_dir() / "data" / name


REPLAY_SECONDS = 31.0
"""The longest clip a replay makes (the CPU modes' length): a replay runs nothing, so its notebooks only
show the clip and read a few frames; the first seconds of the recording's clip, as its generator draws
them from the same seed, do that (the H200's 222 s clip took 166 s to make on the 2-core VM)."""


def _seconds(mode: str) -> float:
    s = settings(mode)
    return s.video_seconds if REPLAY is None else min(s.video_seconds, REPLAY_SECONDS)


def sample_path(mode: str = MODE, *, folder: Path | None = None) -> Path:
    """Where the sample clip of ``mode`` lies (:func:`clip_path`): named by what makes the clip (size,
    length, seed), so a clip written for other settings (an older, shorter one) is never taken for it.
    In a replay, the first :data:`REPLAY_SECONDS` of it at most (its name says its length)."""
    s = settings(mode)
    w, h = s.video_size
    return clip_path(f"sample-{w}x{h}-{_seconds(mode):g}s-seed{s.seed}.mp4", folder)


def sample_video(mode: str = MODE, *, folder: Path | None = None) -> Path:
    """The lab's sample clip (written on first use with the scene generator, then reused).

    Returns the ``.mp4`` (:func:`sample_path`); its ground truth ``<stem>.gt.csv`` lies beside it.
    """
    from source_code.scenes import SceneConfig, gt_path_for, make_video

    s = settings(mode)
    w, h = s.video_size
    video = sample_path(mode, folder=folder)
    if video.exists() and gt_path_for(video).exists():
        return video
    check_writable(video.parent, what="write the sample video into")  # a folder it creates is the lab's (make reset)
    make_video(video, seconds=_seconds(mode), config=SceneConfig(seed=s.seed, width=w, height=h))
    return video


def video_info(video: Path) -> dict:
    """Frame count, frames per second and size of a video, as OpenCV reads them."""
    import cv2

    cap = cv2.VideoCapture(str(video))
    try:
        return {"frames": int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), "fps": float(cap.get(cv2.CAP_PROP_FPS)),
                "width": int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), "height": int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))}
    finally:
        cap.release()


def ground_truth(video: Path) -> dict:
    """``{frame: array (K, 6) [x1, y1, x2, y2, class_id, track_id]}`` of a generated clip."""
    from source_code.scenes import gt_path_for, read_gt

    return read_gt(gt_path_for(video))


def show_frame(video: Path, index: int = 0):
    """One frame of ``video`` with its ground-truth boxes drawn (a matplotlib Figure)."""
    import cv2
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from source_code.scenes import CLASS_NAMES

    cap = cv2.VideoCapture(str(video))
    cap.set(cv2.CAP_PROP_POS_FRAMES, index)
    ok, frame = cap.read()
    cap.release()
    if not ok:
        raise ValueError(f"{video} has no frame {index}")
    fig = Figure(figsize=(9, 9 * frame.shape[0] / frame.shape[1]), layout="constrained")
    ax = fig.subplots()
    ax.imshow(frame[:, :, ::-1])
    colors = ("tab:orange", "tab:cyan")
    for x1, y1, x2, y2, cls, tid in ground_truth(video).get(index, []):
        ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, lw=1.5, color=colors[int(cls) % 2]))
        ax.text(x1, y1 - 2, f"{int(tid)} {CLASS_NAMES[int(cls)]}", color=colors[int(cls) % 2], fontsize=7)
    ax.set_axis_off()
    ax.set_title(f"{Path(video).name}, frame {index}: ground truth", fontsize=9)
    return fig
