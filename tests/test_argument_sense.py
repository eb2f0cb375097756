"""Arguments are checked for sense, not only shape (labkit.errors: seconds, count; labkit.report.window):
a time limit that is NaN, infinite, 0 or negative, a window past the report's capture or of
numbers no clock holds, a warm-up below 0 or a count below 1: one line each, nothing run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import labkit
from labkit.errors import LabkitError  # ArgumentError is one

ROOT = Path(__file__).resolve().parents[1]
R = ROOT / "tests" / "fixtures" / "pipeline.nsys2022.4.sqlite"


def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labkit", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=cwd)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_profile_time_limit_that_is_no_limit_is_refused_before_nsys_runs(tmp_path, value):
    res = _cli("profile", "--timeout", value, "--outdir", tmp_path / "out", "--name", "t", "--summary", "none",
               "--", sys.executable, "-c", "print(1)")
    assert res.returncode == 2 and "--timeout" in res.stderr.splitlines()[-1], res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 0])
def test_the_api_refuses_the_same_limits_in_one_line(tmp_path, value):
    with pytest.raises(LabkitError, match="timeout_s"):
        labkit.profile([sys.executable, "-c", "print(1)"], name="t", outdir=tmp_path / "out", timeout_s=value)
    assert not (tmp_path / "out").exists()


def test_a_window_past_the_reports_end_is_one_line_not_an_empty_table():
    """Before: `(no nvtx data in ...)`, exit 0."""
    res = _cli("summary", R, "--window", "999999999999999,9999999999999999")
    assert res.returncode == 1 and "outside" in res.stderr and "events" in res.stderr, res.stdout + res.stderr
    assert "no nvtx data" not in res.stdout


def test_a_window_wider_than_any_clock_is_clipped_not_a_traceback():
    """`advise --window 0,1e30` (ms): 1e36 ns overflowed int64 (OverflowError traceback)."""
    res = _cli("advise", R, "--window", "0,1e30")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    res = _cli("advise", R, "--window", "1e18,2e18")
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1 and "outside" in res.stderr, res.stderr


@pytest.mark.parametrize("window", [(0, float("inf")), (float("nan"), 5), (0.5, 2.5)])
def test_restrict_refuses_a_window_of_numbers_no_clock_holds(window):
    rep = labkit.load_report(R)
    with pytest.raises(labkit.report.window.WindowError, match="two whole numbers"):
        labkit.restrict(rep, window=window)


@pytest.mark.parametrize("kw, word", [({"warmup": -3}, "warmup"), ({"count": float("nan")}, "count"),
                                      ({"count": 0}, "count"), ({"warmup": 1.5}, "warmup")])
def test_steady_window_refuses_a_negative_warmup_or_no_batches(kw, word):
    rep = labkit.load_report(R)
    with pytest.raises(LabkitError, match=word):
        labkit.steady_window(rep, **kw)
