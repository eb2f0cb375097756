"""Shared test configuration: headless matplotlib, markers that skip with a reason."""
from __future__ import annotations

import os
import re
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


# A test runs in make test's serial phase, alone on the machine, when what it asserts depends on how
# fast things ran beside each other: it is marked ``alone`` (its module's ``pytestmark``: a program's
# judgement from its measured times, two measurements compared, ranks or a Dask cluster against their
# deadlines, headless Chromium, a test that kills or interrupts nsys and what it records), ``browser``, ``gpu`` or ``tensorrt``, or its module profiles a program
# itself (``ka.profile``, ``labkit.profile``: beside the lab's runs nsys 2022.4 once named a profiled
# program's main thread "nsys-launcher"), drives a browser, starts a Dask cluster, torchrun ranks or
# ``%%nsys`` cells.
# Everything else runs on every core at once (pytest-xdist, one file per worker), the lab's long runs
# included (the application keeps about one core busy: 105 % on the 2-core VM): a deadline of a
# minute or two is no measurement, and what two tests share (the sample clip, the backends cache,
# the fault tests' user) is written under a temporary name and renamed, or made once.
SERIAL_MARKERS = ("alone", "browser", "gpu", "tensorrt")
SERIAL_WORDS = re.compile(r'ka\.profile\(|labkit\.profile\(|selenium|LocalCluster|launcher="torchrun"|%%nsys')


def _needs_the_machine_alone(item, seen: dict) -> bool:
    if any(item.get_closest_marker(m) for m in SERIAL_MARKERS):
        return True
    path = str(item.fspath)
    if path not in seen:
        try:
            seen[path] = bool(SERIAL_WORDS.search(open(path, encoding="utf-8").read()))
        except OSError:
            seen[path] = True
    return seen[path]


def _longest_first(items) -> None:
    """Order the files longest first, in place (the parallel phase's workers take whole files in this
    order: ``make test`` passes ``--no-loadscope-reorder``): a file's weight is the sum of its tests'
    ``minutes`` markers, so that the hour-long files start at once instead of ending the phase alone
    on one worker while the other waits (longest processing time first); then, as pytest-xdist's own
    order, files with more tests first. The tests within a file keep their order."""
    weight: dict[str, float] = {}
    count: dict[str, int] = {}
    for item in items:
        path = str(item.fspath)
        mark = item.get_closest_marker("minutes")
        weight[path] = weight.get(path, 0.0) + (float(mark.args[0]) if mark else 0.0)
        count[path] = count.get(path, 0) + 1
    items.sort(key=lambda it: (-weight[str(it.fspath)], -count[str(it.fspath)], str(it.fspath)))


def pytest_collection_modifyitems(config, items):
    seen: dict[str, bool] = {}
    for item in items:
        if _needs_the_machine_alone(item, seen):
            item.add_marker(pytest.mark.serial)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the order its scheduler hands files out in
        _longest_first(items)
    reasons = {"nsys": _nsys_reason, "gpu": _gpu_reason, "tensorrt": _tensorrt_reason}
    cache: dict[str, str | None] = {}
    for item in items:
        for marker, why in reasons.items():
            if item.get_closest_marker(marker):
                if marker not in cache:
                    cache[marker] = why()
                if cache[marker]:
                    item.add_marker(pytest.mark.skip(reason=cache[marker]))


# What a skipped test was missing, by the words of its reason: the summary says how many tests each
# missing part skipped and how to get it (make test installs what it can; what it cannot is said here).
PARTS = (
    ("nsys", ("nsys",), "scripts/install-nsys"),
    ("a CUDA GPU", ("gpu", "cuda"), "a machine with an NVIDIA GPU"),
    ("TensorRT", ("tensorrt",), "NVIDIA's tensorrt Python package"),
    ("the browser", ("chromium", "chromedriver", "selenium", "browser"), "apt-get install chromium chromium-driver"),
    ("the GUI's packages", ("xvfb", "x11vnc", "novnc", "websockify", "xdotool", "xauth", "nsys-ui"),
     "apt-get install xvfb xauth xdotool x11vnc novnc websockify"),
    ("root", ("root",), "run the tests as root (they create a user and mount a tmpfs)"),
)


def _part(reason: str) -> tuple[str, str] | None:
    low = reason.lower()
    for name, words, fix in PARTS:
        if any(w in low for w in words):
            return name, fix
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts: dict[tuple[str, str], int] = {}
    other = 0
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        part = _part(reason)
        if part is None:
            other += 1
        else:
            counts[part] = counts.get(part, 0) + 1
    if not counts and not other:
        return
    terminalreporter.write_sep("-", "what the skipped tests lacked")
    for (name, fix), n in sorted(counts.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{n} test{'s' * (n != 1)} skipped for want of {name} (get it: {fix})")
    if other:
        terminalreporter.write_line(f"{other} test{'s' * (other != 1)} skipped for other reasons (pytest -rs lists them)")
