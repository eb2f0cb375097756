"""A lever that only changes how the detector computes (a layout, a compiler, a runtime, a precision):
its factor on the detector stage, measured on the stage alone, for the replay of the pipeline.

A profile cannot know how much faster ``--channels-last``, ``--compile`` or ONNX Runtime makes the
detector's forward pass: the only finding about it is "``infer`` costs nothing", a bound no such
change reaches. So this module measures it: ``source_code/stage_alone.py`` (the application's own
module, run as a child) builds the detector stage under the step's options and under its base's,
and times them in interleaved pairs; the factor (the lever's stage time over the base's) and its
interval are kept in ``RESULTS/stage_alone/``, one JSON file per machine and pair of option sets,
and read again as input (an entry that is not a measurement is measured again). The prediction is
then ``labkit.what_if`` on the base's profile with ``infer`` scaled by that factor
(``labbook.predict``).
"""
from __future__ import annotations

import hashlib
import json
import math
import socket
import subprocess
import sys

from labbook.settings import REPLAY, RESULTS, ROOT

STAGE_OPTIONS = frozenset({"channels_last", "compile", "backend", "precision", "tf32", "cuda_graphs", "device"})
"""Options that change only how the detector stage computes: a step whose change over its base is
made of these alone is predicted from its factor on the stage alone."""
STAGE = "infer"
"""The stage those options change (``source_code.stages``: the backend's forward pass)."""
TIMEOUT_S = 900
"""The most a measurement may take (an INT8 calibration or an engine build come first)."""


def applies(changed: dict) -> bool:
    """Whether a change (option -> value over the base) only changes how the detector computes."""
    return bool(changed) and set(changed) <= STAGE_OPTIONS


def _key(base: dict, lever: dict) -> str:
    text = json.dumps({"host": socket.gethostname(), "base": base, "lever": lever}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _valid(doc) -> bool:
    """A cache entry is input: a measurement has a positive factor inside its interval, and its pairs."""
    if not isinstance(doc, dict):
        return False
    nums = [doc.get(k) for k in ("factor", "low", "high")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in nums):
        return False
    f, lo, hi = nums
    return 0 < lo <= f <= hi and isinstance(doc.get("pairs"), int) and doc["pairs"] >= 1


def _cached(path) -> dict | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if _valid(doc) else None


def measure(base: dict, lever: dict, *, pairs: int = 8) -> tuple[dict | None, str]:
    """(the measurement, '') of the detector stage under ``lever`` against ``base`` (full
    ``detect_video.py`` option sets, as ``labbook.app.app_options`` makes them), from the cache or
    measured now; (None, why not) where it cannot be (a replay runs nothing; a backend this machine
    lacks; the child's one-line error)."""
    from labbook.app import unavailable

    if REPLAY is not None:
        return None, "a replayed recording runs nothing here"
    for side in (base, lever):
        why = unavailable(**side)
        if why:
            return None, why
    from source_code.stage_alone import BUILDS

    base = {k: v for k, v in base.items() if k in BUILDS}
    lever = {k: v for k, v in lever.items() if k in BUILDS}
    path = RESULTS / "stage_alone" / f"{_key(base, lever)}.json"
    doc = _cached(path)
    if doc is not None:
        return doc, ""
    cmd = [sys.executable, "-m", "source_code.stage_alone", "--base", json.dumps(base, default=str),
           "--lever", json.dumps(lever, default=str), "--pairs", str(int(pairs))]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"the detector stage alone took over {TIMEOUT_S} s to measure"
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines()
        return None, (lines[-1] if lines else f"the stage-alone measurement exited {done.returncode}")
    try:
        doc = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        doc = None
    if not _valid(doc):
        return None, "the stage-alone measurement printed no factor"
    from labkit.errors import LabkitError
    from labkit.paths import atomic_write

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(doc, indent=1) + "\n", overwrite=True, what="stage-alone measurement")
    except (OSError, LabkitError):
        pass  # a cache that cannot be written costs a measurement next time, nothing else
    return doc, ""


def words(doc: dict) -> str:
    """The measurement in words, for a prediction's assumptions."""
    b = doc.get("backends") or ["the base", "the lever"]
    hw = "x".join(map(str, doc.get("input_hw") or []))
    return (f"'{STAGE}' alone took {doc['factor']:.2f}x its base's time under this change (95 % interval "
            f"{doc['low']:.2f}-{doc['high']:.2f}x over {doc['pairs']} interleaved pairs of {b[0]} and {b[1]}, "
            f"{doc.get('base_ms', float('nan')):.1f} against {doc.get('lever_ms', float('nan')):.1f} ms a batch of "
            f"{doc.get('batch_size')} at {hw}); in the pipeline its time scales by that factor, its waits and every "
            f"other thread keep their recorded time, and the threads share the cores the profiled run had")
