"""The doctor reports true facts about this machine and explains the nvtx/nsys trap."""
from __future__ import annotations

import re
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
    assert re.search(r"OK +nvtx probe +nsys recorded 3/3 ranges", out.stdout), out.stdout + out.stderr
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
    assert re.search(r"WARN +nvtx +nvtx 0.2.17 ranges will NOT be recorded", out.stdout), out.stdout
    assert "fix: pip install nvtx==0.2.11" in out.stdout
    assert re.search(r"FAIL +nvtx probe +nsys recorded 0/3 ranges", out.stdout)
    assert out.returncode == 1


@pytest.mark.parametrize("cpu, gpu, has_gpu, status, words", [
    ("1.20.0", "1.20.0", True, "FAIL", "both onnxruntime"),
    ("1.20.0", "1.20.0", False, "FAIL", "both onnxruntime"),
    (None, "1.20.0", True, "OK", "onnxruntime-gpu 1.20.0"),
    ("1.32.0", None, False, "OK", "onnxruntime 1.32.0"),
    ("1.32.0", None, True, "WARN", "CPU build"),
    (None, None, False, "WARN", "not installed"),
])
def test_onnxruntime_verdict(cpu, gpu, has_gpu, status, words):
    c = doctor.onnxruntime_verdict(cpu, gpu, has_gpu=has_gpu)
    assert c.status == status and words in c.detail
    if status == "FAIL":  # the one command that repairs the files, not an uninstall that breaks them
        assert c.fix.startswith("pip install --force-reinstall --no-deps onnxruntime-gpu") and "lab" in c.needed_by


def test_onnxruntime_check_reads_this_environment():
    row = doctor.doctor(mode="lab").set_index("check").loc["onnxruntime"]
    have = env.package_version("onnxruntime") or env.package_version("onnxruntime-gpu")
    assert (have in row["detail"]) if have else row["status"] == "WARN"


@pytest.mark.parametrize("cc, cxx, cuda, status, words", [
    ("/usr/bin/cc", None, True, "OK", "C compiler"),
    (None, "/usr/bin/c++", True, "WARN", "Triton"),  # a GPU needs C, a C++ compiler alone is not it
    (None, "/usr/bin/c++", False, "OK", "C++ compiler"),
    ("/usr/bin/cc", None, False, "WARN", "Inductor"),
])
def test_compiler_verdict_on_cpu_and_gpu(cc, cxx, cuda, status, words):
    c = doctor.compiler_verdict(cc, cxx, cuda=cuda)
    assert c.status == status and words in c.detail


def test_cuda_probe_verdict_names_nsys_too_old():
    bad = doctor.cuda_probe_verdict(0, "2022.4.2.1", "13.0")
    assert bad.status == "FAIL" and "2022.4.2.1" in bad.detail and "LABKIT_NSYS" in bad.fix
    assert doctor.cuda_probe_verdict(1, "2025.3.1", "13.0").status == "OK"


GPUS = [{"index": 0, "uuid": "GPU-aaaa1111", "name": "A"}, {"index": 1, "uuid": "GPU-bbbb2222", "name": "B"},
        {"index": 2, "uuid": "GPU-cccc3333", "name": "C"}]


@pytest.mark.parametrize("visible, uuids, names", [
    (None, None, ["A", "B", "C"]),
    ("2,0", None, ["C", "A"]),
    ("GPU-bbbb", None, ["B"]),  # a unique UUID prefix, as CUDA accepts
    ("1,7,2", None, ["B"]),  # CUDA stops at the first invalid entry
    ("", None, []),
    (None, ["cccc3333", "aaaa1111"], ["C", "A"]),  # torch's order (fastest first) wins over NVML's
])
def test_nvml_devices_matched_to_cuda_devices(visible, uuids, names):
    got = env.match_cuda_devices(GPUS, visible=visible, cuda_uuids=uuids)
    assert [g["name"] for g in got] == names and [g["cuda_index"] for g in got] == list(range(len(names)))


def test_doctor_frame_shows_whole_fix_text():
    df = doctor.doctor(mode="lab")
    long = "x" * 120
    df.loc[0, "fix"] = long
    assert long in df._repr_html_() and long in repr(df)
