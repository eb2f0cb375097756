"""Deterministic synthetic traffic scenes with exact ground truth.

A scene is a straight four-lane road seen from above at a slight angle (far lanes drawn a
little smaller), with sidewalks, a zebra crossing, a tree and two lamp posts that occlude what
passes beneath them. Cars, trucks and buses drive in their lanes (two lanes each way, with a
simple car-following rule so they never overlap in a lane); pedestrians walk along both
sidewalks and across the zebra crossing, passing in front of and behind vehicles. Every object
enters from outside the frame and leaves it again. The same ``SceneConfig`` (seed included)
always gives the same pixels and the same ground truth.

Classes (``CLASS_NAMES``): 0 = vehicle (car, truck, bus), 1 = pedestrian.

Ground truth file ``<video stem>.gt.csv`` beside the video (``gt_path_for(video)`` finds it),
comma-separated with this header line::

    frame,track_id,x1,y1,x2,y2,class_id,class_name,kind,visibility

- ``frame``: 0-based index of the frame in decode order.
- ``track_id``: 1-based identity, constant for the object's whole life (also across frames in
  which it is hidden).
- ``x1,y1,x2,y2``: box in frame pixels (x2, y2 exclusive), the object's full extent clipped
  to the frame.
- ``class_id``/``class_name``: 0 vehicle, 1 pedestrian; ``kind`` is car, truck, bus or person.
- ``visibility``: fraction of the object's full (unclipped) box area that is inside the frame
  and not covered by anything drawn in front of it (nearer objects, i.e. those whose bottom
  edge is lower in the image, then the tree and the lamp posts). It is measured on an id
  buffer at 1/4 of the frame resolution, with each object's box as its footprint.

Visibility rule: a row is written only when ``visibility >= VISIBILITY_MIN`` (0.4) and the
clipped box is at least 4 pixels wide and high. Everything else counts as not visible.
"""
from __future__ import annotations

import csv
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

CLASS_NAMES = ("vehicle", "pedestrian")
VISIBILITY_MIN = 0.4
GT_HEADER = ("frame", "track_id", "x1", "y1", "x2", "y2", "class_id", "class_name", "kind", "visibility")
_ID_SCALE = 4  # id-buffer downsampling for the visibility computation

# Layout as fractions of the frame height (top to bottom).
_SIDEWALK_TOP = (0.20, 0.31)
_ROAD = (0.31, 0.83)
_SIDEWALK_BOTTOM = (0.83, 0.94)
_N_LANES = 4  # lanes 0, 1 drive left; lanes 2, 3 drive right
_CROSSWALK_X = 0.62  # centre of the zebra crossing, fraction of the width

_VEHICLE_KINDS = {
    # kind: (probability, length range, width range) in fractions of the lane height
    "car": (0.68, (1.55, 2.1), (0.62, 0.72)),
    "truck": (0.18, (2.6, 3.4), (0.78, 0.86)),
    "bus": (0.14, (3.4, 4.2), (0.80, 0.88)),
}


@dataclass(frozen=True)
class SceneConfig:
    """Everything that determines a scene; equal configs give identical videos."""

    seed: int = 0
    width: int = 1280
    height: int = 720
    fps: float = 30.0
    density: float = 1.0


@dataclass
class _Obj:
    track_id: int
    kind: str
    class_id: int
    x: float  # centre x, frame pixels
    y: float  # centre y
    w: float
    h: float
    vx: float
    vy: float
    color: tuple
    lane: int = -1
    phase: float = 0.0
    extra: dict = field(default_factory=dict)

    def box(self) -> tuple[float, float, float, float]:
        return (self.x - self.w / 2, self.y - self.h / 2, self.x + self.w / 2, self.y + self.h / 2)


def gt_path_for(video: str | Path) -> Path:
    """Return the ground-truth path that belongs to ``video`` (``<stem>.gt.csv`` beside it)."""
    video = Path(video)
    return video.with_name(video.stem + ".gt.csv")


class Scene:
    """Simulates and renders one scene frame by frame.

    ``step()`` advances the simulation by one frame; ``render()`` returns the BGR uint8 image and
    the ground-truth rows (list of dicts with the GT_HEADER keys except ``frame``).
    """

    def __init__(self, config: SceneConfig = SceneConfig(), *, warmup_frames: int | None = None):
        self.cfg = config
        self.rng = np.random.default_rng(config.seed)
        w, h = config.width, config.height
        self.W, self.H = w, h
        self.lane_h = (_ROAD[1] - _ROAD[0]) * h / _N_LANES
        self.speed_unit = w / 1280.0 * 30.0 / config.fps  # px per frame at 1280 px, 30 fps
        self.objects: list[_Obj] = []
        self.next_id = 1
        self.frame_index = 0
        self.background = self._make_background()
        self.occluders = self._make_occluders()
        self.tint = self.rng.uniform(0.85, 1.12)  # per-scene lighting
        # pre-roll so the first frame already has traffic
        n = int(self.rng.integers(150, 400)) if warmup_frames is None else warmup_frames
        for _ in range(n):
            self._simulate()
        self.next_id_at_start = self.next_id

    # ------------------------------------------------------------------ background
    def _make_background(self) -> np.ndarray:
        W, H, rng = self.W, self.H, self.rng
        img = np.empty((H, W, 3), np.uint8)
        grass = np.array([60, 120, 70]) * rng.uniform(0.8, 1.2, 3)
        side = np.array([175, 180, 185]) * rng.uniform(0.9, 1.05)
        road = np.array([80, 80, 84]) * rng.uniform(0.8, 1.2)

        def band(a, b, color):
            img[int(a * H):int(b * H)] = np.clip(color, 0, 255).astype(np.uint8)

        band(0, 1, grass)
        band(*_SIDEWALK_TOP, side)
        band(*_ROAD, road)
        band(*_SIDEWALK_BOTTOM, side)
        # texture: low-resolution noise, upsampled (cheap and looks like asphalt / grass)
        noise = rng.normal(0, 9, (H // 8 + 1, W // 8 + 1)).astype(np.float32)
        noise = cv2.resize(noise, (W, H), interpolation=cv2.INTER_LINEAR)
        noise += rng.normal(0, 4, (H, W)).astype(np.float32)
        img = np.clip(img.astype(np.float32) + noise[..., None], 0, 255).astype(np.uint8)
        # sidewalk slabs
        slab = max(8, int(0.045 * H))
        for (a, b) in (_SIDEWALK_TOP, _SIDEWALK_BOTTOM):
            y0, y1 = int(a * H), int(b * H)
            for x in range(0, W, slab * 2):
                cv2.line(img, (x, y0), (x, y1), (150, 150, 155), 1)
        # houses / hedges on the grass strips
        for y0, y1 in ((0, _SIDEWALK_TOP[0] * H), (_SIDEWALK_BOTTOM[1] * H, H)):
            x = int(rng.uniform(-50, 0))
            while x < W:
                bw = int(rng.uniform(0.08, 0.18) * W)
                color = tuple(int(c) for c in rng.integers(60, 200, 3))
                top = int(y0 + rng.uniform(0.05, 0.3) * (y1 - y0))
                bot = int(y1 - rng.uniform(0.1, 0.3) * (y1 - y0))
                if bot - top > 4:
                    cv2.rectangle(img, (x, top), (x + bw, bot), color, -1)
                    cv2.rectangle(img, (x, top), (x + bw, bot), (40, 40, 40), 2)
                x += bw + int(rng.uniform(0.02, 0.1) * W)
        # lane markings
        ry0 = _ROAD[0] * H
        thick = max(1, int(0.004 * H))
        dash, gap = int(0.035 * W), int(0.03 * W)
        for i in range(1, _N_LANES):
            y = int(ry0 + i * self.lane_h)
            if i == _N_LANES // 2:  # double yellow centre line
                cv2.line(img, (0, y - 2 * thick), (W, y - 2 * thick), (0, 200, 230), thick)
                cv2.line(img, (0, y + 2 * thick), (W, y + 2 * thick), (0, 200, 230), thick)
            else:
                for x in range(0, W, dash + gap):
                    cv2.line(img, (x, y), (x + dash, y), (230, 230, 230), thick)
        cv2.line(img, (0, int(ry0) + thick), (W, int(ry0) + thick), (220, 220, 220), thick)
        cv2.line(img, (0, int(_ROAD[1] * H) - thick), (W, int(_ROAD[1] * H) - thick), (220, 220, 220), thick)
        # zebra crossing
        cx = int(_CROSSWALK_X * W)
        half = int(0.035 * W)
        stripe = max(3, int(0.012 * H))
        for y in range(int(ry0) + stripe, int(_ROAD[1] * H) - stripe, 2 * stripe):
            cv2.rectangle(img, (cx - half, y), (cx + half, y + stripe), (225, 225, 225), -1)
        return img

    def _make_occluders(self) -> list[tuple]:
        """Static scenery drawn on top of everything: one tree canopy and two lamp posts."""
        W, H, rng = self.W, self.H, self.rng
        occ = []
        tx = rng.uniform(0.1, 0.45) * W
        r = rng.uniform(0.07, 0.1) * H
        occ.append(("tree", int(tx), int(_SIDEWALK_TOP[0] * H + r * 0.3), int(r)))
        for frac in (rng.uniform(0.25, 0.5), rng.uniform(0.7, 0.95)):
            occ.append(("post", int(frac * W), int(0.08 * H), int(_SIDEWALK_BOTTOM[1] * H), max(3, int(0.008 * W))))
        return occ

    # ------------------------------------------------------------------ simulation
    def _lane_y(self, lane: int) -> float:
        return _ROAD[0] * self.H + (lane + 0.5) * self.lane_h

    def _lane_scale(self, lane: int) -> float:
        return 0.82 + 0.06 * lane  # far lanes (top) smaller

    def _spawn_vehicle(self, lane: int) -> None:
        rng = self.rng
        kinds = list(_VEHICLE_KINDS)
        probs = np.array([_VEHICLE_KINDS[k][0] for k in kinds])
        kind = kinds[int(rng.choice(len(kinds), p=probs / probs.sum()))]
        _, (l0, l1), (w0, w1) = _VEHICLE_KINDS[kind]
        s = self._lane_scale(lane)
        length = rng.uniform(l0, l1) * self.lane_h * s
        width = rng.uniform(w0, w1) * self.lane_h * s
        direction = -1 if lane < _N_LANES // 2 else 1
        speed = rng.uniform(3.0, 8.5) * self.speed_unit * (0.8 if kind != "car" else 1.0)
        x = self.W + length / 2 + 2 if direction < 0 else -length / 2 - 2
        # do not spawn on top of the last vehicle of this lane
        for o in self.objects:
            if o.lane == lane and o.class_id == 0:
                gap = abs(o.x - x) - (o.w + length) / 2
                if gap < 0.6 * self.lane_h:
                    return
        if kind == "car":
            color = tuple(int(c) for c in rng.integers(20, 245, 3))
        elif kind == "truck":
            color = tuple(int(c) for c in rng.choice([[40, 40, 200], [200, 200, 200], [30, 120, 30], [20, 90, 160]]))
        else:
            color = tuple(int(c) for c in rng.choice([[0, 180, 240], [30, 30, 180], [200, 120, 20]]))
        y = self._lane_y(lane) + rng.uniform(-0.06, 0.06) * self.lane_h
        self.objects.append(_Obj(self.next_id, kind, 0, x, y, length, width, direction * speed, 0.0,
                                 color, lane=lane, extra={"v0": speed, "cab": tuple(int(c) for c in rng.integers(30, 230, 3))}))
        self.next_id += 1

    def _spawn_pedestrian(self) -> None:
        rng, W, H = self.rng, self.W, self.H
        s = rng.uniform(0.85, 1.2)
        pw, ph = 0.022 * W * s * 0.7, 0.062 * H * s * 1.05
        speed = rng.uniform(0.8, 2.2) * self.speed_unit
        route = rng.choice(3, p=[0.38, 0.38, 0.24])
        if route < 2:  # along a sidewalk
            band = _SIDEWALK_TOP if route == 0 else _SIDEWALK_BOTTOM
            y = rng.uniform(band[0] + 0.02, band[1] - 0.02) * H
            direction = rng.choice([-1, 1])
            x = -pw / 2 - 1 if direction > 0 else W + pw / 2 + 1
            vx, vy = direction * speed, 0.0
        else:  # across the road on the zebra crossing (enters and leaves from the sidewalks)
            x = (_CROSSWALK_X + rng.uniform(-0.025, 0.025)) * W
            direction = rng.choice([-1, 1])
            y = -ph / 2 - 1 if direction > 0 else H + ph / 2 + 1
            vx, vy = rng.uniform(-0.1, 0.1) * speed, direction * speed
        shirt = tuple(int(c) for c in rng.integers(20, 250, 3))
        pants = tuple(int(c) for c in rng.integers(10, 120, 3))
        skin = tuple(int(c) for c in rng.choice([[140, 180, 225], [90, 130, 180], [60, 90, 130], [170, 200, 235]]))
        self.objects.append(_Obj(self.next_id, "person", 1, x, y, pw, ph, vx, vy, shirt,
                                 phase=rng.uniform(0, 6.3), extra={"pants": pants, "skin": skin}))
        self.next_id += 1

    def _simulate(self) -> None:
        rng, d = self.rng, self.cfg.density
        for lane in range(_N_LANES):
            if rng.random() < 0.022 * d:
                self._spawn_vehicle(lane)
        if rng.random() < 0.03 * d:
            self._spawn_pedestrian()
        # car following: a vehicle never gets closer than a margin to the one ahead in its lane
        for lane in range(_N_LANES):
            cars = [o for o in self.objects if o.lane == lane and o.class_id == 0]
            direction = -1 if lane < _N_LANES // 2 else 1
            cars.sort(key=lambda o: -direction * o.x)  # leader first
            for ahead, car in zip(cars, cars[1:]):
                gap = abs(ahead.x - car.x) - (ahead.w + car.w) / 2
                v0 = car.extra["v0"]
                if gap < 1.0 * self.lane_h:
                    speed = min(v0, abs(ahead.vx) * (0.9 if gap < 0.6 * self.lane_h else 1.0))
                else:
                    speed = min(v0, abs(car.vx) + 0.08 * self.speed_unit)
                car.vx = direction * speed
        for o in self.objects:
            o.x += o.vx
            o.y += o.vy
            o.phase += 0.25 * (abs(o.vx) + abs(o.vy)) / max(self.speed_unit, 1e-6)
        margin = 2
        self.objects = [o for o in self.objects
                        if -o.w / 2 - margin - 1 <= o.x <= self.W + o.w / 2 + margin + 1
                        and -o.h / 2 - margin - 1 <= o.y <= self.H + o.h / 2 + margin + 1]
        self.frame_index += 1

    def step(self) -> None:
        """Advance the scene by one frame."""
        self._simulate()

    # ------------------------------------------------------------------ rendering
    def _draw_vehicle(self, img: np.ndarray, o: _Obj) -> None:
        x1, y1, x2, y2 = (int(round(v)) for v in o.box())
        L, Wd = x2 - x1, y2 - y1
        facing_right = o.vx >= 0
        shade = tuple(int(c * 0.6) for c in o.color)
        cv2.rectangle(img, (x1, y1), (x2 - 1, y2 - 1), o.color, -1)
        cv2.rectangle(img, (x1, y1), (x2 - 1, y2 - 1), shade, max(1, Wd // 20))
        if o.kind == "car":
            # windscreen and rear window, roof
            fw = int(0.18 * L)
            front = x2 - int(0.3 * L) if facing_right else x1 + int(0.12 * L)
            rear = x1 + int(0.1 * L) if facing_right else x2 - int(0.1 * L) - fw
            cv2.rectangle(img, (front, y1 + Wd // 7), (front + fw, y2 - Wd // 7), (60, 50, 40), -1)
            cv2.rectangle(img, (rear, y1 + Wd // 6), (rear + int(fw * 0.7), y2 - Wd // 6), (70, 60, 50), -1)
        elif o.kind == "truck":
            cab = int(0.24 * L)
            cx1 = x2 - cab if facing_right else x1
            cv2.rectangle(img, (cx1, y1 + 1), (cx1 + cab, y2 - 2), o.extra["cab"], -1)
            wx = cx1 + int(cab * (0.55 if facing_right else 0.15))
            cv2.rectangle(img, (wx, y1 + Wd // 6), (wx + cab // 3, y2 - Wd // 6), (60, 50, 40), -1)
            gap_x = cx1 - 2 if facing_right else cx1 + cab + 1
            cv2.line(img, (gap_x, y1), (gap_x, y2 - 1), (30, 30, 30), 2)
        else:  # bus: roof with a row of windows along both sides
            n = max(4, L // max(8, int(0.55 * Wd)))
            step = L / n
            for i in range(1, n - 1):
                wx = int(x1 + i * step)
                cv2.rectangle(img, (wx, y1 + 2), (wx + int(step * 0.6), y1 + max(3, Wd // 6)), (70, 60, 50), -1)
                cv2.rectangle(img, (wx, y2 - max(3, Wd // 6)), (wx + int(step * 0.6), y2 - 3), (70, 60, 50), -1)
            cv2.rectangle(img, (x1 + L // 3, y1 + Wd // 3), (x1 + 2 * L // 3, y2 - Wd // 3), shade, -1)
        # lights
        lx = x2 - 3 if facing_right else x1 + 1
        cv2.rectangle(img, (lx, y1 + 2), (lx + 2, y1 + max(4, Wd // 5)), (200, 240, 255), -1)
        cv2.rectangle(img, (lx, y2 - max(4, Wd // 5)), (lx + 2, y2 - 3), (200, 240, 255), -1)

    def _draw_pedestrian(self, img: np.ndarray, o: _Obj) -> None:
        x1, y1, x2, y2 = o.box()
        w, h = x2 - x1, y2 - y1
        cx = (x1 + x2) / 2
        head_r = max(2, int(0.12 * h))
        swing = np.sin(o.phase) * 0.28 * w
        hip_y = y1 + 0.58 * h
        legs = max(2, int(0.18 * w))
        cv2.line(img, (int(cx), int(hip_y)), (int(cx + swing), int(y2 - 2)), o.extra["pants"], legs)
        cv2.line(img, (int(cx), int(hip_y)), (int(cx - swing), int(y2 - 2)), o.extra["pants"], legs)
        cv2.ellipse(img, (int(cx), int(y1 + 0.42 * h)), (max(2, int(0.42 * w)), max(3, int(0.2 * h))), 0, 0, 360,
                    o.color, -1)
        cv2.line(img, (int(x1 + 0.1 * w), int(y1 + 0.3 * h)), (int(x1 + 0.05 * w - swing * 0.5), int(y1 + 0.6 * h)),
                 o.color, max(2, int(0.14 * w)))
        cv2.line(img, (int(x2 - 0.1 * w), int(y1 + 0.3 * h)), (int(x2 - 0.05 * w + swing * 0.5), int(y1 + 0.6 * h)),
                 o.color, max(2, int(0.14 * w)))
        cv2.circle(img, (int(cx), int(y1 + head_r + 1)), head_r, o.extra["skin"], -1)

    def _draw_occluders(self, img: np.ndarray, idbuf: np.ndarray | None) -> None:
        s = _ID_SCALE
        for occ in self.occluders:
            if occ[0] == "tree":
                _, x, y, r = occ
                cv2.circle(img, (x, y), r, (30, 95, 40), -1)
                cv2.circle(img, (x - r // 3, y - r // 4), int(r * 0.6), (40, 120, 50), -1)
                if idbuf is not None:
                    cv2.circle(idbuf, (x // s, y // s), r // s, -2, -1)
            else:
                _, x, y0, y1, t = occ
                cv2.rectangle(img, (x - t // 2, y0), (x + t // 2, y1), (70, 70, 75), -1)
                cv2.circle(img, (x, y0), t, (200, 230, 240), -1)
                if idbuf is not None:
                    idbuf[y0 // s:y1 // s + 1, max(0, (x - t // 2) // s):(x + t // 2) // s + 1] = -2

    def render(self) -> tuple[np.ndarray, list[dict]]:
        """Return (BGR uint8 frame, ground-truth rows) for the current simulation state."""
        img = self.background.copy()
        s = _ID_SCALE
        idbuf = np.full(((self.H + s - 1) // s, (self.W + s - 1) // s), -1, np.int32)
        order = sorted(self.objects, key=lambda o: (o.y + o.h / 2, o.track_id))  # far (top) first
        for i, o in enumerate(order):
            if o.class_id == 0:
                self._draw_vehicle(img, o)
            else:
                self._draw_pedestrian(img, o)
            x1, y1, x2, y2 = o.box()
            idbuf[max(0, int(round(y1 / s))):max(0, int(round(y2 / s))),
                  max(0, int(round(x1 / s))):max(0, int(round(x2 / s)))] = i
        self._draw_occluders(img, idbuf)
        if self.tint != 1.0:
            img = cv2.convertScaleAbs(img, alpha=self.tint)
        counts = np.bincount(idbuf[idbuf >= 0].ravel(), minlength=len(order))
        rows = []
        for i, o in enumerate(order):
            x1, y1, x2, y2 = o.box()
            full = max(1e-6, (x2 - x1) * (y2 - y1) / (s * s))
            vis = min(1.0, counts[i] / full)
            cx1, cy1 = max(0.0, x1), max(0.0, y1)
            cx2, cy2 = min(float(self.W), x2), min(float(self.H), y2)
            if vis < VISIBILITY_MIN or cx2 - cx1 < 4 or cy2 - cy1 < 4:
                continue
            rows.append({"track_id": o.track_id, "x1": round(cx1, 2), "y1": round(cy1, 2), "x2": round(cx2, 2),
                         "y2": round(cy2, 2), "class_id": o.class_id, "class_name": CLASS_NAMES[o.class_id],
                         "kind": o.kind, "visibility": round(float(vis), 3)})
        rows.sort(key=lambda r: r["track_id"])
        return img, rows


def generate_frames(config: SceneConfig, n_frames: int):
    """Yield ``(frame_index, bgr_image, gt_rows)`` for ``n_frames`` frames of the scene."""
    scene = Scene(config)
    for i in range(n_frames):
        img, rows = scene.render()
        yield i, img, rows
        scene.step()


def write_gt(rows_by_frame: list[tuple[int, list[dict]]], path: str | Path) -> Path:
    """Write ground-truth rows (``[(frame, rows), ...]``) to ``path`` as GT_HEADER CSV."""
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(GT_HEADER)
        for frame, rows in rows_by_frame:
            for r in rows:
                writer.writerow([frame] + [r[k] for k in GT_HEADER[1:]])
    return path


def read_gt(path: str | Path) -> dict[int, np.ndarray]:
    """Read a GT CSV into ``{frame: float64 array (K, 6) [x1, y1, x2, y2, class_id, track_id]}``."""
    path = Path(path)
    out: dict[int, list] = {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = set(GT_HEADER) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: not a ground-truth file (missing columns {sorted(missing)})")
        for r in reader:
            try:
                out.setdefault(int(r["frame"]), []).append([float(r["x1"]), float(r["y1"]), float(r["x2"]),
                                                            float(r["y2"]), int(r["class_id"]), int(r["track_id"])])
            except (TypeError, ValueError):  # a row cut short (None) or not numbers
                raise ValueError(f"{path}, line {reader.line_num}: truncated or malformed ground-truth row: "
                                 f"write the file again (or delete it)") from None
    if not out:  # a header alone would score every track as missed: no accuracy, rather than a false one
        raise ValueError(f"{path}: holds no ground-truth rows (a header only): write the file again (or delete it)")
    return {k: np.asarray(v, dtype=np.float64).reshape(-1, 6) for k, v in out.items()}


def make_video(out: str | Path, *, seconds: float = 5.0, config: SceneConfig = SceneConfig()) -> tuple[Path, Path]:
    """Render a scene to ``out`` (mp4v in .mp4) and its ground truth to ``<stem>.gt.csv``; returns both paths."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n_frames = max(1, int(round(seconds * config.fps)))
    fourcc = cv2.VideoWriter_fourcc(*("mp4v" if out.suffix.lower() in (".mp4", ".m4v", ".mov") else "MJPG"))
    # written under names of this process and renamed, the ground truth first: a reader that finds the
    # clip finds its ground truth, and two processes making the same clip never write into one file
    part = out.with_name(f".{out.stem}.{os.getpid()}.part{out.suffix}")  # OpenCV picks the container by suffix
    writer = cv2.VideoWriter(str(part), fourcc, config.fps, (config.width, config.height))
    if not writer.isOpened():
        try:  # a folder that cannot be written (permissions, a read-only disk) is no codec problem
            tempfile.TemporaryFile(dir=out.parent).close()
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(out)) from None
        raise RuntimeError(f"OpenCV cannot write {out} (try a .mp4 or .avi path)")
    gt, done = [], False
    try:
        for i, img, rows in generate_frames(config, n_frames):
            writer.write(img)
            gt.append((i, rows))
        writer.release()
        gt_part = gt_path_for(part)
        write_gt(gt, gt_part)
        os.replace(gt_part, gt_path_for(out))
        os.replace(part, out)
        done = True
    finally:
        writer.release()
        if not done:
            for left in (part, gt_path_for(part)):
                left.unlink(missing_ok=True)
    return out, gt_path_for(out)
