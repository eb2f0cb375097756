"""CenterNet-style single-stage detector built from torch.nn alone (no torchvision).

CONTRACT (relied on by source_code/backends/ and source_code/export_onnx.py):

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
  ``decode_device`` (GPU part, a tensor on the outputs' device) then ``filter_detections`` (host part).
- ``preprocess_frames(frames_bgr_uint8, input_hw=INPUT_HW, *, out=None) -> np.float32 (N, 3, H, W)``:
  CPU path (cv2.resize INTER_LINEAR, BGR->RGB, /255), written into ``out`` when given.
- ``preprocess_frames_torch(frames_uint8, input_hw=INPUT_HW, *, channels_last=False) -> torch.float32
  (N, 3, H, W)``: same on the device of the input, which is a uint8 tensor ``(N, H0, W0, 3)`` BGR
  (bilinear resize, antialias off, so it matches cv2 to within rounding); contiguous NCHW
  unless ``channels_last``.
- FP32 on an Ampere or Hopper GPU: PyTorch runs the convolutions in TF32 by default
  (``torch.backends.cudnn.conv.fp32_precision``); ``make_backend(tf32=False)`` forbids it.
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

from source_code.scenes import CLASS_NAMES  # one home: the scene generator

INPUT_HW: tuple[int, int] = (384, 640)
STRIDE = 4
NUM_CLASSES = len(CLASS_NAMES)
DEFAULT_WEIGHTS = Path(__file__).resolve().parent / "weights" / "detector.pt"

_MEAN = (0.45, 0.45, 0.45)
_STD = (0.25, 0.25, 0.25)


def _conv_bn(cin: int, cout: int, k: int = 3, s: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, s, k // 2, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class BasicBlock(nn.Module):
    """ResNet basic block (two 3x3 convolutions and an identity shortcut)."""

    def __init__(self, ch: int):
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = self.bn2(self.conv2(y))
        return F.relu(x + y, inplace=True)


class CenterNet(nn.Module):
    """ResNet-like trunk (strides 4..32), top-down FPN neck to stride 4, three heads."""

    def __init__(self, num_classes: int = NUM_CLASSES, widths: Sequence[int] = (48, 96, 192, 256),
                 neck: int = 64):
        super().__init__()
        self.num_classes = num_classes
        self.register_buffer("mean", torch.tensor(_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(_STD).view(1, 3, 1, 1), persistent=False)
        w0, w1, w2, w3 = widths
        self.stem = nn.Sequential(_conv_bn(3, 24, 3, 2), _conv_bn(24, w0, 3, 2))
        self.layer1 = BasicBlock(w0)
        self.down2 = _conv_bn(w0, w1, 3, 2)
        self.layer2 = BasicBlock(w1)
        self.down3 = _conv_bn(w1, w2, 3, 2)
        self.layer3 = BasicBlock(w2)
        self.down4 = _conv_bn(w2, w3, 3, 2)
        self.layer4 = BasicBlock(w3)
        self.lat = nn.ModuleList([nn.Conv2d(c, neck, 1) for c in widths])
        self.smooth = _conv_bn(neck, neck, 3, 1)
        self.head = _conv_bn(neck, neck, 3, 1)
        self.hm = nn.Conv2d(neck, num_classes, 1)
        self.wh = nn.Conv2d(neck, 2, 1)
        self.off = nn.Conv2d(neck, 2, 1)
        nn.init.constant_(self.hm.bias, -2.19)  # prior 0.1, as in CenterNet

    def forward(self, x: torch.Tensor):
        x = (x - self.mean) / self.std
        c1 = self.layer1(self.stem(x))
        c2 = self.layer2(self.down2(c1))
        c3 = self.layer3(self.down3(c2))
        c4 = self.layer4(self.down4(c3))
        p = self.lat[3](c4)
        for lat, c in ((self.lat[2], c3), (self.lat[1], c2), (self.lat[0], c1)):
            p = F.interpolate(p, scale_factor=2.0, mode="nearest") + lat(c)
        f = self.head(self.smooth(p))
        return self.hm(f), self.wh(f), self.off(f)


def build_detector(num_classes: int = NUM_CLASSES) -> nn.Module:
    """Return a randomly initialised detector (train mode)."""
    return CenterNet(num_classes=num_classes)


def load_detector(weights: str | Path | None = None, *, device: str | torch.device = "cpu") -> nn.Module:
    """Build the detector, load weights (default ``weights/detector.pt``) and return it in eval mode, fp32."""
    path = Path(weights) if weights is not None else DEFAULT_WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(
            f"detector weights not found: {path} (train them with `python source_code/train_detector.py` "
            "or pass --weights PATH)")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    state = ckpt["state_dict"] if isinstance(ckpt, dict) and "state_dict" in ckpt else ckpt
    num_classes = int(state["hm.weight"].shape[0])
    model = build_detector(num_classes=num_classes)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval().to(device)


def preprocess_frames(frames_bgr_uint8, input_hw: tuple[int, int] = INPUT_HW, *,
                      out: np.ndarray | None = None) -> np.ndarray:
    """Resize BGR uint8 frames to ``input_hw``, convert to RGB, scale to [0, 1]; returns (N, 3, H, W) float32.

    ``out``: a float32 array of at least N rows of (3, H, W) (a view of a pinned upload buffer, say)
    that each frame is written into directly, row by row: no batch is made and then copied."""
    h, w = input_hw
    n = len(frames_bgr_uint8)
    if out is None:
        out = np.empty((n, 3, h, w), dtype=np.float32)
    elif out.dtype != np.float32 or tuple(out.shape[1:]) != (3, h, w) or out.shape[0] < n:
        raise ValueError(f"out must be float32 (>= {n}, 3, {h}, {w}), got {out.dtype} {tuple(out.shape)}")
    for i, frame in enumerate(frames_bgr_uint8):
        if frame.shape[0] != h or frame.shape[1] != w:
            frame = cv2_resize(frame, (w, h))
        # channel flip BGR->RGB while transposing HWC->CHW
        np.multiply(frame[:, :, ::-1].transpose(2, 0, 1), np.float32(1.0 / 255.0), out=out[i],
                    casting="unsafe")
    return out[:n]


def cv2_resize(frame: np.ndarray, wh: tuple[int, int]) -> np.ndarray:
    import cv2
    return cv2.resize(frame, wh, interpolation=cv2.INTER_LINEAR)


def preprocess_frames_torch(frames_uint8: torch.Tensor, input_hw: tuple[int, int] = INPUT_HW, *,
                            channels_last: bool = False) -> torch.Tensor:
    """GPU-capable preprocessing: uint8 (N, H0, W0, 3) BGR tensor -> float32 (N, 3, H, W) RGB in [0, 1].

    The result is contiguous NCHW, or channels_last (NHWC strides) when asked: the permute of
    the NHWC frames would otherwise leave NHWC strides, silently running the detector
    channels-last (and a compiled or graph-captured detector in another layout than it was
    prepared for).
    """
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    # Fix the layout on the uint8 data (a quarter of the float bytes); resize and scaling keep it.
    x = frames_uint8.permute(0, 3, 1, 2).flip(1).contiguous(memory_format=fmt).float()
    if tuple(x.shape[-2:]) != tuple(input_hw):
        x = F.interpolate(x, size=tuple(input_hw), mode="bilinear", align_corners=False, antialias=False)
    return x.mul_(1.0 / 255.0).contiguous(memory_format=fmt)


@torch.no_grad()
def decode_device(outputs, *, max_det: int = 100) -> torch.Tensor:
    """The GPU part of :func:`decode`: the top ``max_det`` peaks of each image as a ``(N, K, 6)``
    float tensor ``[x1, y1, x2, y2, score, class]`` on the outputs' device (nothing copied to the host)."""
    hm, wh, off = (o.float() for o in outputs[:3])
    n, c, oh, ow = hm.shape
    heat = hm.sigmoid()
    keep = F.max_pool2d(heat, 3, stride=1, padding=1) == heat
    heat = heat * keep
    k = min(max_det, c * oh * ow)
    scores, idx = heat.reshape(n, -1).topk(k)
    cls = idx // (oh * ow)
    pix = idx % (oh * ow)
    ys = (pix // ow).float()
    xs = (pix % ow).float()
    wh = wh.reshape(n, 2, -1)
    off = off.reshape(n, 2, -1)
    bw = wh[:, 0].gather(1, pix).clamp(min=0)
    bh = wh[:, 1].gather(1, pix).clamp(min=0)
    cx = xs + off[:, 0].gather(1, pix)
    cy = ys + off[:, 1].gather(1, pix)
    boxes = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], dim=-1) * STRIDE
    boxes[..., 0::2] = boxes[..., 0::2].clamp(0, ow * STRIDE)
    boxes[..., 1::2] = boxes[..., 1::2].clamp(0, oh * STRIDE)
    return torch.cat([boxes, scores.unsqueeze(-1), cls.unsqueeze(-1).float()], dim=-1)


def filter_detections(det: np.ndarray, *, score_thresh: float = 0.3) -> list[np.ndarray]:
    """The host part of :func:`decode`: each image's rows of ``det`` (N, K, 6) scoring at least ``score_thresh``."""
    return [d[d[:, 4] >= score_thresh].astype(np.float32) for d in det]


def decode(outputs, *, score_thresh: float = 0.3, max_det: int = 100) -> list[np.ndarray]:
    """Turn raw network outputs into per-image ``[x1, y1, x2, y2, score, class]`` arrays (input pixels)."""
    return filter_detections(decode_device(outputs, max_det=max_det).cpu().numpy(), score_thresh=score_thresh)


def scale_boxes(det: np.ndarray, input_hw: tuple[int, int], frame_hw: tuple[int, int]) -> np.ndarray:
    """Map ``decode`` rows from network-input pixels to frame pixels (in place on a copy)."""
    det = det.copy()
    sy = frame_hw[0] / input_hw[0]
    sx = frame_hw[1] / input_hw[1]
    det[:, 0:4:2] *= sx
    det[:, 1:4:2] *= sy
    return det


def count_flops(model: nn.Module, input_hw: tuple[int, int] = INPUT_HW, batch: int = 1) -> int:
    """FLOPs per frame of one forward pass (2 per multiply-accumulate), from FlopCounterMode.

    Counted on a copy of the model on the ``meta`` device: shapes only, no arithmetic and no
    activations, so a large input size costs nothing here (only the weights are copied once)."""
    import copy

    from torch.utils.flop_counter import FlopCounterMode

    meta = copy.deepcopy(model).to("meta")
    x = torch.zeros(batch, 3, *input_hw, device="meta")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        meta(x)
    return int(counter.get_total_flops() // batch)
