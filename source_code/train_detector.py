"""Train the CenterNet detector on freshly generated traffic scenes; write weights and MODEL_CARD.md.

Training scenes use seeds ``>= TRAIN_SEED_BASE`` (100000 and up); evaluation clips use seeds
below 1000 (the model card uses ``EVAL_SEEDS``), so training never sees an evaluation scene.

Each sample is a rendered frame resized to ``INPUT_HW`` (as the pipeline does), randomly
rescaled (0.85-1.15), JPEG-compressed at a random quality (to resemble decoded mp4v frames),
colour-jittered, randomly flipped left-right and cropped to ``--crop`` (the network is fully
convolutional, so it trains on crops and runs on full frames). Losses: CenterNet focal loss on
the class heatmaps, L1 on width/height (weight 0.1) and on the centre offset (weight 1).

Example (the command that produced weights/detector.pt is written in MODEL_CARD.md)::

    python source_code/train_detector.py --minutes 50 --threads 2
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from source_code.detector import (CLASS_NAMES, DEFAULT_WEIGHTS, INPUT_HW, NUM_CLASSES, STRIDE, build_detector,
                                  count_flops)
from source_code.scenes import VISIBILITY_MIN, Scene, SceneConfig

TRAIN_SEED_BASE = 100_000
EVAL_SEEDS = (11, 12, 13)
_SIZES = ((1280, 720), (1280, 720), (1280, 720), (960, 540), (640, 360), (1600, 900))
MAX_OBJ = 96


class SampleStream:
    """Endless stream of (image RGB uint8 at INPUT_HW scale, boxes (K, 6) [x1,y1,x2,y2,cls,vis]) samples."""

    def __init__(self, *, seed: int = 0, pool: int = 8, reuse: int = 40):
        self.rng = np.random.default_rng(seed)
        self.next_seed = TRAIN_SEED_BASE + seed * 10_000
        self.pool = [self._new_scene() for _ in range(pool)]
        self.uses = [0] * pool
        self.reuse = reuse

    def _new_scene(self) -> Scene:
        w, h = _SIZES[int(self.rng.integers(len(_SIZES)))]
        density = float(self.rng.uniform(0.5, 1.6))
        scene = Scene(SceneConfig(seed=self.next_seed, width=w, height=h, density=density))
        self.next_seed += 1
        return scene

    def next(self):
        i = int(self.rng.integers(len(self.pool)))
        if self.uses[i] >= self.reuse:
            self.pool[i], self.uses[i] = self._new_scene(), 0
        scene = self.pool[i]
        for _ in range(int(self.rng.integers(2, 10))):
            scene.step()
        self.uses[i] += 1
        img, rows = scene.render()
        H, W = img.shape[:2]
        ih, iw = INPUT_HW
        img = cv2.resize(img, (iw, ih), interpolation=cv2.INTER_LINEAR)
        boxes = np.array([[r["x1"] * iw / W, r["y1"] * ih / H, r["x2"] * iw / W, r["y2"] * ih / H,
                           r["class_id"], r["visibility"]] for r in rows], dtype=np.float32).reshape(-1, 6)
        return img, boxes


def augment(img: np.ndarray, boxes: np.ndarray, crop_hw: tuple[int, int], rng: np.random.Generator):
    """Rescale, compress, jitter, flip and crop one sample; returns (RGB float (3,h,w), boxes, ignore boxes)."""
    s = rng.uniform(0.85, 1.15)
    if abs(s - 1) > 0.01:
        img = cv2.resize(img, None, fx=s, fy=s, interpolation=cv2.INTER_LINEAR)
        boxes = boxes.copy()
        boxes[:, :4] *= s
    if rng.random() < 0.8:
        q = int(rng.integers(25, 95))
        img = cv2.imdecode(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, q])[1], cv2.IMREAD_COLOR)
    ch, cw = crop_hw
    H, W = img.shape[:2]
    if H < ch or W < cw:
        img = cv2.copyMakeBorder(img, 0, max(0, ch - H), 0, max(0, cw - W), cv2.BORDER_CONSTANT, value=(0, 0, 0))
        H, W = img.shape[:2]
    y0 = int(rng.integers(0, H - ch + 1))
    x0 = int(rng.integers(0, W - cw + 1))
    img = img[y0:y0 + ch, x0:x0 + cw]
    b = boxes.copy()
    b[:, [0, 2]] -= x0
    b[:, [1, 3]] -= y0
    area = np.maximum(1e-6, (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))
    c = b.copy()
    c[:, [0, 2]] = c[:, [0, 2]].clip(0, cw)
    c[:, [1, 3]] = c[:, [1, 3]].clip(0, ch)
    carea = (c[:, 2] - c[:, 0]).clip(0) * (c[:, 3] - c[:, 1]).clip(0)
    vis = c[:, 5] * carea / area
    keep = (vis >= VISIBILITY_MIN) & (c[:, 2] - c[:, 0] >= 2) & (c[:, 3] - c[:, 1] >= 2)
    ignore = c[~keep & (carea > 0)]
    c = c[keep]
    img = img.astype(np.float32)
    img = img * rng.uniform(0.75, 1.25) + rng.uniform(-20, 20)  # contrast / brightness
    img = img * rng.uniform(0.9, 1.1, 3)  # colour balance
    if rng.random() < 0.5:
        img = img[:, ::-1]
        c[:, [0, 2]] = cw - c[:, [2, 0]]
        ignore[:, [0, 2]] = cw - ignore[:, [2, 0]]
    img = np.clip(img, 0, 255)[:, :, ::-1].transpose(2, 0, 1) / 255.0  # BGR->RGB, CHW
    return np.ascontiguousarray(img, dtype=np.float32), c, ignore


def make_targets(boxes: np.ndarray, ignore: np.ndarray, out_hw: tuple[int, int], num_classes: int):
    """CenterNet targets at stride 4: heatmap (elliptical Gaussians), weight map, wh/offset/index/mask."""
    oh, ow = out_hw
    hm = np.zeros((num_classes, oh, ow), np.float32)
    weight = np.ones((num_classes, oh, ow), np.float32)
    wh = np.zeros((MAX_OBJ, 2), np.float32)
    off = np.zeros((MAX_OBJ, 2), np.float32)
    ind = np.zeros(MAX_OBJ, np.int64)
    mask = np.zeros(MAX_OBJ, np.float32)
    for x1, y1, x2, y2, cls, _ in ignore:
        weight[int(cls), int(y1 / STRIDE):int(math.ceil(y2 / STRIDE)), int(x1 / STRIDE):int(math.ceil(x2 / STRIDE))] = 0
    ys, xs = np.arange(oh, dtype=np.float32)[:, None], np.arange(ow, dtype=np.float32)[None, :]
    for k, (x1, y1, x2, y2, cls, _) in enumerate(boxes[:MAX_OBJ]):
        w, h = (x2 - x1) / STRIDE, (y2 - y1) / STRIDE
        cx, cy = (x1 + x2) / 2 / STRIDE, (y1 + y2) / 2 / STRIDE
        ix, iy = min(int(cx), ow - 1), min(int(cy), oh - 1)
        sx, sy = max(0.5, 0.54 * w / 6), max(0.5, 0.54 * h / 6)
        g = np.exp(-((xs - ix) ** 2) / (2 * sx * sx) - ((ys - iy) ** 2) / (2 * sy * sy))
        np.maximum(hm[int(cls)], g, out=hm[int(cls)])
        hm[int(cls), iy, ix] = 1.0
        weight[int(cls), iy, ix] = 1.0
        wh[k] = (w, h)
        off[k] = (cx - ix, cy - iy)
        ind[k] = iy * ow + ix
        mask[k] = 1
    return hm, weight, wh, off, ind, mask


def focal_loss(logits: torch.Tensor, gt: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """CenterNet's penalty-reduced focal loss (alpha 2, beta 4), normalised by the number of objects."""
    pred = logits.sigmoid().clamp(1e-4, 1 - 1e-4)
    pos = gt.eq(1).float()
    neg = (1 - pos) * weight
    pos_loss = torch.log(pred) * (1 - pred) ** 2 * pos
    neg_loss = torch.log(1 - pred) * pred ** 2 * (1 - gt) ** 4 * neg
    n = pos.sum()
    return -(pos_loss.sum() + neg_loss.sum()) / n.clamp(min=1)


def _gather(feat: torch.Tensor, ind: torch.Tensor) -> torch.Tensor:
    n, c = feat.shape[:2]
    return feat.view(n, c, -1).gather(2, ind.unsqueeze(1).expand(n, c, ind.shape[1])).permute(0, 2, 1)


def compute_loss(outputs, targets):
    hm_logits, wh_pred, off_pred = outputs
    hm, weight, wh, off, ind, mask = targets
    l_hm = focal_loss(hm_logits, hm, weight)
    m = mask.unsqueeze(-1)
    n = mask.sum().clamp(min=1)
    l_wh = (F.l1_loss(_gather(wh_pred, ind) * m, wh * m, reduction="sum")) / n
    l_off = (F.l1_loss(_gather(off_pred, ind) * m, off * m, reduction="sum")) / n
    return l_hm + 0.1 * l_wh + l_off, (l_hm.item(), l_wh.item(), l_off.item())


def make_batch(stream: SampleStream, batch: int, crop_hw, rng):
    imgs, tgts = [], []
    out_hw = (crop_hw[0] // STRIDE, crop_hw[1] // STRIDE)
    for _ in range(batch):
        img, boxes = stream.next()
        x, b, ign = augment(img, boxes, crop_hw, rng)
        imgs.append(x)
        tgts.append(make_targets(b, ign, out_hw, NUM_CLASSES))
    return torch.from_numpy(np.stack(imgs)), [torch.from_numpy(np.stack(t)) for t in zip(*tgts)]


def save_weights(model: torch.nn.Module, path: Path, meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: (v.half() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
    tmp = path.with_suffix(".tmp")
    torch.save({"state_dict": state, "meta": meta}, tmp)
    tmp.replace(path)


def train(*, minutes: float, batch: int, crop_hw: tuple[int, int], lr: float, device: str, out: Path,
          seed: int = 0, log_every: int = 20, save_every_s: float = 300.0, init: Path | None = None) -> dict:
    """Train for a wall-clock budget with a cosine schedule over that budget; returns summary stats."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    stream = SampleStream(seed=seed)
    model = build_detector().to(device)
    if init is not None:
        ckpt = torch.load(init, map_location="cpu", weights_only=True)
        model.load_state_dict({k: v.float() for k, v in ckpt["state_dict"].items()})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    budget = minutes * 60.0
    t0 = last_save = time.perf_counter()
    it = 0
    meta = {"input_hw": list(INPUT_HW), "classes": list(CLASS_NAMES), "crop_hw": list(crop_hw), "batch": batch}
    ema = None
    while True:
        progress = (time.perf_counter() - t0) / budget
        if progress >= 1.0:
            break
        warm = min(1.0, (it + 1) / 100)
        for g in opt.param_groups:
            g["lr"] = lr * warm * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))
        x, tg = make_batch(stream, batch, crop_hw, rng)
        x = x.to(device)
        tg = [t.to(device) for t in tg]
        loss, parts = compute_loss(model(x), tg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        it += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if it % log_every == 0:
            el = time.perf_counter() - t0
            print(f"it {it} t {el:.0f}s lr {opt.param_groups[0]['lr']:.2e} loss {ema:.3f} "
                  f"hm {parts[0]:.3f} wh {parts[1]:.3f} off {parts[2]:.3f} ({it * batch / el:.1f} img/s)", flush=True)
        if time.perf_counter() - last_save > save_every_s:
            save_weights(model.eval(), out, {**meta, "iterations": it, "partial": True})
            model.train()
            last_save = time.perf_counter()
    meta.update({"iterations": it, "images": it * batch, "seconds": round(time.perf_counter() - t0, 1),
                 "final_loss_ema": round(float(ema or 0), 4), "partial": False})
    save_weights(model.eval(), out, meta)
    return meta


def evaluate(weights: Path, *, seeds=EVAL_SEEDS, seconds: float = 3.0) -> dict:
    """mAP@0.5 of the saved weights on generated evaluation clips (rendered frames, full INPUT_HW)."""
    from source_code.detector import decode, load_detector, preprocess_frames, scale_boxes
    from source_code.metrics import map50

    model = load_detector(weights)
    gts, dets = [], []
    for seed in seeds:
        scene = Scene(SceneConfig(seed=seed))
        for _ in range(int(seconds * 30)):
            img, rows = scene.render()
            ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 75])
            img = cv2.imdecode(enc, cv2.IMREAD_COLOR)
            with torch.no_grad():
                out = model(torch.from_numpy(preprocess_frames([img], INPUT_HW)))
            d = scale_boxes(decode(out, score_thresh=0.01, max_det=100)[0], INPUT_HW, img.shape[:2])
            dets.append(d)
            gts.append(np.array([[r["x1"], r["y1"], r["x2"], r["y2"], r["class_id"]] for r in rows]).reshape(-1, 5))
            scene.step()
    return map50(gts, dets, num_classes=NUM_CLASSES, class_names=CLASS_NAMES)


def write_model_card(weights: Path, *, command: str, evaluation: dict | None) -> Path:
    ckpt = torch.load(weights, map_location="cpu", weights_only=True)
    meta = ckpt.get("meta", {})
    from source_code.detector import load_detector
    model = load_detector(weights)
    flops = count_flops(model, INPUT_HW)
    params = sum(p.numel() for p in model.parameters())
    lines = [
        "# detector.pt: CenterNet-style traffic detector",
        "",
        f"- Architecture: `source_code/detector.py` (ResNet-like trunk 48/96/192/256 channels, FPN neck to stride 4,"
        f" heads: {NUM_CLASSES}-class heatmap, wh, offset); {params / 1e6:.2f} M parameters.",
        f"- Classes: {', '.join(f'{i} = {n}' for i, n in enumerate(CLASS_NAMES))}.",
        f"- Input: RGB float32 in [0, 1], default {INPUT_HW[0]}x{INPUT_HW[1]} (H x W); normalisation inside the network.",
        f"- Cost: {flops / 1e9:.2f} GFLOPs per frame at {INPUT_HW[0]}x{INPUT_HW[1]} (FlopCounterMode; 2 FLOPs per"
        " multiply-accumulate).",
        f"- Stored as an fp16 state dict ({weights.stat().st_size / 1e6:.1f} MB); `load_detector` returns fp32.",
        "",
        "## Data",
        f"Generated on the fly by `source_code/scenes.py`, scene seeds {TRAIN_SEED_BASE} and up (evaluation uses"
        " seeds below 1000), frame sizes 1280x720 (most), 960x540, 640x360 and 1600x900, density 0.5-1.6;"
        " frames resized to the input size, rescaled 0.85-1.15, JPEG-compressed (quality 25-95), colour-jittered,"
        f" flipped left-right, cropped to {meta.get('crop_hw')}.",
        "",
        "## Training",
        f"- Command: `{command}`",
        f"- Iterations (the run that saved the file): {meta.get('iterations')}, batch {meta.get('batch')}, images {meta.get('images')},"
        f" wall time {meta.get('seconds')} s on CPU; AdamW, cosine schedule over the time budget;"
        f" final loss (EMA) {meta.get('final_loss_ema')}.",
        "",
        "## Accuracy",
    ]
    if evaluation:
        lines += [
            f"mAP@0.5 on seeds {list(EVAL_SEEDS)} (3 s each, 1280x720, frames JPEG q75, evaluated at"
            f" {INPUT_HW[0]}x{INPUT_HW[1]}): **{evaluation['map50']:.4f}**"
            f" (per class: {', '.join(f'{k} {v:.4f}' for k, v in evaluation['per_class'].items())}).",
            "",
            "End-to-end numbers on a video (mAP@0.5, MOTA, IDF1, HOTA) come from"
            " `python source_code/detect_video.py --input clip.mp4 --results r.json`; see source_code/README.md.",
        ]
    else:
        lines.append("not evaluated")
    path = weights.with_name("MODEL_CARD.md")
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=50.0, help="wall-clock training budget")
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--crop", type=int, nargs=2, default=(224, 384), metavar=("H", "W"))
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS)
    p.add_argument("--init", type=Path, default=None, help="start from these weights")
    p.add_argument("--card-only", action="store_true", help="only evaluate and (re)write MODEL_CARD.md")
    p.add_argument("--command", default=None, help="training command to record in the card (with --card-only)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    command = a.command or "python source_code/train_detector.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if not a.card_only:
        meta = train(minutes=a.minutes, batch=a.batch, crop_hw=tuple(a.crop), lr=a.lr, device=device, out=a.out,
                     seed=a.seed, init=a.init)
        print("trained:", meta, flush=True)
    ev = evaluate(a.out)
    print("eval:", ev, flush=True)
    print("card:", write_model_card(a.out, command=command, evaluation=ev))
    return 0


if __name__ == "__main__":
    sys.exit(main())
