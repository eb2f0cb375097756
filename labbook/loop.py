"""Notebook 03's exercise in code: the lab's detector and frames of the sample clip, for a loop the
learner writes and records with ``%%nsys``.

``detect(batch)`` is the application's ``infer`` stage alone: one forward pass of the detector on a
batch of preprocessed frames, in an NVTX range ``infer`` that carries its frame count (labkit's
``items``), so that ``labkit.stage_table`` of the cell's report counts calls and frames as it does
for the application. OpenMP waits passively, as the application sets for itself: with its default
busy waiting, PyTorch's threads spin between parallel regions and a forward pass on a notebook's
main thread ran about 12 times slower on the 2-core VM (1,767 against 150 ms a frame at 192x320).
"""
from __future__ import annotations

import os
import sys

from labbook.settings import MODE, settings

FRAMES = 16
"""Frames the exercise's loops run on: a few seconds of the detector on a CPU."""


def _torch():
    """torch, imported with passive OpenMP waits (set before its OpenMP runtime loads); where it was
    imported already with busy waits, one thread, which never waits for another."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        torch.set_num_threads(1)
    return torch


def frames(n: int = FRAMES, mode: str = MODE):
    """The first ``n`` frames of the mode's sample clip, preprocessed for the detector at the mode's
    input size: a float32 tensor (n, 3, H, W)."""
    import cv2

    from labbook.video import sample_video
    from source_code.detector import INPUT_HW, preprocess_frames

    torch = _torch()
    hw = settings(mode).input_hw
    input_hw = tuple(int(v) for v in hw.split("x")) if hw else INPUT_HW
    cap = cv2.VideoCapture(str(sample_video(mode)))
    try:
        read = [cap.read() for _ in range(n)]
    finally:
        cap.release()
    return torch.from_numpy(preprocess_frames([f for ok, f in read if ok], input_hw))


def detector():
    """``detect(batch)``: the detector's heatmaps for a batch of frames (N, 3, H, W), a list of N (one a
    frame, in order), from one call in an NVTX range ``infer`` of N items."""
    from labkit import annotate
    from source_code.detector import load_detector

    torch = _torch()
    model = load_detector()

    def detect(batch):
        with annotate.range("infer", items=len(batch)), torch.inference_mode():
            return list(model(batch)[0])

    return detect
