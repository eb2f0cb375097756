"""Shared test configuration: headless matplotlib, markers that skip with a reason."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


def _nsys_reason() -> str | None:
    from labkit import env

    if env.find_nsys():
        return None
    if os.environ.get("LABKIT_REQUIRE_NSYS"):  # set by .ci/run: CI must run these tests
        raise pytest.UsageError("LABKIT_REQUIRE_NSYS is set but nsys is not installed: run scripts/install-nsys")
    return "nsys not installed (run scripts/install-nsys)"


def _gpu_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    return None if torch.cuda.is_available() else "no CUDA GPU on this machine"


def _tensorrt_reason() -> str | None:
    try:
        import tensorrt  # noqa: F401
    except Exception as exc:
        return f"TensorRT not importable here ({type(exc).__name__}: {exc})"
    return None


def pytest_collection_modifyitems(config, items):
    reasons = {"nsys": _nsys_reason, "gpu": _gpu_reason, "tensorrt": _tensorrt_reason}
    cache: dict[str, str | None] = {}
    for item in items:
        for marker, why in reasons.items():
            if item.get_closest_marker(marker):
                if marker not in cache:
                    cache[marker] = why()
                if cache[marker]:
                    item.add_marker(pytest.mark.skip(reason=cache[marker]))
