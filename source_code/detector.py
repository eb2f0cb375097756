"""CenterNet-style single-stage detector built from torch.nn alone (no torchvision).

CONTRACT (relied on by source_code/backends.py and source_code/export_onnx.py):

- ``INPUT_HW = (384, 640)``: default network input (H, W); any H, W divisible by 32 works
  because the network is fully convolutional.
- ``NUM_CLASSES = 2``, ``CLASS_NAMES = ("vehicle", "pedestrian")``; ``STRIDE = 4``.
- ``build_detector(num_classes=NUM_CLASSES) -> nn.Module`` (random init, train mode).
- ``load_detector(weights=None, *, device="cpu") -> nn.Module`` in eval mode, float32;
  default weights ``source_code/weights/detector.pt``; raises ``FileNotFoundError`` naming
  the fix (``python source_code/train_detector.py``) when the file is missing.
- ``model(x)``: ``x`` float32 ``(N, 3, H, W)``, RGB, scaled to [0, 1] (mean/std normalization
  happens inside the network). Returns a TUPLE of raw tensors at stride 4:
  ``(heatmap_logits (N, C, H/4, W/4), wh (N, 2, H/4, W/4), offset (N, 2, H/4, W/4))``.
  ``wh`` is box width/height in output cells (multiply by STRIDE for input pixels);
  ``offset`` is the sub-cell centre offset in cells. No sigmoid inside the network.
- ``decode(outputs, *, score_thresh=0.3, max_det=100) -> list[np.ndarray]``: one float32
  ``(K, 6)`` array per image, rows ``[x1, y1, x2, y2, score, class]`` in *network input*
  pixels (use ``scale_boxes`` to map to the frame). Peaks are kept by 3x3 max-pool NMS.
- ``preprocess_frames(frames_bgr_uint8, input_hw=INPUT_HW) -> np.float32 (N, 3, H, W)``:
  CPU path (cv2.resize INTER_LINEAR, BGR->RGB, /255).
- ``preprocess_frames_torch(frames_uint8, input_hw=INPUT_HW) -> torch.float32 (N, 3, H, W)``:
  same on the device of the input, which is a uint8 tensor ``(N, H0, W0, 3)`` BGR
  (bilinear resize, antialias off, so it matches cv2 to within rounding).
- ``count_flops(model, input_hw=INPUT_HW, batch=1) -> int``: FLOPs of one forward pass per
  frame counted by ``torch.utils.flop_counter.FlopCounterMode`` (which counts 2 FLOPs per
  multiply-accumulate of convolutions and matmuls; elementwise ops are not counted).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

INPUT_HW: tuple[int, int] = (384, 640)
STRIDE = 4
CLASS_NAMES: tuple[str, ...] = ("vehicle", "pedestrian")
NUM_CLASSES = len(CLASS_NAMES)
DEFAULT_WEIGHTS = Path(__file__).resolve().parent / "weights" / "detector.pt"
