"""How the lab shows things: one colour per pipeline stage, shared by the timeline, the stage
bars and the schematics in images/ (``infer`` is the same red everywhere), and frames whose
notebook display keeps whole texts."""
from __future__ import annotations

import zlib

import pandas as pd

__all__ = ["STAGE_COLORS", "GPU_COLORS", "stage_color", "colour_map", "full_text", "FullTextFrame"]

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


# Past the 12 colours above: matplotlib's tab20b and tab20c hues (no stage, GPU or grey colour
# among them), then distinct generated hues.
_MORE = ("#393b79", "#5254a3", "#6b6ecf", "#9c9ede", "#637939", "#8ca252", "#b5cf6b", "#cedb9c", "#8c6d31",
         "#bd9e39", "#e7ba52", "#e7cb94", "#843c39", "#ad494a", "#d6616b", "#e7969c", "#7b4173", "#a55194",
         "#ce6dbd", "#de9ed6", "#3182bd", "#6baed6", "#9ecae1", "#c6dbef", "#e6550d", "#fd8d3c", "#fdae6b",
         "#fdd0a2", "#31a354", "#74c476", "#a1d99b", "#c7e9c0", "#756bb1", "#9e9ac8", "#bcbddc", "#dadaeb")


def colour_map(names) -> dict:
    """One colour per name, no two names sharing one (one figure's legend): stages keep their
    :data:`STAGE_COLORS`; any other name gets :func:`stage_color`'s stable pick when no other
    name of the figure has it yet, else the next free colour (a stable pick per name, as long
    as the figure's other names leave it free)."""
    names = list(dict.fromkeys(str(n) for n in names))
    out = {n: STAGE_COLORS[n] for n in names if n in STAGE_COLORS}
    reserved = set(STAGE_COLORS.values()) | set(GPU_COLORS.values())
    used = set(out.values())
    pool = [c for c in dict.fromkeys(_OTHER + _MORE) if c not in reserved]
    for n in sorted(n for n in names if n not in out):  # sorted: the same figure, the same colours
        first = zlib.crc32(n.encode()) % len(_OTHER)
        pick = next((pool[(first + i) % len(pool)] for i in range(len(pool)) if pool[(first + i) % len(pool)]
                     not in used), None)
        k = 0
        while pick is None:  # more names than the palette: distinct generated hues (golden-ratio steps)
            import colorsys

            r, g, b = colorsys.hsv_to_rgb((0.137 + 0.618034 * k) % 1.0, 0.55 + 0.4 * (k % 3) / 2, 0.75 - 0.2 * (k % 2))
            cand = f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"
            pick = cand if cand not in used and cand not in reserved else None
            k += 1
        out[n] = pick
        used.add(pick)
    return {n: out[n] for n in names}



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
