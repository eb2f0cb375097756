"""The doctor reports true facts about this machine and explains the nvtx/nsys trap."""
from __future__ import annotations

import subprocess
import sys

import pytest

from labkit import doctor, env


@pytest.mark.parametrize("nvtx, nsys, status, words", [
    ("0.2.11", "2022.4.2.1", "OK", "recorded"),
    ("0.2.10", "2025.3.1.90", "OK", "recorded"),
    ("0.2.12", "2022.4.2.1", "WARN", "NOT be recorded"),
    ("0.2.17", "2023.2.1", "WARN", "NOT be recorded"),
    ("0.2.17", "2025.3.1", "WARN", "untested"),
    (None, "2022.4.2.1", "FAIL", "not installed"),
    ("0.2.11", None, "WARN", "no nsys"),
])
def test_nvtx_verdict(nvtx, nsys, status, words):
    got, detail, fix = doctor.nvtx_verdict(nvtx, nsys)
    assert got == status
    assert words in detail
    if status != "OK":
        assert fix


def test_doctor_frame_has_one_row_per_check():
    df = doctor.doctor(mode="analysis")
    assert list(df.columns) == ["check", "status", "detail", "fix", "required"]
    assert {"python", "torch", "gpu", "nsys", "nvtx", "tensorrt", "opencv", "disk"} <= set(df["check"])
    assert set(df["status"]) <= {"OK", "WARN", "FAIL"}
    # The torch line states this interpreter's real torch version.
    import torch
    assert torch.__version__ in df.set_index("check").loc["torch", "detail"]


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of analysis, lab, gpu"):
        doctor.doctor(mode="laptop")


def test_missing_nsys_fails_lab_mode_and_names_the_fix(tmp_path):
    out = subprocess.run([sys.executable, "-m", "labkit", "doctor"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "LABKIT_NSYS": str(tmp_path / "nope")})
    assert out.returncode == 1
    assert "FAIL  nsys" in out.stdout and "scripts/install-nsys" in out.stdout
    assert "not ready for mode 'lab'" in out.stderr


def test_analysis_mode_needs_no_nsys(tmp_path):
    out = subprocess.run([sys.executable, "-m", "labkit", "doctor", "--mode", "analysis"],
                         capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "LABKIT_NSYS": str(tmp_path / "nope")})
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.nsys
def test_doctor_probe_records_ranges_with_pinned_nvtx():
    out = subprocess.run([sys.executable, "-m", "labkit", "doctor", "--probe"], capture_output=True, text=True)
    assert "OK    nvtx probe  nsys recorded 3/3 ranges" in out.stdout, out.stdout + out.stderr
    assert f"nsys {env.nsys_version()}" in out.stdout
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.nsys
@pytest.mark.slow
def test_newer_nvtx_is_invisible_to_old_nsys_and_doctor_says_so(tmp_path):
    """Install nvtx 0.2.17 beside the project and let the doctor probe the real nsys."""
    if env.nsys_version_tuple() >= (2024,):
        pytest.skip(f"nsys {env.nsys_version()} is not one of the versions blind to nvtx >= 0.2.12")
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                          "nvtx==0.2.17"], capture_output=True, text=True)
    if pip.returncode != 0:
        pytest.skip(f"cannot download nvtx 0.2.17: {pip.stderr.strip()[-200:]}")
    out = subprocess.run([sys.executable, "-m", "labkit", "doctor", "--probe"], capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(target)})
    assert "WARN  nvtx        nvtx 0.2.17 ranges will NOT be recorded" in out.stdout, out.stdout
    assert "fix: pip install nvtx==0.2.11" in out.stdout
    assert "FAIL  nvtx probe  nsys recorded 0/3 ranges" in out.stdout
    assert out.returncode == 1
