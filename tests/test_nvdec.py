"""--decode nvdec (source_code/nvdec.py): where the GPU's decoder cannot be used, the run ends early in
one line naming what is missing and the fix, as a missing TensorRT does. This machine has no GPU, no
NVIDIA driver and no PyNvVideoCodec: each message is the real one for a real absence."""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from source_code.errors import EXIT_UNAVAILABLE, PipelineError
from source_code.nvdec import NVCUVID, require_nvdec
from source_code.scenes import SceneConfig, make_video

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "source_code" / "detect_video.py"


def _has_nvcuvid() -> bool:
    try:
        ctypes.CDLL(NVCUVID)
        return True
    except OSError:
        return False


def test_nvdec_on_a_cpu_device_ends_the_run_in_one_line_before_the_model_loads(tmp_path):
    video, _ = make_video(tmp_path / "clip.mp4", seconds=0.5, config=SceneConfig(seed=3, width=160, height=96))
    env = {**os.environ, "LABKIT_REPORTS": str(tmp_path / "reports")}
    env.pop("LABKIT_DEBUG", None)
    r = subprocess.run([sys.executable, str(APP), "--input", str(video), "--device", "cpu", "--decode", "nvdec",
                        "--results", str(tmp_path / "r.json"), "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == EXIT_UNAVAILABLE, r.stderr
    assert lines == ["detect_video: error: --decode nvdec decodes on the GPU: run with --device cuda, or use "
                     "--decode cpu"], lines
    assert not (tmp_path / "cache").exists()  # nothing converted, nothing counted: it stopped first


@pytest.mark.skipif(_has_nvcuvid(), reason=f"this machine has {NVCUVID}")
def test_a_driver_without_libnvcuvid_is_one_line_naming_it():
    with pytest.raises(PipelineError) as err:
        require_nvdec(torch.device("cuda"))  # a device object: no GPU is touched
    msg = str(err.value)
    assert err.value.exit_code == EXIT_UNAVAILABLE and "\n" not in msg
    assert msg.startswith(f"--decode nvdec needs the NVIDIA driver's {NVCUVID} (") and msg.endswith("use --decode cpu")


@pytest.mark.skipif(importlib.util.find_spec("PyNvVideoCodec") is not None, reason="PyNvVideoCodec is installed")
def test_a_missing_pynvvideocodec_is_one_line_with_the_pip_command():
    """With a driver library loaded in its place (the C library: real, loadable), what is missing is the module."""
    libc = ctypes.util.find_library("c")
    with pytest.raises(PipelineError) as err:
        require_nvdec(torch.device("cuda"), load=lambda _name: ctypes.CDLL(libc))
    msg = str(err.value)
    assert "\n" not in msg and "No module named 'PyNvVideoCodec'" in msg
    assert "pip install PyNvVideoCodec==2.2.4" in msg and msg.endswith("or use --decode cpu")
