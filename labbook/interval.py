"""Notebook 06's computed parts: how many frames the detector really ran on (read from the
profile), and the accuracy floor chosen from the throughput-accuracy curve. The intervals swept
are ``settings().intervals``."""
from __future__ import annotations

import numpy as np
import pandas as pd

import labkit


def detected_frames(rep, *, warmup: int = 0) -> dict:
    """How many of the frames the detector ran on, from a profile's ``items`` marks
    (``labkit.stage_table``): ``frames`` (those ``track`` saw: every frame), ``detected`` (``infer`` items), ``share``
    (detected / frames), ``infer_calls`` and ``ms_per_detected`` (infer CPU ms per detected frame)."""
    st = labkit.stage_table(rep, warmup=warmup).set_index("stage")
    frames, detected = int(st.loc["track", "items"]), int(st.loc["infer", "items"])
    return {"frames": frames, "detected": detected, "share": detected / frames if frames else float("nan"),
            "infer_calls": int(st.loc["infer", "instances"]), "ms_per_detected": float(st.loc["infer", "cpu_ms_per_item"])}


def accuracy_floor(rows: pd.DataFrame, *, accuracy: str = "mota") -> pd.Series:
    """The knee of the throughput-accuracy curve: the row farthest from the straight line between
    the first and last points (both axes scaled to 0..1), i.e. where more speed starts to cost
    accuracy fastest. Its ``accuracy`` value is the floor; rows sorted by ``interval``.

    Args:
        rows: one row per interval with ``interval``, ``fps`` and ``accuracy`` columns.
    Returns: the knee row (``step``, ``interval``, ``fps``, the accuracy, ...).
    """
    r = rows.dropna(subset=["fps", accuracy]).sort_values("interval")
    if len(r) < 3:
        raise ValueError(f"{len(r)} interval(s) with fps and {accuracy}: the curve needs three or more to have a knee")
    x, y = r["fps"].to_numpy(float), r[accuracy].to_numpy(float)
    if np.ptp(y) == 0:  # accuracy never moved: no cost yet, the fastest point is the floor
        return r.iloc[int(np.argmax(x))]
    x = (x - x.min()) / (np.ptp(x) or 1.0)
    y = (y - y.min()) / (np.ptp(y) or 1.0)
    dx, dy = x[-1] - x[0], y[-1] - y[0]
    dist = np.abs(dx * (y - y[0]) - dy * (x - x[0])) / (np.hypot(dx, dy) or 1.0)
    return r.iloc[int(np.argmax(dist))]
