"""The lab's colours: one per pipeline stage, shared by the timeline, the stage bars and the
schematics in images/, so ``infer`` is the same red everywhere."""
from __future__ import annotations

import zlib

__all__ = ["STAGE_COLORS", "GPU_COLORS", "stage_color"]

# The application's stages (its NVTX range names), in pipeline order; tab10 hues.
STAGE_COLORS = {
    "decode": "#2ca02c",
    "preprocess": "#bcbd22",
    "infer": "#d62728",
    "postprocess": "#ff7f0e",
    "track": "#9467bd",
    "display": "#1f77b4",
}
# GPU work and the CUDA API calls that launched it.
GPU_COLORS = {"kernel": "#4c72b0", "memcpy": "#dd8452", "memset": "#55a868", "cuda_api": "#8c8c8c"}
# Any other name: a stable pick (same name, same colour, in every process) among colours no stage uses.
_OTHER = ("#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#aec7e8", "#98df8a", "#ffbb78", "#c5b0d5",
          "#c49c94", "#f7b6d2", "#9edae5", "#dbdb8d")


def stage_color(name: str) -> str:
    """Colour of a stage or range name (hex); stable across calls, processes and plots."""
    name = str(name)
    if name in STAGE_COLORS:
        return STAGE_COLORS[name]
    return _OTHER[zlib.crc32(name.encode()) % len(_OTHER)]
