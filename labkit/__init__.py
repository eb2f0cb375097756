"""labkit: profile programs with Nsight Systems and read the reports as pandas DataFrames.

Public API (imported lazily, so ``import labkit.annotate`` stays light):

- profiling:  ``profile``, ``load_report``, ``Report``, ``plot_timeline``
- many ranks: ``load_reports``, ``Reports``, ``plot_rank_timeline``, ``profile_ranks``
- benchmarks: ``bench`` (module), ``Ledger``, ``speedup_table``
- environment: ``doctor``
- annotation for applications: ``labkit.annotate`` (no pandas/matplotlib on import)
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "profile": ("labkit.nsys", "profile"),
    "load_report": ("labkit.report", "load_report"),
    "Report": ("labkit.report", "Report"),
    "plot_timeline": ("labkit.timeline", "plot_timeline"),
    "load_reports": ("labkit.ranks", "load_reports"),
    "Reports": ("labkit.ranks", "Reports"),
    "plot_rank_timeline": ("labkit.ranks", "plot_rank_timeline"),
    "profile_ranks": ("labkit.ranks_profile", "profile_ranks"),
    "Ledger": ("labkit.ledger", "Ledger"),
    "speedup_table": ("labkit.tables", "speedup_table"),
    "doctor": ("labkit.doctor", "doctor"),
}
_SUBMODULES = {"annotate", "bench", "ledger", "tables", "charts", "nsys", "report", "timeline", "doctor", "env", "errors"}

__all__ = sorted(_LAZY) + sorted(_SUBMODULES)


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in _SUBMODULES:
        return importlib.import_module(f"labkit.{name}")
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")
