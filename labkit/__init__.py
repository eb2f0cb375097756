"""labkit: profile programs with Nsight Systems and read the reports as pandas DataFrames.

Public API (imported lazily, so ``import labkit.annotate`` stays light). The data flows
run -> report -> DataFrames -> tables, plots, one module per step:

- run:        ``profile(command, *, name, ...) -> Report`` (record, export, load; ``per_rank=True,
              nproc=N``: one report per rank under torchrun -> ``Reports``);
              ``labkit.nsys.record`` / ``labkit.nsys.export_sqlite`` return paths only
- report:     ``load_report(path) -> Report``; ``Report`` holds the frames (``nvtx``, ``kernels``,
              ``memcpy``, ``memset``, ``cuda_api``, ``sync``, ``graphs``, ``gpu_ops()``, ``threads``, ``meta``,
              ``nsys_version``, ``path``) and says ``has_cuda`` / ``has_nvtx``
              (reading: ``labkit.reader``, with ``trim_export``)
- summaries (as ``nsys stats``; each takes the Report, and ``window=``/``within=``): ``nvtx_summary``,
  ``kernel_summary``, ``memcpy_summary``, ``gpu_projection``, ``gpu_projection_summary``,
  ``cuda_api_summary``, ``memcpy_size_summary``, ``osrt_summary``
- windows (``labkit.window``): ``restrict(report, window=(s, e) | within="range")``, ``@windowed``
- two reports: ``compare(a, b)`` (per range, kernel, CUDA API: counts, totals, deltas), ``plot_compare``
- analyses (each takes the Report): ``stage_table``, ``batches``, ``gpu_utilization``,
  ``gpu_idle_gaps``, ``gpu_idle_breakdown``, ``bottleneck``, ``steady_window``, ``stage_overlap``,
  ``copy_table``, ``pageable_copies``, ``choose_stages``; ``labkit.analysis.busy_intervals`` merges
  intervals (SM and copy-engine busy time: ``labkit.idle``)
- advice (takes the Report): ``advise`` (findings, lever ids of ``labkit.advice.LEVERS`` in general
  words, predicted speed-ups with their basis and assumptions), ``next_lever``
- many reports (one per rank): ``load_reports`` -> ``Reports``, ``profile_ranks``, ``plot_rank_timeline``
- plots: ``plot_timeline`` (``interactive=True``: ``interactive_timeline``, Bokeh)
- export: ``to_perfetto`` (a Perfetto trace of threads, NVTX, CUDA API calls and GPU work)
- benchmarks: ``bench`` (module), ``Ledger``, ``speedup_table``
- environment: ``doctor``
- annotation for applications: ``labkit.annotate`` (no pandas/matplotlib on import)
- command line: ``python -m labkit`` (``labkit.cli``)
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUMMARIES = ("nvtx_summary", "kernel_summary", "memcpy_summary", "gpu_projection", "gpu_projection_summary",
              "cuda_api_summary", "memcpy_size_summary", "osrt_summary")
_ANALYSES = ("stage_table", "batches", "gpu_utilization", "gpu_idle_gaps", "gpu_idle_breakdown", "bottleneck",
             "steady_window", "stage_overlap", "copy_table", "pageable_copies", "choose_stages")
_LAZY = {
    "load_report": ("labkit.report", "load_report"),
    "Report": ("labkit.report", "Report"),
    "plot_timeline": ("labkit.timeline", "plot_timeline"),
    "interactive_timeline": ("labkit.timeline_interactive", "interactive_timeline"),
    "to_perfetto": ("labkit.perfetto", "to_perfetto"),
    "Ledger": ("labkit.ledger", "Ledger"),
    "speedup_table": ("labkit.tables", "speedup_table"),
    "doctor": ("labkit.doctor", "doctor"),
    "LabkitError": ("labkit.errors", "LabkitError"),
    "OutputError": ("labkit.errors", "OutputError"),
    "advise": ("labkit.advice", "advise"),
    "next_lever": ("labkit.advice", "next_lever"),
    "load_reports": ("labkit.ranks", "load_reports"),
    "Reports": ("labkit.ranks", "Reports"),
    "plot_rank_timeline": ("labkit.ranks", "plot_rank_timeline"),
    "profile_ranks": ("labkit.ranks_profile", "profile_ranks"),
    "restrict": ("labkit.window", "restrict"),
    "windowed": ("labkit.window", "windowed"),
    "compare": ("labkit.diff", "compare"),
    "plot_compare": ("labkit.diff", "plot_compare"),
    **{name: ("labkit.summaries", name) for name in _SUMMARIES},
    **{name: ("labkit.analysis", name) for name in _ANALYSES},
}
_SUBMODULES = {"annotate", "bench", "ledger", "tables", "charts", "nsys", "report", "reader", "reader_nvtx",
               "summaries", "analysis", "advice", "ranks", "ranks_profile", "timeline", "doctor", "env", "errors",
               "cli", "style", "bench_core", "bench_parallel", "progress", "window", "diff", "reader_cpu", "idle",
               "advice_rules", "advice_evidence", "timeline_interactive", "timeline_layout", "perfetto"}

__all__ = ["profile"] + sorted(_LAZY) + sorted(_SUBMODULES)


def profile(command, *, name: str, per_rank: bool = False, nproc: int | None = None, **options):
    """Run ``command`` under Nsight Systems, export and load: one process, or ranks under torchrun.

    Without ``per_rank``: :func:`labkit.report.profile` (one report, a ``Report``). With
    ``per_rank=True, nproc=N``: :func:`labkit.ranks_profile.profile_ranks`, N ranks under torchrun,
    one nsys per rank (``<name>_<rank>.nsys-rep``), loaded as ``Reports``. The dispatch lives here,
    above both modules (``labkit.ranks`` reads through ``labkit.report``). ``options`` go to the
    chosen function.
    """
    if per_rank:
        from labkit.ranks_profile import profile_ranks

        if nproc is None:
            from labkit.ranks import RanksError

            raise RanksError("per_rank=True needs nproc=N: the number of ranks to start on this machine")
        return profile_ranks(command, nproc=nproc, name=name, **options)
    if nproc is not None:
        from labkit.ranks import RanksError

        raise RanksError(f"nproc={nproc} profiles ranks: pass per_rank=True too (one nsys report per rank)")
    from labkit.report import profile as profile_one

    return profile_one(command, name=name, **options)


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in _SUBMODULES:
        return importlib.import_module(f"labkit.{name}")
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")
