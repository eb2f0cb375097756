"""All ranks' summaries as one, from each rank's summary and a bounded sample of its durations.

A rank's worker sends back, per summary row, its durations' order statistics
(:func:`order_stats`: every duration, sorted, when there are at most :data:`POINTS`, else
:data:`POINTS` evenly spaced ones), never the frame. :func:`merge_summary` then gives the summary
of all ranks' instances together: instances, total, min and max exactly; mean and the sample
standard deviation exactly up to floating-point rounding (pooled from each rank's); the median
exactly when every rank sent all its durations of that row, else estimated from the ranks' order
statistics weighted by their instances (within one step of the coarsest rank's spacing).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["order_stats", "merge_summary", "POINTS"]

POINTS = 2049
"""Most durations a rank sends per summary row (bounds the client's memory: rows x ranks x POINTS)."""


def order_stats(df: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Per ``keys``: ``n`` (instances) and ``points`` (a sorted int64 array: all of ``value``, or
    POINTS order statistics spread evenly from the smallest to the largest)."""
    rows = []
    if len(df):
        for key, vals in df.groupby(keys, sort=False, observed=True, dropna=False)[value]:
            v = np.sort(vals.to_numpy(dtype=np.int64))
            if len(v) > POINTS:
                v = v[np.round(np.linspace(0, len(v) - 1, POINTS)).astype(np.int64)]
            key = key if isinstance(key, tuple) else (key,)
            rows.append({**{k: str(x) for k, x in zip(keys, key)}, "n": len(vals), "points": v})
    out = pd.DataFrame(rows, columns=[*keys, "n", "points"])
    return out.astype({k: object for k in keys})


def _median(parts: list[tuple[int, np.ndarray]]) -> float:
    """Median of all instances from each rank's (instances, order statistics)."""
    if all(n == len(p) for n, p in parts):  # every duration is here: exact, as pandas' median
        return float(np.median(np.concatenate([p for _, p in parts])))
    vals = np.concatenate([p for _, p in parts])
    weights = np.concatenate([np.full(len(p), n / len(p)) for n, p in parts])
    order = np.argsort(vals, kind="stable")
    cum = np.cumsum(weights[order])
    return float(vals[order][np.searchsorted(cum, cum[-1] / 2)])


def merge_summary(per_rank: pd.DataFrame, stats: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    """The summary of all ranks together, as the summary function would give over all instances.

    Args:
        per_rank: per-rank summaries with ``rank``, ``keys``, instances, total_ns, avg_ns, min_ns,
            max_ns, stddev_ns.
        stats: :func:`order_stats` of each rank with a ``rank`` column.
        keys: the summary's row keys; columns: the output columns, in order.
    Returns: one row per key, ``columns`` (time_pct recomputed), sorted by total_ns, descending.
    """
    if per_rank.empty:
        return per_rank.drop(columns="rank")[columns].reset_index(drop=True)
    s = per_rank.astype({k: object for k in keys})
    g = s.groupby(keys, sort=False, dropna=False)
    n, total = g["instances"].sum(), g["total_ns"].sum()
    mean = total / n
    # pooled sample variance: each rank's squared deviations about its mean, plus its mean's about the whole
    whole_mean = g["total_ns"].transform("sum") / g["instances"].transform("sum")
    sq = s["stddev_ns"] ** 2 * (s["instances"] - 1) + s["instances"] * (s["avg_ns"] - whole_mean) ** 2
    var = sq.groupby([s[k] for k in keys], sort=False, dropna=False).sum() / (n - 1).where(n > 1)
    var.index = n.index
    pts = {}
    for row in stats.astype({k: object for k in keys}).itertuples(index=False):
        key = tuple(getattr(row, k) for k in keys)
        pts.setdefault(key if len(keys) > 1 else key[0], []).append((row.n, row.points))
    out = pd.DataFrame({"instances": n.astype("int64"), "total_ns": total.astype("int64"), "avg_ns": mean,
                        "med_ns": [_median(pts[k]) for k in n.index],
                        "min_ns": g["min_ns"].min().astype("int64"), "max_ns": g["max_ns"].max().astype("int64"),
                        "stddev_ns": np.sqrt(var.clip(lower=0)).fillna(0.0)})
    out["time_pct"] = out["total_ns"] * 100.0 / out["total_ns"].sum() if out["total_ns"].sum() else 0.0
    out = out.reset_index()
    for k in keys:
        out[k] = out[k].astype(per_rank[k].dtype)
    return out.sort_values("total_ns", ascending=False, kind="stable", ignore_index=True)[columns]
