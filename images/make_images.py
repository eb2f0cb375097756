"""Draw the lab's figures (PNG, committed beside this script).

    python images/make_images.py

- ``pipeline.png``: the application's stages, what each does and where it runs.
- ``sync_vs_queued.png``: the same stages run one after another on one thread, and run by one
  thread each joined by queues (a schematic: box widths are illustrative, not measured).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from labkit.style import stage_color  # noqa: E402

HERE = Path(__file__).resolve().parent
# Colours from labkit.style: the same stage has the same colour here, in the timeline and in
# the stage bars. The boxes are pale tints of it, so black text stays readable.
STAGES = [
    ("decode", "read a frame\n(OpenCV, CPU)"),
    ("preprocess", "resize, RGB, /255\n(CPU, or GPU with\n--gpu-preprocess)"),
    ("infer", "detector network\n(torch / ONNX Runtime\n/ TensorRT)"),
    ("postprocess", "heat-map peaks\n-> boxes"),
    ("track", "SORT-like tracker\n(Kalman + matching)"),
    ("display", "draw boxes (OSD),\nwrite the video"),
]
STAGES = [(name, what, stage_color(name)) for name, what in STAGES]


def pipeline() -> Figure:
    fig = Figure(figsize=(12, 2.9), layout="constrained")
    ax = fig.subplots()
    w, gap = 1.6, 0.45
    for i, (name, what, color) in enumerate(STAGES):
        x = i * (w + gap)
        ax.add_patch(FancyBboxPatch((x, 0.9), w, 1.0, boxstyle="round,pad=0.04", fc=color, alpha=0.55, ec="0.25"))
        ax.text(x + w / 2, 1.4, name, ha="center", va="center", fontsize=12, weight="bold")
        ax.text(x + w / 2, 0.72, what, ha="center", va="top", fontsize=8.5)
        if i:
            ax.add_patch(FancyArrowPatch((x - gap, 1.4), (x, 1.4), arrowstyle="-|>", mutation_scale=14, color="0.2"))
    end = len(STAGES) * (w + gap) - gap
    ax.text(end / 2, 2.25, "one NVTX range per stage call: name = stage, payload = batch index, "
            "an 'items' mark = frames in the batch", ha="center", fontsize=9, style="italic")
    ax.text(-0.1, 1.4, "video\nfile", ha="right", va="center", fontsize=9)
    ax.text(end + 0.1, 1.4, "tracks,\nvideo,\nresults\nJSON", ha="left", va="center", fontsize=9)
    ax.set_xlim(-0.8, end + 0.9)
    ax.set_ylim(-0.25, 2.5)
    ax.set_axis_off()
    return fig


def sync_vs_queued() -> Figure:
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    ax = fig.subplots()
    widths = [0.6, 0.4, 2.0, 0.4, 0.3, 0.8]  # illustrative only
    colors = [c for _, _, c in STAGES]
    x = 0.0
    for frame in range(3):
        for (name, _, _), wd, c in zip(STAGES, widths, colors):
            ax.barh(5.5, wd, left=x, color=c, ec="0.3")
            if frame == 0:
                ax.text(x + wd / 2, 5.5, name[:4], ha="center", va="center", fontsize=7)
            x += wd
    ax.text(-0.2, 5.5, "sync: one thread", ha="right", va="center", fontsize=9)
    slow = max(widths)
    for k, ((name, _, c), wd) in enumerate(zip(STAGES, widths)):
        y = 4 - k * 0.75
        start = sum(widths[:k])
        for frame in range(5):
            ax.barh(y, wd, left=start + frame * slow, color=c, ec="0.3", height=0.6)
        ax.text(-0.2, y, f"queued: {name} thread", ha="right", va="center", fontsize=8)
    ax.set_xlim(-4.2, x + 0.5)
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_xlabel("time (schematic) ->")
    ax.set_title("Sync: every stage waits for the one before it.  Queued: stages of different frames overlap, "
                 "and throughput is set by the slowest stage.", fontsize=10)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    return fig


def main() -> None:
    for name, make in (("pipeline.png", pipeline), ("sync_vs_queued.png", sync_vs_queued)):
        make().savefig(HERE / name, dpi=110)
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
