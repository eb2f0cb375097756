"""Shared test configuration: headless matplotlib, markers that skip with a reason."""
from __future__ import annotations

import os
import signal

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

# A suite started in the background of a shell without job control (`nohup make test &`) inherits
# SIGINT and SIGHUP ignored, and so would every program the tests start and then signal (a Ctrl-C
# or a hangup that never arrives: the interrupt tests hung until their timeout). Restored here, the
# programs the tests start get the default dispositions back (a Python handler is not inherited
# across exec; SIG_DFL is).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


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
