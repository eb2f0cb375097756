"""Compare two reports: the headline first (the measured runs' speed-up where a ledger has them, and the
wall and GPU time of each side's window: "B's profiled run was 1.45x shorter than A's"), then per NVTX range (with its domain), kernel, CUDA API call and GPU memory operation,
the counts and total times of each, and what changed (as HTA's TraceDiff or nsys's ``diff`` recipe).

    d = labkit.compare("before.nsys-rep", "after.nsys-rep")   # Reports or paths
    print(d.attrs["headline"])                               # B's profiled run was 1.45x shorter ...
    d.head(10)                                               # the biggest changes first
    labkit.plot_compare("before.nsys-rep", "after.nsys-rep") # a matplotlib Figure (or plot_compare(d))
    labkit.headline([a1, a2, a3], [b1, b2, b3])              # repeats a side: with a 95 % interval

Rows come from the summaries that equal ``nsys stats`` (:mod:`labkit.stats.summaries`), so each total is
the one nsys prints for that report. Sorted by how much each change moved the total: the absolute
time delta, descending. (``labkit.bench.tables.compare`` is a different thing: ledger rows, not reports.)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from labkit.safe_text import mathtext

__all__ = ["compare", "headline", "Headline", "plot_compare", "COMPARE_COLUMNS"]

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


def _side(x) -> list:
    """One side of a comparison: a Report or path, or a list/tuple of them (repeats), loaded."""
    items = list(x) if isinstance(x, (list, tuple)) else [x]
    if not items:
        from labkit.errors import LabkitError

        raise LabkitError("compare: a side with no report: give a report, or a list of repeats of one run")
    return [_as_report(i) for i in items]


def _restricted(reps: list, window, within) -> list:
    if window is None and within is None:
        return reps
    from labkit.report.window import restrict

    return [restrict(r, window=window, within=within) for r in reps]


def _mean_rows(reps: list) -> pd.DataFrame:
    """:func:`_rows` of one report, or the per-report mean of several (absent rows count 0)."""
    if len(reps) == 1:
        return _rows(reps[0])
    parts = [_rows(r) for r in reps]
    allr = pd.concat(parts, ignore_index=True)
    out = allr.groupby(["kind", "domain", "name"], sort=False, as_index=False)[["count", "total_ns"]].sum()
    out[["count", "total_ns"]] = out[["count", "total_ns"]] / len(reps)
    return out


def compare(a, b, *, window=None, within=None, measured=None) -> pd.DataFrame:
    """What changed from report ``a`` to report ``b``.

    Args:
        a, b: Reports, or paths that :func:`labkit.load_report` loads; or a list of them per side
            (repeats of one run: rows are per-report means, the headline has an interval).
        window, within: restrict both reports first (:func:`labkit.report.window.restrict`); ``within``
            must name a range both reports hold.
        measured: the measured runs' speed-up the headline leads with
            (:func:`labkit.bench.measured.measured_speedup`; False: the ledgers hold none, and the
            headline says so; None: the headline is the profiled wall time, and says so).
    Returns: one row per (kind, domain, name) present in either report, columns
        :data:`COMPARE_COLUMNS`: kind ("nvtx", "kernel", "cuda_api", "memory"), name, domain
        ('' outside NVTX), count_a/count_b (0 where absent), delta_count, total_a_ns/total_b_ns,
        delta_ns (b - a), delta_pct (of a's total; NaN where a had none); sorted by |delta_ns|
        descending, then kind and name. ``attrs``: ``a``, ``b`` (the reports' paths, joined by
        ", " for repeats) and ``headline`` (:func:`headline`: read it first).
    """
    ra, rb = _restricted(_side(a), window, within), _restricted(_side(b), window, within)
    x, y = _mean_rows(ra), _mean_rows(rb)
    m = x.merge(y, on=["kind", "domain", "name"], how="outer", suffixes=("_a", "_b"))
    whole = len(ra) == 1 and len(rb) == 1  # one report a side: counts and totals stay integers
    for c in ("count_a", "count_b", "total_ns_a", "total_ns_b"):
        m[c] = m[c].fillna(0).astype("int64" if whole else "float64")
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
    out.attrs.update(a=", ".join(str(r.path) for r in ra), b=", ".join(str(r.path) for r in rb),
                     headline=_headline(ra, rb, window, within, measured))
    return out


# ----------------------------------------------------------------------------- the headline
@dataclass(frozen=True)
class Headline:
    """Wall and GPU time of each side's window and their ratios; ``str()`` is the sentence.

    wall_*_ms / gpu_*_ms / copy_*_ms: per side, the mean over its reports of the window's wall time
    (first to last event, within the window or ranges asked for), the SMs' busy time (kernels, union
    over streams) and the copy engines' busy time. speedup = wall_a / wall_b (> 1: b is faster);
    gpu_speedup likewise for GPU time (None where a side ran no kernel). *_interval: a 95 %
    interval of the ratio of means when both sides have two reports or more (Welch t-interval,
    delta method on the log ratio), else None. n_a, n_b: reports per side; where: the window."""

    a: str
    b: str
    n_a: int
    n_b: int
    where: str
    wall_a_ms: float
    wall_b_ms: float
    speedup: float | None
    speedup_interval: tuple[float, float] | None
    gpu_a_ms: float
    gpu_b_ms: float
    gpu_speedup: float | None
    gpu_interval: tuple[float, float] | None
    copy_a_ms: float
    copy_b_ms: float
    sentence: str
    measured: dict | None = None
    """The measured runs' speed-up (:class:`labkit.stats.measured.Measured` as a dict) where a ledger
    beside the reports has a row for each; then the sentence leads with it."""

    def __str__(self) -> str:
        return self.sentence

    def as_dict(self) -> dict:
        """The fields as plain Python values (for JSON)."""
        return asdict(self)


def _window_times(rep) -> tuple[float, float, float]:
    """(wall_ms, sm_busy_ms, copy_busy_ms) of a report's window: first to last event of the report
    (clipped to the window's intervals where it was restricted), and the busy time of each engine."""
    from labkit.stats.idle import busy_in, engine_busy
    from labkit.stats.stages import trace_span

    lo, hi = trace_span(rep)
    spans = rep.meta.get("window") or [(lo, hi)]
    cut = [(max(int(s), lo), min(int(e), hi)) for s, e in spans]
    cut = [(s, e) for s, e in cut if e > s]
    wall = sum(e - s for s, e in cut)
    busy = []
    for engine in ("sm", "copy"):
        ms, me = engine_busy(rep, engine)
        busy.append(sum(busy_in(ms, me, s, e) for s, e in cut))
    return wall / 1e6, busy[0] / 1e6, busy[1] / 1e6


def _ratio(a: np.ndarray, b: np.ndarray) -> tuple[float | None, tuple[float, float] | None]:
    """Ratio of means a/b and its 95 % t-interval (delta method on log(mean a) - log(mean b), Welch
    degrees of freedom); no interval with fewer than two values a side or no spread."""
    ma, mb = float(np.mean(a)), float(np.mean(b))
    if ma <= 0 or mb <= 0:
        return None, None
    r = ma / mb
    if len(a) < 2 or len(b) < 2:
        return r, None
    from scipy import stats

    va, vb = np.var(a, ddof=1) / (len(a) * ma * ma), np.var(b, ddof=1) / (len(b) * mb * mb)
    se = float(np.sqrt(va + vb))
    if se == 0:
        return r, (r, r)
    df = se**4 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    h = float(stats.t.ppf(0.975, df)) * se
    return r, (r * float(np.exp(-h)), r * float(np.exp(h)))


def _words(name: str, r: float | None, iv, a_ms: float, b_ms: float, *, ratio: bool = True) -> str:
    """"wall 1,489.4 ms -> 1,027.2 ms: 1.45x faster (95 % interval 1.38x-1.52x)" (ratio a/b)."""
    if r is None:
        return f"{name} {a_ms:,.1f} ms -> {b_ms:,.1f} ms"
    how = (f": {r:.2f}x faster" if r >= 1 else f": {1 / r:.2f}x slower") if ratio else ""
    band = f" (95 % interval of a/b: {iv[0]:.2f}x-{iv[1]:.2f}x)" if iv else ""
    return f"{name} {a_ms:,.1f} ms -> {b_ms:,.1f} ms{how}{band}"


def _headline(ra: list, rb: list, window, within, measured=None) -> Headline:
    """``measured``: the measured runs' speed-up (:class:`labkit.bench.measured.Measured`) to lead with;
    False where the ledgers were looked at and hold none (the sentence says so); None: not looked at."""
    ta = np.array([_window_times(r) for r in ra])
    tb = np.array([_window_times(r) for r in rb])
    sp, spi = _ratio(ta[:, 0], tb[:, 0])
    gsp, gi = _ratio(ta[:, 1], tb[:, 1])
    where = (f"within the NVTX range {within!r}" if within is not None else
             f"in the window {window[0] / 1e6:,.3f}-{window[1] / 1e6:,.3f} ms" if window is not None else
             "over the whole trace of each report (first to last event)")
    reps = f" (means of {len(ra)} and {len(rb)} reports)" if len(ra) > 1 or len(rb) > 1 else ""
    runs = "runs were" if reps else "run was"
    if sp is None:
        lead = "B: no time to compare (a side's window holds no event)"
    else:
        lead = (f"B's profiled {runs} {sp:.2f}x shorter than A's" if sp >= 1 else
                f"B's profiled {runs} {1 / sp:.2f}x longer than A's")
        if spi and spi[0] <= 1 <= spi[1]:
            lead += ", within the noise of the repeats"
        lead += " (profiled wall time; no measured runs in the ledger)" if measured is False else \
            " (profiled wall time)"
    if measured:
        m = measured
        band = f", 95 % interval {m.interval[0]:.2f}x-{m.interval[1]:.2f}x" if m.interval else ""
        how = f"{m.speedup:.2f}x faster" if m.speedup >= 1 else f"{1 / m.speedup:.2f}x slower"
        lead = (f"B's measured runs were {how} than A's ({m.fps_a:,.1f} -> {m.fps_b:,.1f} fps{band}; steps "
                f"{m.step_a!r} -> {m.step_b!r} on {m.machine}, {Path(m.ledger).name}); " + lead)
    parts = [_words("wall", sp, spi, ta[:, 0].mean(), tb[:, 0].mean(), ratio=False)]
    if ta[:, 1].mean() > 0 or tb[:, 1].mean() > 0:
        parts.append(_words("GPU (SMs busy)", gsp, gi, ta[:, 1].mean(), tb[:, 1].mean()))
    sentence = f"{lead}: {'; '.join(parts)}; {where}{reps}."
    return Headline(a=", ".join(str(r.path) for r in ra), b=", ".join(str(r.path) for r in rb), n_a=len(ra),
                    n_b=len(rb), where=where, wall_a_ms=float(ta[:, 0].mean()), wall_b_ms=float(tb[:, 0].mean()),
                    speedup=sp, speedup_interval=spi, gpu_a_ms=float(ta[:, 1].mean()), gpu_b_ms=float(tb[:, 1].mean()),
                    gpu_speedup=gsp, gpu_interval=gi, copy_a_ms=float(ta[:, 2].mean()),
                    copy_b_ms=float(tb[:, 2].mean()), sentence=sentence,
                    measured=asdict(measured) if measured else None)


def headline(a, b, *, window=None, within=None, measured=None) -> Headline:
    """The headline of :func:`compare` alone: the measured runs' speed-up where given, and the wall
    and GPU time of each side's window ("B's profiled run was 1.45x shorter than A's"), with a 95 %
    interval when a side holds several reports (repeats).

    Args: as :func:`compare` (a Report or path per side, or a list of them; ``measured``).
    Returns: a :class:`Headline` (``str()``: the sentence; ``as_dict()``: its fields).
    """
    ra, rb = _restricted(_side(a), window, within), _restricted(_side(b), window, within)
    return _headline(ra, rb, window, within, measured)


def plot_compare(a, b=None, *, top: int = 15, title: str | None = None, window=None, within=None):
    """Horizontal bars of the ``top`` biggest changes (ms, b - a), one colour per kind, longer bars
    first, under the headline; returns a matplotlib Figure (no pyplot state).

    Args:
        a, b: two reports (Reports or paths, or a list of repeats per side), compared with
            :func:`compare` (``window``/``within`` go to it); or ``a`` alone: a frame :func:`compare`
            returned.
    """
    if isinstance(a, pd.DataFrame) and b is None:
        diff = a
    elif b is None:
        from labkit.errors import LabkitError

        raise LabkitError("plot_compare takes two reports (a, b), or the frame labkit.compare(a, b) returned")
    else:
        diff = compare(a, b, window=window, within=within)
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
    name_a, name_b = (diff.attrs.get(k, k).rsplit("/", 1)[-1] for k in ("a", "b"))
    head = diff.attrs.get("headline")
    default = f"What changed: {name_a} -> {name_b}" + (f"\n{head.sentence.split(':')[0]}" if head else "")
    ax.set_title(title or default, fontsize=10)
    return fig
