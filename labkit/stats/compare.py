"""Compare two reports: per NVTX range (with its domain), kernel, CUDA API call and GPU memory
operation, the counts and total times of each, and what changed (as HTA's TraceDiff or nsys's
``diff`` recipe).

    d = labkit.compare("before.nsys-rep", "after.nsys-rep")   # Reports or paths
    d.head(10)                                               # the biggest changes first
    labkit.plot_compare(d)                                   # a matplotlib Figure

Rows come from the summaries that equal ``nsys stats`` (:mod:`labkit.stats.summaries`), so each total is
the one nsys prints for that report. Sorted by how much each change moved the total: the absolute
time delta, descending. (``labkit.bench.tables.compare`` is a different thing: ledger rows, not reports.)
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.safe_text import mathtext

__all__ = ["compare", "plot_compare", "COMPARE_COLUMNS"]

COMPARE_COLUMNS = ["kind", "name", "domain", "count_a", "count_b", "delta_count", "total_a_ns", "total_b_ns",
                   "delta_ns", "delta_pct"]
_KINDS = ("nvtx", "kernel", "cuda_api", "memory")


def _as_report(x):
    from labkit.report.load import Report, load_report

    return x if isinstance(x, Report) else load_report(x)


def _rows(rep) -> pd.DataFrame:
    from labkit.stats import summaries as s

    parts = []
    nv = s.nvtx_summary(rep)
    parts.append(pd.DataFrame({"kind": "nvtx", "name": nv["name"].astype(object), "domain": nv["domain"].astype(object),
                               "count": nv["instances"], "total_ns": nv["total_ns"]}))
    for kind, df in (("kernel", s.kernel_summary(rep)), ("cuda_api", s.cuda_api_summary(rep)),
                     ("memory", s.memcpy_summary(rep))):
        parts.append(pd.DataFrame({"kind": kind, "name": df["name"].astype(object), "domain": "",
                                   "count": df["instances"], "total_ns": df["total_ns"]}))
    out = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else \
        pd.DataFrame({"kind": [], "name": [], "domain": [], "count": [], "total_ns": []})
    # an NVTX name may repeat with another style (PushPop and StartEnd): one row per (kind, domain, name)
    return out.groupby(["kind", "domain", "name"], sort=False, as_index=False)[["count", "total_ns"]].sum()


def compare(a, b, *, window=None, within=None) -> pd.DataFrame:
    """What changed from report ``a`` to report ``b``.

    Args:
        a, b: Reports, or paths that :func:`labkit.load_report` loads.
        window, within: restrict both reports first (:func:`labkit.report.window.restrict`); ``within``
            must name a range both reports hold.
    Returns: one row per (kind, domain, name) present in either report, columns
        :data:`COMPARE_COLUMNS`: kind ("nvtx", "kernel", "cuda_api", "memory"), name, domain
        ('' outside NVTX), count_a/count_b (0 where absent), delta_count, total_a_ns/total_b_ns,
        delta_ns (b - a), delta_pct (of a's total; NaN where a had none); sorted by |delta_ns|
        descending, then kind and name. ``attrs`` name the two reports.
    """
    from labkit.report.window import restrict

    ra, rb = _as_report(a), _as_report(b)
    if window is not None or within is not None:
        ra, rb = restrict(ra, window=window, within=within), restrict(rb, window=window, within=within)
    x, y = _rows(ra), _rows(rb)
    m = x.merge(y, on=["kind", "domain", "name"], how="outer", suffixes=("_a", "_b"))
    for c in ("count_a", "count_b", "total_ns_a", "total_ns_b"):
        m[c] = m[c].fillna(0).astype("int64")
    out = pd.DataFrame({
        "kind": m["kind"], "name": m["name"], "domain": m["domain"], "count_a": m["count_a"], "count_b": m["count_b"],
        "delta_count": m["count_b"] - m["count_a"], "total_a_ns": m["total_ns_a"], "total_b_ns": m["total_ns_b"],
        "delta_ns": m["total_ns_b"] - m["total_ns_a"],
    })
    ta = out["total_a_ns"].to_numpy(dtype=float)
    out["delta_pct"] = np.where(ta > 0, out["delta_ns"] * 100.0 / np.where(ta > 0, ta, 1), np.nan)
    out = out.assign(_abs=out["delta_ns"].abs(), _k=out["kind"].map({k: i for i, k in enumerate(_KINDS)}))
    out = out.sort_values(["_abs", "_k", "name"], ascending=[False, True, True], kind="stable", ignore_index=True)
    out = out[COMPARE_COLUMNS]
    out.attrs.update(a=str(ra.path), b=str(rb.path))
    return out


def plot_compare(diff: pd.DataFrame, *, top: int = 15, title: str | None = None):
    """Horizontal bars of the ``top`` biggest changes of :func:`compare` (ms, b - a), one colour per
    kind, longer bars first; returns a matplotlib Figure (no pyplot state)."""
    from matplotlib.figure import Figure

    d = diff.head(top).iloc[::-1]
    colors = {"nvtx": "#4c72b0", "kernel": "#dd8452", "cuda_api": "#55a868", "memory": "#8172b3"}
    fig = Figure(figsize=(8.0, max(2.5, 0.35 * len(d) + 1.2)), layout="constrained")
    ax = fig.subplots()
    labels = [f"{k}: {dom + ':' if dom else ''}{n}" for k, dom, n in zip(d["kind"], d["domain"], d["name"])]
    labels = [mathtext(lab if len(lab) <= 60 else lab[:57] + "...") for lab in labels]  # data, not mathtext
    ax.barh(range(len(d)), d["delta_ns"] / 1e6, color=[colors.get(k, "0.5") for k in d["kind"]])
    ax.set_yticks(range(len(d)), labels, fontsize=8)
    ax.axvline(0, color="0.3", lw=1)
    ax.set_xlabel("change in total time, b - a (ms)")
    for k, c in colors.items():
        if (d["kind"] == k).any():
            ax.barh([], [], color=c, label=k)
    if len(d):
        ax.legend(fontsize=8, loc="best")
    a, b = diff.attrs.get("a", "a"), diff.attrs.get("b", "b")
    ax.set_title(title or mathtext(f"What changed: {a.rsplit('/', 1)[-1]} -> {b.rsplit('/', 1)[-1]}"), fontsize=10)
    return fig
