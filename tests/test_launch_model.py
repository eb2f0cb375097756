"""The launch model (labkit.judge.launches) on real GPU traces: what fewer launches leave of a step on
the host, and what a merged kernel costs on the device, checked against the fix's own kernel where a
trace holds it and as invariants over every report with launches."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.judge.launches import SHAPE, launch_steps

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = Path(__file__).resolve().parents[1] / "reports" / "reference"
TINY = FIXTURES / "known_gpu" / "gpu_tiny_launches.h200.trimmed.sqlite"


def _model(rep):
    a = labkit.advise(rep)
    return launch_steps(rep, a.attrs["window"], a.attrs["stages"])


def test_a_merged_kernel_is_costed_near_the_fixs_own_kernel_in_the_same_trace():
    """gpu_tiny_launches adds 1.0 to 500 tensors of 1,024 floats a step, one launch each; its fix adds to
    one (500, 1024) tensor, and the trace holds that kernel too (the program's warm-up launches it).
    The model merges each step's 500 adds (one kernel, one shape) into one launch: one wave of the
    H200's thread slots, as long as the longest add. The fix's kernel ran 1.41 us; the model reads the
    merged kernel short of it (the adds' bytes, 4 MB a step, take time a wave of fixed cost does not
    show), within a factor of two."""
    rep = labkit.load_report(TINY)
    lm = _model(rep)
    assert lm.steps == 23 and lm.launches == 23 * 500
    k = rep.kernels
    threads = k[SHAPE].prod(axis=1)
    fix_us = float(k.loc[threads == 500 * 128, "duration_ns"].median()) / 1e3  # the (500, 1024) add
    merged_us = lm.gpu_merged_ms / lm.steps * 1e3
    assert fix_us / 2 < merged_us <= fix_us, (merged_us, fix_us)
    # one kernel and shape a step: batching pays one launch a step, as one graph replay does
    assert lm.merged_ms == pytest.approx(lm.graphed_ms)
    # what stays of a step: its work before the first launch and after the last, and one launch call
    assert 0.0 < lm.merged_ms / lm.steps < 0.1 * lm.now_ms / lm.steps


def test_batching_leaves_of_a_step_about_what_the_fixs_own_trace_shows():
    """The fix of the 500-add program (one (500, 1024) add a step) profiled as the slow one was, on the
    same H200 in the same call: 22.0 us a step in its steady window, one pause of 0.24 ms included. The
    estimate read from the slow variant's trace alone (8.50 ms a step) is within 25 % of what that
    trace shows, 386x, where keeping each step's edges and the trace's three pauses as recorded gave
    128x: the time from one step's last launch to the next's first is 40 us there and 12 us in the
    fix's trace (the cold start after a burst), and the pauses, with nothing traced in them, are
    interruptions."""
    slow = labkit.load_report(TINY)
    a = labkit.advise(slow)
    top = a.iloc[0]
    assert top["lever"] == "batch"
    fix = labkit.load_report(FIXTURES / "known_gpu" / "gpu_tiny_launches_fix.h200.sqlite")
    w, fw = a.attrs["window"], labkit.advise(fix).attrs["window"]
    steps = lambda rep, win: int(((rep.nvtx["name"] == "update") & (rep.nvtx["start_ns"] >= win[0])
                                  & (rep.nvtx["end_ns"] <= win[1])).sum())
    traced_x = ((w[1] - w[0]) / steps(slow, w)) / ((fw[1] - fw[0]) / steps(fix, fw))
    assert 350 < traced_x < 420, traced_x
    assert traced_x / 1.25 <= top["predicted_speedup"] <= traced_x * 1.25, (top["predicted_speedup"], traced_x)
    lm = _model(slow)
    assert lm.cold_ms > 0 and lm.interrupted_ms > 0.3, lm


def test_a_pause_with_a_call_of_its_own_is_work_not_an_interruption(tmp_path):
    """The same trace with one OS runtime call of the launching thread written into its longest pause
    (0.25 ms between two steps): that pause is the program's work, the three pauses are kept as
    recorded, and the estimate falls back to what keeping them gives."""
    import shutil
    import sqlite3

    path = tmp_path / "tiny.sqlite"
    shutil.copy(TINY, path)
    before, was = _model(labkit.load_report(path)), labkit.advise(labkit.load_report(path)).iloc[0]
    with sqlite3.connect(path) as con:
        (tid,) = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid "
                             "ORDER BY count(*) DESC LIMIT 1").fetchone()
        ranges = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL "
                             "ORDER BY start").fetchall()
        gap, at = max((b[0] - a[1], a[1]) for a, b in zip(ranges, ranges[1:]))
        name = con.execute("SELECT id FROM StringIds WHERE value = 'write'").fetchone()
        name = name[0] if name else con.execute("INSERT INTO StringIds (value) VALUES ('write')").lastrowid
        con.execute("INSERT INTO OSRT_API (start, end, eventClass, globalTid, nameId, returnValue, nestingLevel, "
                    "callchainId) VALUES (?, ?, 27, ?, ?, 0, 0, 0)", (at + gap // 3, at + gap // 2, tid, name))
    after, now = _model(labkit.load_report(path)), labkit.advise(labkit.load_report(path)).iloc[0]
    assert gap > 200_000 and before.interrupted_ms > 0
    assert after.interrupted_ms == 0 and after.merged_ms > before.merged_ms, (before, after)
    assert now["lever"] == "batch" and now["predicted_speedup"] < 0.7 * was["predicted_speedup"], (now, was)
    assert "interruptions" in was["assumptions"] and "interruptions" not in now["assumptions"]


def test_a_networks_layers_do_not_merge():
    """The lab's detector on an H100 (pipeline.nsys2025.3): a step's launches are layers, each its own
    shape, with the pipeline's own work between them; merging launches of one kernel and shape leaves
    most of each step where it was."""
    lm = _model(labkit.load_report(FIXTURES / "pipeline.nsys2025.3.sqlite"))
    assert lm is not None and lm.merged_ms > 0.8 * lm.now_ms
    # its launches fill 8 % of its steps: no burst, so no cold start and no pause taken for an interruption
    assert lm.cold_ms == 0 and lm.interrupted_ms == 0


REPORTS = sorted(FIXTURES.rglob("*.sqlite")) + sorted(REFERENCE.rglob("*.sqlite"))


def test_fewer_launches_never_cost_more():
    """On every report with launches in its steps: merged launches leave no more than the steps took,
    and no less than one graph replay does; merged kernels take no longer than the kernels apart.
    One test over every report (most hold no kernels, or no step with two launches: they have nothing
    to check, and are counted rather than reported as skipped cases)."""
    checked, bad = [], {}
    for path in REPORTS:
        try:
            rep = labkit.load_report(path)
        except labkit.LabkitError:
            continue
        lm = _model(rep) if len(rep.kernels) else None
        if lm is None:
            continue
        checked.append(path.name)
        ok = (0 <= lm.graphed_ms <= lm.merged_ms + 1e-9 <= lm.now_ms + 1e-9
              and 0 <= lm.gpu_merged_ms <= lm.gpu_now_ms + 1e-9
              and np.isfinite(lm.per_launch_us) and lm.per_launch_us > 0)
        if not ok:
            bad[path.name] = lm
    assert len(checked) >= 8, checked  # the recorded GPU fixtures and references hold launches in their steps
    assert bad == {}
