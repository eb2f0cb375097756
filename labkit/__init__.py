"""labkit: profile programs with Nsight Systems and read the reports as pandas DataFrames.

Public API (imported lazily, so ``import labkit.annotate`` stays light). labkit is a house of
rooms along the data flow run -> report -> statistics -> judgement and plots; a room imports only
rooms below it (tests/test_architecture.py):

- ``labkit.record``: run a command under nsys (``record``), export to SQLite (``export_sqlite``),
  child processes, part of a running process (``session``) and the Jupyter kernel under nsys
  (``kernel``); paths only
- ``labkit.report``: ``load_report(path) -> Report`` (frames ``nvtx``, ``kernels``, ``memcpy``, ``memset``,
  ``cuda_api``, ``sync``, ``graphs``, ``osrt``, ``threads``, ``meta``), ``profile(command, *, name)``
  (record + export + load), windows (``restrict(report, window=(s, e) | within="range")``, ``@windowed``),
  the SQLite readers (``trim_export``), ONNX Runtime op profiles
- ``labkit.stats``: the summaries equal to ``nsys stats`` (``nvtx_summary``, ``kernel_summary``,
  ``memcpy_summary``, ``gpu_projection``, ``gpu_projection_summary``, ``cuda_api_summary``,
  ``memcpy_size_summary``, ``osrt_summary``; each takes ``window=``/``within=``), ``stage_table``,
  ``batches``, ``steady_window``, ``stage_overlap``, ``choose_stages``, GPU busy and idle time
  (``gpu_utilization``, ``gpu_idle_gaps``, ``gpu_idle_breakdown``, ``busy_intervals``), copies
  (``copy_table``, ``pageable_copies``), kernel statistics as nsys recipes and HTA give them
  (``kernel_percentiles``, ``launch_latency``, ``queue_depth``, ``stream_summary``, ``copy_bandwidth``),
  two reports (``compare(a, b)``, ``headline(a, b)``, ``plot_compare``)
- ``labkit.judge``: ``bottleneck``, ``advise`` (findings with lever ids in general words, predicted
  speed-ups with their basis and assumptions), ``next_lever``
- ``labkit.show``: ``plot_timeline`` (``interactive=True``: ``interactive_timeline``, Bokeh),
  ``to_perfetto``, the ``%%nsys`` cell magic (``%load_ext labkit``: :func:`load_ipython_extension`)
- ``labkit.ranks``: many reports, one per rank: ``load_reports`` -> ``Reports``, ``profile_ranks``
  (``profile(..., per_rank=True, nproc=N)``), ``plot_rank_timeline``
- ``labkit.bench``: ``run``, ``sweep``, ``run_parallel``, ``Result``; ``Ledger``, ``speedup_table``, charts
- top level: ``annotate`` (for applications: no pandas/matplotlib on import), ``errors``, ``progress``,
  ``env`` (facts about this machine), ``style``, ``doctor``, ``cli`` (``python -m labkit``), ``api``

Every name above is also ``labkit.<name>``; the flat module names of rounds 1-3 (``labkit.nsys``,
``labkit.analysis``, ``labkit.ledger``...) still resolve as attributes of ``labkit``.
"""
from __future__ import annotations

from labkit.api import exports

__version__ = "0.1.0"

ROOMS = ("record", "report", "stats", "judge", "show", "ranks", "bench")
"""labkit's subpackages, in the order the data flows: run -> report -> statistics -> judgement and
plots; many reports and benchmarks on top. No room imports a room after it."""

_SUMMARIES = ("nvtx_summary", "kernel_summary", "memcpy_summary", "gpu_projection", "gpu_projection_summary",
              "cuda_api_summary", "memcpy_size_summary", "osrt_summary")
_TABLE = {
    "report.load": ("load_report", "Report"),
    "report.window": ("restrict", "windowed"),
    "stats.summaries": _SUMMARIES,
    "stats.stages": ("stage_table", "batches", "steady_window", "stage_overlap", "choose_stages"),
    "stats.idle": ("gpu_utilization", "gpu_idle_gaps", "gpu_idle_breakdown"),
    "stats.copies": ("copy_table", "pageable_copies"),
    "stats.kernels": ("kernel_percentiles", "launch_latency", "queue_depth", "stream_summary", "copy_bandwidth"),
    "stats.compare": ("compare", "headline", "plot_compare"),
    "judge.bottleneck": ("bottleneck",),
    "judge.advice": ("advise", "next_lever"),
    "judge.replay": ("what_if",),
    "show.timeline": ("plot_timeline",),
    "show.interactive": ("interactive_timeline",),
    "show.perfetto": ("to_perfetto",),
    "ranks.reports": ("load_reports", "Reports", "plot_rank_timeline"),
    "ranks.profile": ("profile_ranks",),
    "bench.ledger": ("Ledger",),
    "bench.tables": ("speedup_table",),
    "doctor": ("doctor",),
    "errors": ("LabkitError", "OutputError"),
}
# Modules by name: the rooms and the top-level modules, and the flat names of rounds 1-3
# (labkit.nsys, labkit.analysis, ...) so that code written against them keeps working.
_MODULES = {name: f"labkit.{name}" for name in ROOMS + ("annotate", "errors", "progress", "env", "style", "cli",
                                                        "doctor", "api")}
_MODULES.update({
    "nsys": "labkit.record", "proc": "labkit.record.proc",
    "reader": "labkit.report.reader", "reader_cpu": "labkit.report.cpu", "reader_nvtx": "labkit.report.nvtx",
    "window": "labkit.report.window", "ort_profile": "labkit.report.ort_profile",
    "summaries": "labkit.stats.summaries", "idle": "labkit.stats.idle", "analysis": "labkit.stats",
    "diff": "labkit.stats.compare", "advice": "labkit.judge.advice", "advice_rules": "labkit.judge.rules",
    "advice_evidence": "labkit.judge.evidence", "timeline": "labkit.show.timeline",
    "timeline_layout": "labkit.show.layout", "timeline_interactive": "labkit.show.interactive",
    "perfetto": "labkit.show.perfetto", "ranks_profile": "labkit.ranks.profile", "bench_core": "labkit.bench",
    "bench_parallel": "labkit.bench.parallel", "bench_truth": "labkit.bench.truth", "ledger": "labkit.bench.ledger",
    "tables": "labkit.bench.tables", "tables_view": "labkit.bench.table_view", "charts": "labkit.bench.charts",
})
__getattr__, __dir__, _names = exports(__name__, {module: names for module, names in _TABLE.items()}, _MODULES)
__all__ = ["profile"] + _names + sorted(ROOMS + ("annotate", "errors", "progress", "env", "style", "cli", "doctor"))


def profile(command, *, name: str, per_rank: bool = False, nproc: int | None = None, **options):
    """Run ``command`` under Nsight Systems, export and load: one process, or ranks under torchrun.

    Without ``per_rank``: :func:`labkit.report.profile` (one report, a ``Report``). With
    ``per_rank=True, nproc=N``: :func:`labkit.ranks.profile.profile_ranks`, N ranks under torchrun,
    one nsys per rank (``<name>_<rank>.nsys-rep``), loaded as ``Reports``. The dispatch lives here,
    above both modules (``labkit.ranks`` reads through ``labkit.report``). ``options`` go to the
    chosen function.
    """
    if per_rank:
        from labkit.ranks.profile import profile_ranks

        if nproc is None:
            from labkit.ranks.reports import RanksError

            raise RanksError("per_rank=True needs nproc=N: the number of ranks to start on this machine")
        return profile_ranks(command, nproc=nproc, name=name, **options)
    if nproc is not None:
        from labkit.ranks.reports import RanksError

        raise RanksError(f"nproc={nproc} profiles ranks: pass per_rank=True too (one nsys report per rank)")
    from labkit.report.load import profile as profile_one

    return profile_one(command, name=name, **options)



def load_ipython_extension(ipython) -> None:
    """``%load_ext labkit``: the ``%%nsys`` cell magic (:mod:`labkit.show.magic`), which records one cell
    of a kernel started by ``python -m labkit kernel install``'s kernelspec. Its findings are
    ``labkit.advise``'s, handed in here, above both rooms (show does not import judge)."""
    from labkit.judge.advice import advise
    from labkit.show.magic import NsysMagics

    ipython.register_magics(NsysMagics(ipython, findings=advise))
