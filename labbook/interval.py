"""Notebook 06's computed parts: how many frames the detector really ran on (read from the
profile), and the accuracy floor chosen from the throughput-accuracy curve. The intervals swept
are ``settings().intervals``."""
from __future__ import annotations

import numpy as np
import pandas as pd

import labkit
from labbook.floor import FLOOR_ACCURACY, FLOOR_SLACK, within_floor  # noqa: F401 (their home is labbook.floor)


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
    Returns: the knee row (``step``, ``interval``, ``fps``, the accuracy, ...); its accuracy
        is at most K=1's (an interval above K=1 is within noise of it, and counts as K=1's).
    """
    r = rows.dropna(subset=["fps", accuracy]).sort_values("interval").copy()
    if len(r) < 3:
        raise ValueError(f"{len(r)} interval(s) with fps and {accuracy}: the curve needs three or more to have a knee")
    # Detecting less often cannot make tracking more accurate than detecting every frame: an
    # interval that scores above K=1 does so by noise, so its accuracy counts as K=1's, and the
    # floor is never above K=1's accuracy.
    r[accuracy] = r[accuracy].clip(upper=float(r[accuracy].iloc[0]))
    x, y = r["fps"].to_numpy(float), r[accuracy].to_numpy(float)
    if np.ptp(y) == 0:  # accuracy never moved: no cost yet, the fastest point is the floor
        return r.iloc[int(np.argmax(x))]
    x = (x - x.min()) / (np.ptp(x) or 1.0)
    y = (y - y.min()) / (np.ptp(y) or 1.0)
    dx, dy = x[-1] - x[0], y[-1] - y[0]
    dist = np.abs(dx * (y - y[0]) - dy * (x - x[0])) / (np.hypot(dx, dy) or 1.0)
    return r.iloc[int(np.argmax(dist))]


def base(mode: str | None = None) -> str:
    """The step the interval sweep builds on: the end of the lab's cumulative path
    (``batch<settings().batch>``), the same on every run, whichever alternative was fastest."""
    from labbook.settings import MODE, settings

    return f"batch{settings(mode or MODE).batch}"


def interval_rows(mode: str | None = None) -> pd.DataFrame:
    """The ledger's latest ok row of each interval (K=1: :func:`base`), with an ``interval``
    column, sorted by it."""
    from labbook.reference import ledger
    from labbook.settings import MODE, settings

    s = settings(mode or MODE)
    ks = sorted({*s.intervals, s.interval})
    rows = ledger([base(mode), *(f"interval{k}" for k in ks)])
    if len(rows) == 0 or "fps" not in rows:
        return rows
    ok = rows["status"].fillna("ok").eq("ok") if "status" in rows else True
    rows = rows[ok & rows["fps"].notna()].copy()
    cfg = rows["config.interval"] if "config.interval" in rows else pd.Series(1, index=rows.index)
    rows["interval"] = cfg.fillna(1).astype(int)
    return rows.sort_values("interval").reset_index(drop=True)


def floor(mode: str | None = None, *, accuracy: str = FLOOR_ACCURACY) -> float | None:
    """The accuracy floor notebook 06 sets (the knee of :func:`interval_rows`), recomputed from
    the ledger so that 07 and 08 read the same value after a kernel restart; None until 06 ran."""
    rows = interval_rows(mode)
    if len(rows) == 0 or accuracy not in rows:
        return None
    try:
        return float(accuracy_floor(rows, accuracy=accuracy)[accuracy])
    except ValueError:
        return None
