"""The one home where labkit's general levers meet the application's flags.

``labkit.advise`` names a lever by a general id (``labkit.judge.advice.LEVERS``: ``batch``,
``overlap_stages``, ``reduce_precision``...) and never a flag of ``detect_video.py``. This module
says which of the application's options pull each lever, so that a step's change (its options
over the step it builds on) is matched to the findings that name its lever, and a finding can be
shown with the real flags a learner would type.
"""
from __future__ import annotations

from types import MappingProxyType

from source_code.stages import DETECTOR_STAGES

OPTIONS_OF = MappingProxyType({
    "pin_memory": ("gpu_preprocess",),  # the upload from pinned host memory comes with it
    "remove_sync": (),  # no flag: the application's code (its streams and events)
    "batch": ("batch_size",),
    "cuda_graphs": ("cuda_graphs",),
    "compile": ("compile", "channels_last", "backend"),  # a compiler or runtime, or the memory layout it favours
    "overlap_copies": ("gpu_preprocess",),
    "overlap_stages": ("queues", "queue_size"),
    "reduce_precision": ("precision", "tf32"),
    "gpu_offload": ("gpu_preprocess", "device", "decode"),  # --decode nvdec: decoding on the GPU's own engine
    "parallel_input": ("streams",),
    "skip_work": ("interval",),
    "remove_stage": ("osd",),
    # a cheaper stage: what makes the detector's own work cheaper (layout, compiler, runtime, precision);
    # the finding is the bound of that stage costing nothing, which none of them can pass
    "cheaper_stage": ("channels_last", "compile", "backend", "precision"),
    # decoding in other processes frees the interpreter's lock for the stage threads (the detector
    # releases the GIL already); the rest is the stage threads' own code
    "release_lock": ("decode_workers",),
    "in_flight": (),  # no flag: the application starts no worker per frame
})
"""lever id -> the ``detect_video.py`` options (snake case) that pull it."""

ADVISE = MappingProxyType({"removable": ("display",), "skip_with": DETECTOR_STAGES})
"""What ``labkit.advise`` is told of the application: its ``display`` stage is not needed for the
output (the remove-stage lever), and skipping frames (the skip-work lever, ``--interval``) skips
its detector stages together (``source_code.stages.DETECTOR_STAGES``)."""

SETTINGS_OPTIONS = frozenset({"threads", "input_hw", "frames", "warmup", "inputs", "output", "results",
                              "overwrite", "cache_dir", "weights", "realtime", "decode_only"})
"""Options that size or place a run rather than optimise it: no lever."""


def levers_of(changed) -> list[str]:
    """The lever ids a change pulls (``changed``: the options it sets, or a mapping of them)."""
    keys = set(changed)
    return [lever for lever, opts in OPTIONS_OF.items() if keys & set(opts)]


def flags_of(lever: str) -> list[str]:
    """The command-line flags that pull ``lever`` (``['--batch-size']``); [] for a lever with
    no flag, or an id this lab does not know."""
    from source_code.options import BY_NAME

    return [BY_NAME[o].flag for o in OPTIONS_OF.get(lever, ()) if o in BY_NAME]


def lever_text(lever: str) -> str:
    """``lever`` named with its flags, for a table: ``batch (--batch-size)``."""
    fl = flags_of(lever)
    return f"{lever} ({', '.join(fl)})" if fl else lever
