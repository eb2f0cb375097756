"""Many per-rank reports of one distributed run (torchrun, srun, mpirun) as one set of frames.

``load_reports`` runs each report's loading and summaries as one task, in this process or on a
Dask cluster (:mod:`labkit.ranks.cluster`: a local one, or a running scheduler as nsys's recipes
use), and only the per-report results travel back: the summaries, and a bounded sample of each
summary row's durations for merging (:mod:`labkit.ranks.merge`). :class:`Reports` keeps them with a
``rank`` column: per-rank and merged summaries, the imbalance and the stragglers per stage, all
without any frame in the client. Frames, when asked for, are read one rank at a time
(:meth:`Reports.frame`, :meth:`Reports.frames`), from the columnar cache the workers filled; and
a timeline with one band per rank (:func:`plot_rank_timeline`). :func:`labkit.ranks.profile.profile_ranks`
makes such reports.

This module uses only the public report API (``load_report``, ``Report.from_frames``, the three
summaries in :func:`_summaries`), so the report layer can change underneath it.
"""
from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from labkit.errors import LabkitError
from labkit.ranks.cluster import run_tasks
from labkit.ranks.merge import merge_summary, order_stats
from labkit.report.load import Report, load_report
from labkit.stats.stages import stage_table
from labkit.stats.summaries import kernel_summary, nvtx_summary

__all__ = ["load_reports", "plot_rank_timeline", "Reports", "RanksError", "rank_from_name", "FRAMES"]

FRAMES = ("nvtx", "kernels", "memcpy", "memset", "cuda_api")
"""Event frames a Report has; ``load_reports(frames=...)`` makes a subset of them available per rank."""
_MERGED = {"nvtx_summary": (["domain", "name", "style"], "nvtx"), "kernel_summary": (["name"], "kernels")}
_SUMMARIES = ("stage_table", "nvtx_summary", "kernel_summary")
# "run_3", "run-3", "run.rank3", "run_rank_3" (nsys's %q{RANK} after a separator); not "x.nsys2022.4"
_RANK_NAME = re.compile(r"(?:[_-]|rank[_-]?)(\d+)$", re.IGNORECASE)
_ENV_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")  # launchers' rank variables


class RanksError(LabkitError):
    """Per-rank reports that cannot be put together (unknown or repeated ranks, none given)."""


def rank_from_name(path) -> int | None:
    """Rank written at the end of a report's file name (``run_3.sqlite``, ``run.rank3.nsys-rep``), or None."""
    stem = Path(path).name
    for suffix in (".sqlite", ".nsys-rep", ".qdrep"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    m = _RANK_NAME.search(stem)
    return int(m.group(1)) if m else None


def _rank_from_env(db_path: Path) -> int | None:
    """Rank of the profiled process from the export's recorded environment (nsys 2025.3 records it,
    2022.4 does not): torchrun's RANK, else Open MPI's, PMI's or Slurm's; None when absent."""
    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:ENVIRONMENT_VARIABLE' "
                               "AND (value GLOB '*RANK=*' OR value GLOB 'SLURM_PROCID=*')").fetchall()
        finally:
            con.close()
    except sqlite3.Error:  # 2022.4 exports have no META_DATA_CAPTURE: no environment to read
        return None
    env = dict(m.groups() for (v,) in rows if (m := re.fullmatch(r'(\w+)="?(\d+)"?', v)))
    found = [env[k] for k in _ENV_RANK_VARS if k in env]
    return int(found[0]) if found else None


def _summaries(rep) -> dict[str, pd.DataFrame]:
    """The per-report summaries kept for each rank (the only calls into the report layer's analyses)."""
    return {"stage_table": stage_table(rep), "nvtx_summary": nvtx_summary(rep),
            "kernel_summary": kernel_summary(rep)}


def _durations(rep, summary: str) -> pd.DataFrame:
    """The durations behind a summary's rows, with its keys (as nvtx_summary / kernel_summary group them)."""
    if summary == "nvtx_summary":
        r = rep.nvtx[rep.nvtx["kind"] != "mark"]
        style = np.where(r["kind"].to_numpy() == "start_end", "StartEnd", "PushPop")
        return pd.DataFrame({"domain": r["domain"].to_numpy(), "name": r["name"].to_numpy(), "style": style,
                             "duration_ns": r["duration_ns"].to_numpy()})
    k, graphs = rep.kernels, rep.graphs
    df = pd.DataFrame({"name": np.asarray(k["demangled"], dtype=object), "duration_ns": k["duration_ns"].to_numpy()})
    return pd.concat([df, graphs[["name", "duration_ns"]]], ignore_index=True) if len(graphs) else df


def _load_one(path: str, frames: tuple[str, ...] = ()) -> dict:
    """One report's task: its summaries, their durations' order statistics, meta and notes (small,
    plain data: this is all that travels back). The frames asked for are read too, so a damaged
    one fails here and the columnar cache holds them for :meth:`Reports.frame`."""
    rep = load_report(path)
    for f in frames:
        getattr(rep, f)
    db = Path(path) if Path(path).suffix == ".sqlite" else Path(path).with_suffix(".sqlite")
    meta = {k: rep.meta.get(k) for k in ("nsys_version", "capture_epoch_ns", "command", "duration_ns")}
    meta["env_rank"] = _rank_from_env(db) if db.exists() else None
    stats = {s: order_stats(_durations(rep, s), keys, "duration_ns") for s, (keys, _) in _MERGED.items()}
    return {"summaries": _summaries(rep), "order_stats": stats, "meta": meta, "notes": list(rep.notes)}


def _with_rank(parts: list[pd.DataFrame], ranks: list[int]) -> pd.DataFrame:
    """Concatenate per-rank frames, adding ``rank`` as the first column."""
    tagged = [p.assign(rank=np.int64(r))[["rank", *p.columns]] for p, r in zip(parts, ranks)]
    nonempty = [t for t in tagged if len(t)]
    return pd.concat(nonempty or tagged[:1], ignore_index=True)


def _assign_ranks(paths: list[Path], env_ranks: list[int | None]) -> list[int]:
    """Rank of each report: its file name, else its recorded environment, else its position."""
    found = [rank_from_name(p) if rank_from_name(p) is not None else e for p, e in zip(paths, env_ranks)]
    if all(r is None for r in found):
        return list(range(len(paths)))
    if any(r is None for r in found):
        missing = paths[found.index(None)]
        raise RanksError(f"no rank in the name or environment of {missing}, while other reports have one: name "
                         f"every report NAME_<rank> (nsys -o NAME_%q{{RANK}}) or pass ranks=[...]")
    seen: dict[int, Path] = {}
    for p, r in zip(paths, found):
        if r in seen:
            raise RanksError(f"rank {r} twice: {seen[r]} and {p} (two runs mixed?): load one run's reports, "
                             f"or pass ranks=[...]")
        seen[r] = p
    return found


def _merge_stages(st: pd.DataFrame) -> pd.DataFrame:
    """Per-rank stage tables (with ``rank``) summed into one; see :meth:`Reports.stage_table`."""
    wall_ms = (st["cpu_ms"] / st["wall_share"]).groupby(st["rank"]).max()
    g = st.groupby(["stage", "domain"] if "domain" in st.columns else "stage", sort=False)  # domains apart
    out = g[["instances", "items", "cpu_ms", "blocked_ms", "latency_ms", "gpu_ms", "threads"]].sum()
    out["ranks"] = g["rank"].nunique()
    out["cpu_ms_per_instance"] = out["cpu_ms"] / out["instances"]
    per = out["items"].where(out["items"] > 0)
    out["cpu_ms_per_item"] = out["cpu_ms"] / per
    out["gpu_ms_per_item"] = out["gpu_ms"] / per
    out["wall_share"] = out["cpu_ms"] / wall_ms.sum() if wall_ms.sum() else np.nan
    cols = [c for c in st.columns if c != "rank"] + ["ranks"]
    return out.reset_index().sort_values("cpu_ms", ascending=False, ignore_index=True)[cols]


@dataclass(eq=False)
class Reports:
    """Per-rank reports of one run, as their per-rank results: summaries, not frames. Frames are on
    each report's own clock (ns); ``offsets_ns`` puts them on a common one (capture start of each
    rank after the earliest).

    ``ranks``: sorted ranks; ``paths``: rank -> report; ``meta``: one row per rank (rank, path,
    nsys_version, capture_epoch_ns, offset_ns, duration_ns, command); ``notes``: what reports lack
    (a CPU run has no CUDA tables), prefixed with the rank; ``kept``: the frames asked for
    (``load_reports(frames=...)``), read one rank at a time by :meth:`frame` and :meth:`frames`.
    """

    ranks: list[int]
    paths: dict[int, Path]
    meta: pd.DataFrame
    kept: tuple[str, ...]
    _summaries: dict[str, pd.DataFrame] = field(repr=False)
    _order_stats: dict[str, pd.DataFrame] = field(repr=False)
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Reports(ranks={self.ranks}, frames={sorted(self.kept)})"

    def __len__(self) -> int:
        return len(self.ranks)

    @property
    def offsets_ns(self) -> pd.Series:
        """ns to add to a rank's times to put it on the earliest rank's clock (index: rank)."""
        return self.meta.set_index("rank")["offset_ns"]

    def _check(self, name: str) -> None:
        if name not in self.kept:
            kept = ", ".join(sorted(self.kept)) or "none"
            raise RanksError(f"frame {name!r} was not kept (kept: {kept}): pass frames=(..., {name!r}) to "
                             f"load_reports")

    def _rank_frame(self, name: str, rank: int) -> pd.DataFrame:
        if rank not in self.paths:
            raise RanksError(f"no rank {rank} here (ranks: {self.ranks})")
        return getattr(load_report(self.paths[rank]), name)  # the columnar cache makes this a Parquet read

    def frame(self, name: str, rank: int | None = None) -> pd.DataFrame:
        """Event frame ``name`` with a leading ``rank`` column: of one ``rank``, read now from its report
        (through the columnar cache); or, ``rank=None``, of every rank, read one after another and joined
        (fine for a few ranks; for many, walk :meth:`frames` instead). Raises RanksError for a frame
        not asked for in ``load_reports(frames=...)``."""
        self._check(name)
        ranks = self.ranks if rank is None else [rank]
        return _with_rank([self._rank_frame(name, r) for r in ranks], ranks)

    def frames(self, name: str) -> Iterator[tuple[int, pd.DataFrame]]:
        """``(rank, frame)`` for every rank in turn, each read when asked for: one rank's frame in memory
        at a time (the frame without a ``rank`` column, as the Report's)."""
        self._check(name)
        for r in self.ranks:
            yield r, self._rank_frame(name, r)

    def nvtx(self) -> pd.DataFrame:
        """NVTX ranges and marks of every rank: ``rank`` + the Report's nvtx columns."""
        return self.frame("nvtx")

    def kernels(self) -> pd.DataFrame:
        """Kernels of every rank: ``rank`` + the Report's kernel columns."""
        return self.frame("kernels")

    def memcpy(self) -> pd.DataFrame:
        """Memory copies of every rank: ``rank`` + the Report's memcpy columns."""
        return self.frame("memcpy")

    def memset(self) -> pd.DataFrame:
        """Memsets of every rank: ``rank`` + the Report's memset columns."""
        return self.frame("memset")

    def cuda_api(self) -> pd.DataFrame:
        """CUDA API calls of every rank (kept only with ``frames=(..., "cuda_api")``)."""
        return self.frame("cuda_api")

    def stage_table(self, *, merged: bool = False) -> pd.DataFrame:
        """Stage table (see :func:`labkit.stats.stages.stage_table`) per rank: ``rank`` + stage, instances,
        items, cpu_ms, ...; or, ``merged``, all ranks as one: instances, items, cpu_ms, gpu_ms and
        threads summed over the ranks, per-instance and per-item ms recomputed, wall_share = cpu_ms
        over the ranks' wall spans summed, and ``ranks`` (how many ranks ran the stage)."""
        st = self._summaries["stage_table"]
        return _merge_stages(st) if merged else st

    def _summary(self, summary: str, merged: bool) -> pd.DataFrame:
        per = self._summaries[summary]
        if not merged:
            return per
        keys = _MERGED[summary][0]
        return merge_summary(per, self._order_stats[summary], keys, [c for c in per.columns if c != "rank"])

    def nvtx_summary(self, *, merged: bool = False) -> pd.DataFrame:
        """NVTX ranges as ``nsys stats -r nvtx_sum``: per rank (``rank`` column) or, ``merged``, all
        ranks' instances together (one row per domain/name/style; from the per-rank results, no frames:
        see :mod:`labkit.ranks.merge` for which columns are exact)."""
        return self._summary("nvtx_summary", merged)

    def kernel_summary(self, *, merged: bool = False) -> pd.DataFrame:
        """Kernels as ``cuda_gpu_kern_sum``: per rank (``rank`` column) or, ``merged``, all ranks'
        instances together (from the per-rank results, as :meth:`nvtx_summary`)."""
        return self._summary("kernel_summary", merged)

    def imbalance(self, *, metric: str = "cpu_ms") -> pd.DataFrame:
        """Per stage, the slowest rank against the fastest, by ``metric`` of the stage table.

        Returns: stage, ranks (ranks that ran it), fastest_rank, fastest_ms, slowest_rank,
        slowest_ms, spread_ms (slowest - fastest), ratio (slowest / fastest; inf when the fastest
        is 0), mean_ms; sorted by spread, descending. A rank without the stage is not counted.
        """
        st = self.stage_table()[["rank", "stage", metric]].dropna(subset=[metric])
        cols = ["stage", "ranks", "fastest_rank", "fastest_ms", "slowest_rank", "slowest_ms", "spread_ms",
                "ratio", "mean_ms"]
        if st.empty:
            return pd.DataFrame({c: pd.Series(dtype=object if c == "stage" else "float64") for c in cols})
        st = st.sort_values(["stage", metric, "rank"], kind="stable")
        g = st.groupby(["stage", "domain"] if "domain" in st.columns else "stage", sort=False)  # domains apart
        lo, hi = g.head(1).set_index("stage"), st.loc[g[metric].idxmax()].set_index("stage")
        out = pd.DataFrame({"ranks": g.size(), "fastest_rank": lo["rank"], "fastest_ms": lo[metric],
                            "slowest_rank": hi["rank"], "slowest_ms": hi[metric], "mean_ms": g[metric].mean()})
        out["spread_ms"] = out["slowest_ms"] - out["fastest_ms"]
        with np.errstate(divide="ignore", invalid="ignore"):
            out["ratio"] = np.where(out["fastest_ms"] > 0, out["slowest_ms"] / out["fastest_ms"],
                                    np.where(out["slowest_ms"] > 0, np.inf, 1.0))
        out = out.reset_index().sort_values(["spread_ms", "stage"], ascending=[False, True], ignore_index=True)
        return out[cols]

    def stragglers(self, *, top: int = 3, metric: str = "cpu_ms") -> pd.DataFrame:
        """The slowest ranks per stage (as nsys's ``nccl_straggler`` and HTA name them), by ``metric``.

        Returns: stage, place (1 = slowest), rank, ``metric``, median_ms (of the ranks that ran the
        stage), over_median_ms, ratio (to the median; inf when the median is 0); ``top`` rows per
        stage at most, stages by their slowest rank's lead over the median, descending.
        """
        st = self.stage_table()[["rank", "stage", metric]].dropna(subset=[metric])
        cols = ["stage", "place", "rank", metric, "median_ms", "over_median_ms", "ratio"]
        if st.empty:
            return pd.DataFrame({c: pd.Series(dtype=object if c == "stage" else "float64") for c in cols})
        st = st.assign(median_ms=st.groupby("stage")[metric].transform("median"))
        st = st.sort_values(["stage", metric, "rank"], ascending=[True, False, True], kind="stable")
        st["place"] = st.groupby("stage").cumcount() + 1
        out = st[st["place"] <= top].copy()
        out["over_median_ms"] = out[metric] - out["median_ms"]
        with np.errstate(divide="ignore", invalid="ignore"):
            out["ratio"] = np.where(out["median_ms"] > 0, out[metric] / out["median_ms"],
                                    np.where(out[metric] > 0, np.inf, 1.0))
        lead = out[out["place"] == 1].set_index("stage")["over_median_ms"]
        out["lead"] = out["stage"].map(lead)
        out = out.sort_values(["lead", "stage", "place"], ascending=[False, True, True], ignore_index=True)
        return out[cols]

    def report(self, rank: int, *, aligned: bool = False):
        """One rank as a :class:`labkit.report.Report` over the kept frames, read now (``aligned``:
        times shifted onto the earliest rank's clock, so ranks can be drawn on one axis)."""
        if rank not in self.paths:
            raise RanksError(f"no rank {rank} here (ranks: {self.ranks})")
        shift = int(self.offsets_ns[rank]) if aligned else 0
        parts = {}
        for name in self.kept:
            part = self._rank_frame(name, rank).reset_index(drop=True)
            if shift:
                part = part.assign(start_ns=part["start_ns"] + shift, end_ns=part["end_ns"] + shift)
            parts[name] = part
        return Report.from_frames(**parts, path=self.paths[rank], meta={"rank": rank})


def load_reports(paths, *, scheduler=None, frames: Sequence[str] = (),
                 ranks: Sequence[int] | None = None) -> Reports:
    """Load per-rank reports (``.sqlite`` or ``.nsys-rep``) of one run: each report's loading and
    summaries is one task, run where ``scheduler`` says; only the per-report results come back.

    Args:
        paths: the reports; a folder or glob pattern is not expanded (pass ``sorted(glob(...))``).
        scheduler: None (``$DASK_SCHEDULER_ADDRESS`` when set, else this process, one report after
            another), ``"serial"``, ``"local"`` (a Dask LocalCluster of worker processes, one per
            core), a running scheduler's address (``"tcp://HOST:PORT"``), a scheduler file, or a
            ``distributed.Client``; see :mod:`labkit.ranks.cluster`. Workers must see the paths.
        frames: event frames (of :data:`FRAMES`) to make available per rank (:meth:`Reports.frame`);
            the workers read them once (into the columnar cache). None travel back.
        ranks: the rank of each path; default: from the file name (``NAME_<rank>``, nsys's
            ``%q{RANK}``), else the ``RANK`` in the export's recorded environment, else position.
    Returns: :class:`Reports`; each report's notes are kept in ``notes``, prefixed with its rank.
        The client holds the summaries only: memory grows with ranks x summary rows, not events.
    Raises: RanksError (no paths, unknown or repeated ranks), ClusterError (a scheduler that cannot
        be used), ReportError (a report that cannot be read).
    """
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    if not paths:
        raise RanksError("no reports given: pass the per-rank files, e.g. sorted(Path('reports/profiles')"
                         ".glob('run_*.sqlite'))")
    frames = tuple(frames)
    bad = [f for f in frames if f not in FRAMES]
    if bad:
        raise RanksError(f"unknown frame {bad[0]!r}: choose from {', '.join(FRAMES)}")
    if ranks is not None and (len(ranks) != len(paths) or len(set(ranks)) != len(ranks)):
        raise RanksError(f"ranks= must give one distinct rank per path ({len(paths)} paths, ranks {list(ranks)})")
    # absolute before they leave: a worker's working folder is not this process's
    loaded = run_tasks(_load_one, [str(p.absolute()) for p in paths], scheduler=scheduler, frames=frames)
    got = list(ranks) if ranks is not None else _assign_ranks(paths, [d["meta"]["env_rank"] for d in loaded])
    order = np.argsort(got, kind="stable")
    got, paths, loaded = [got[i] for i in order], [paths[i] for i in order], [loaded[i] for i in order]
    notes = [f"rank {r}: {n}" for r, d in zip(got, loaded) for n in d["notes"]]
    meta = pd.DataFrame([{"rank": r, "path": str(p), **{k: v for k, v in d["meta"].items() if k != "env_rank"}}
                         for r, p, d in zip(got, paths, loaded)])
    epoch = pd.to_numeric(meta["capture_epoch_ns"], errors="coerce")
    meta.insert(4, "offset_ns", (epoch - epoch.min()).fillna(0).astype("int64"))
    summaries = {s: _with_rank([d["summaries"][s] for d in loaded], got) for s in _SUMMARIES}
    stats = {s: _with_rank([d["order_stats"][s] for d in loaded], got) for s in _MERGED}
    return Reports(ranks=got, paths=dict(zip(got, paths)), meta=meta, kept=frames, _summaries=summaries,
                   _order_stats=stats, notes=notes)


def plot_rank_timeline(reports: Reports, *, ranks: Sequence[int] | None = None, window=None,
                       max_depth: int = 2, labels: bool = True, figsize=None):
    """Timeline with one band per rank on a common clock: each band is :func:`labkit.show.timeline.plot_timeline`
    of that rank (threads with NVTX ranges by depth, GPU streams), ranks aligned by capture start.

    Args:
        ranks: ranks to draw (default: all; each band takes about 0.3 s to draw here, so for tens
            of ranks pick the slowest and fastest ones from :meth:`Reports.imbalance`).
        window: (start_ns, end_ns) on the earliest rank's clock, or None for everything.
        max_depth: deepest NVTX nesting level drawn in each band (as :func:`plot_timeline`).
    Returns: the matplotlib Figure (one Axes per rank, shared x axis in ms from the window start).
    """
    from matplotlib.figure import Figure

    from labkit.show.timeline import plot_timeline

    ranks = list(reports.ranks if ranks is None else ranks)
    if not ranks:
        raise RanksError("no ranks to draw: pass ranks=None for all, or some of reports.ranks")
    reports._check("nvtx")  # the bands are its ranges: without it they would be silently empty
    reps = [reports.report(r, aligned=True) for r in ranks]
    if window is None:
        spans = [(df["start_ns"].min(), df["end_ns"].max()) for rep in reps
                 for df in (rep.nvtx, rep.gpu_ops()) if len(df)]
        window = (min(s for s, _ in spans), max(e for _, e in spans)) if spans else (0, 1)
    # band height follows its rows (threads x nesting depth, GPU streams), as plot_timeline sizes them
    rows = [max(rep.nvtx[rep.nvtx["kind"] != "mark"].groupby(["global_tid", "depth"]).ngroups
                + rep.gpu_ops().groupby(["device_id", "stream_id"]).ngroups, 1) for rep in reps]
    fig = Figure(figsize=figsize or (12, min(0.45 * sum(rows) + 0.6 * len(reps) + 1, 16)))
    axes = fig.subplots(len(reps), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": rows})
    for r, rep, ax in zip(ranks, reps, axes[:, 0]):
        plot_timeline(rep, window=window, ax=ax, labels=labels, relative=True, max_depth=max_depth)
        ax.set_title("")
        ax.set_ylabel(f"rank {r}", rotation=0, ha="right", va="center", fontsize=9, fontweight="bold")
        if ax is not axes[-1, 0]:
            ax.set_xlabel("")
    axes[0, 0].set_title(f"{len(reports)} ranks, aligned by capture start", fontsize=9)
    fig.tight_layout()
    return fig

