"""How the lab shows things: one colour per pipeline stage, shared by the timeline, the stage
bars and the schematics in images/ (``infer`` is the same red everywhere), and frames whose
notebook display keeps whole texts."""
from __future__ import annotations

import zlib

import pandas as pd

__all__ = ["STAGE_COLORS", "GPU_COLORS", "stage_color", "full_text", "FullTextFrame"]

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
# Any other name: a stable pick (same name, same colour, in every process) among colours no stage
# uses, and no grey (grey is the CUDA API).
_OTHER = ("#8c564b", "#e377c2", "#17becf", "#393b79", "#aec7e8", "#98df8a", "#ffbb78", "#c5b0d5",
          "#c49c94", "#f7b6d2", "#9edae5", "#dbdb8d")


def stage_color(name: str) -> str:
    """Colour of a stage or range name (hex); stable across calls, processes and plots."""
    name = str(name)
    if name in STAGE_COLORS:
        return STAGE_COLORS[name]
    return _OTHER[zlib.crc32(name.encode()) % len(_OTHER)]



class FullTextFrame(pd.DataFrame):
    """A DataFrame that Jupyter shows with every cell's whole text (no ``...`` at 50
    characters): the doctor's details and fixes are meant to be read in full."""

    @property
    def _constructor(self):
        return FullTextFrame

    def _repr_html_(self):
        with pd.option_context("display.max_colwidth", None, "display.max_columns", None, "display.width", 10**6):
            return super()._repr_html_()

    def __repr__(self):
        with pd.option_context("display.max_colwidth", None, "display.max_columns", None, "display.width", 10**6):
            return super().__repr__()


def full_text(frame: pd.DataFrame) -> FullTextFrame:
    """``frame`` as a :class:`FullTextFrame`: same data, whole texts in a notebook."""
    return FullTextFrame(frame)
