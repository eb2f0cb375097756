"""The doctor says whether several processes can share the GPU (issue 63): its compute mode read from
NVML and whether MPS serves it. No GPU here: NVML is a stand-in module put in sys.modules (nvidia-ml-py's
names and values), the only fake; the MPS control pipe is a real FIFO where the daemon makes it."""
from __future__ import annotations

import os
import sys
import types
from collections import namedtuple

import pytest

from labkit import doctor, env

Memory = namedtuple("Memory", "total free used")


def fake_pynvml(compute_mode: int) -> types.ModuleType:
    """nvidia-ml-py's calls that labkit.env makes, for one H200 in ``compute_mode``."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_DEVICE_MIG_ENABLE = 1, 2, 1
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "570.86.15"
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12080
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    m.nvmlDeviceGetUUID = lambda h: "GPU-5d3a2f6c-8b1e-4c2a-9f0d-1e2b3c4d5e6f"
    m.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    m.nvmlDeviceGetMemoryInfo = lambda h: Memory(143771 << 20, 143000 << 20, 771 << 20)
    m.nvmlDeviceGetMaxClockInfo = m.nvmlDeviceGetClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetComputeMode = lambda h: compute_mode

    def no_mig(h):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    m.nvmlDeviceGetMigMode = no_mig
    return m


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "mps"))

    def with_mode(mode: int, *, mps: bool = False):
        monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(mode))
        if mps:
            (tmp_path / "mps").mkdir(exist_ok=True)
            os.mkfifo(tmp_path / "mps" / "control")
        return doctor.run_checks()

    return with_mode


def _sharing(checks):
    (c,) = [c for c in checks if c.name == "gpu sharing"]
    return c


def test_an_exclusive_process_gpu_without_mps_is_a_warning_naming_the_steps_and_the_fix(gpu):
    c = _sharing(gpu(3))
    assert env.visible_gpus()[0]["compute_mode"] == "EXCLUSIVE_PROCESS"
    assert c.status == doctor.WARN and "EXCLUSIVE_PROCESS and no MPS" in c.detail and "processes2" in c.detail
    assert "nvidia-cuda-mps-control -d" in c.fix and "nvidia-smi -c DEFAULT" in c.fix


def test_exclusive_process_with_mps_running_shares_and_default_says_whether_mps_runs(gpu):
    assert _sharing(gpu(3, mps=True)).status == doctor.OK
    c = _sharing(gpu(0))  # the FIFO is still there: MPS running
    assert c.status == doctor.OK and "compute mode DEFAULT" in c.detail and "MPS running" in c.detail


def test_a_prohibited_gpu_fails_the_gpu_mode(gpu):
    c = _sharing(gpu(2))
    assert c.status == doctor.FAIL and c.needed_by == ("gpu",) and "PROHIBITED" in c.detail


def test_no_gpu_no_sharing_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: a CPU machine
    assert [c for c in doctor.run_checks() if c.name == "gpu sharing"] == []
