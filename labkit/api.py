"""Lazy public names: how labkit and each of its rooms export names without importing every module.

A package's ``__init__`` calls :func:`exports` with ``{module: [names]}``; a name is imported from its
module on first use (``labkit.bench.run`` imports ``labkit.bench.runs`` then), so ``import labkit``
and ``import labkit.annotate`` stay light.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence  # not typing: 5 ms of every command's start


def exports(package: str, table: Mapping[str, Sequence[str]], modules: Mapping[str, str] | None = None
            ) -> tuple[Callable, Callable, list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: each name of ``table[module]`` is read
    from ``package.module``; ``modules`` maps further attribute names to whole modules (dotted,
    absolute)."""
    where = {name: f"{package}.{module}" for module, names in table.items() for name in names}
    whole = dict(modules or {})

    def __getattr__(name: str):
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
        if name in whole:
            return importlib.import_module(whole[name])
        if not name.startswith("_"):  # a module of the package (labkit.bench.charts) by attribute
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(where) | set(whole))

    return __getattr__, __dir__, sorted(where)
