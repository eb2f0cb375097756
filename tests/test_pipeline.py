"""detect_video / pipeline: every flag combination the lab uses on CPU, results, bad input.

Clips are generated on the fly (source_code.scenes, 320x192, 10 fps) and the network runs at
96x160 (``--input-hw``) to stay fast; accuracy at full size is checked in test_app_accuracy.py.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from labkit import annotate
from source_code.detect_video import main
from source_code.stages import STAGES
from source_code.scenes import SceneConfig, make_video

FAST = ["--input-hw", "96x160", "--device", "cpu", "--warmup", "2"]
N = 12


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    video, _ = make_video(d / "clip.mp4", seconds=N / 10, config=SceneConfig(seed=31, width=320, height=192, fps=10))
    return video


@pytest.fixture(scope="module")
def _cache(tmp_path_factory):
    return tmp_path_factory.mktemp("backend_cache")  # shared: the ONNX export happens once


@pytest.fixture(autouse=True)
def _reports(tmp_path, monkeypatch, _cache):
    monkeypatch.setenv("LABKIT_REPORTS", str(tmp_path / "reports"))
    # the application reads no cache variable: every run here passes --cache-dir (FAST is in each argv)
    monkeypatch.setitem(globals(), "FAST", [*FAST, "--cache-dir", str(_cache)])


def run(args, tmp_path, capsys=None):
    res = tmp_path / "r.json"
    rc = main([*args, "--results", str(res)])
    doc = json.loads(res.read_text()) if res.exists() else None
    return rc, doc


def count_frames(path) -> int:
    cap = cv2.VideoCapture(str(path))
    n = 0
    while cap.read()[0]:
        n += 1
    return n


def test_defaults_write_video_and_complete_results(clip, tmp_path):
    out = tmp_path / "out.mp4"
    rc, doc = run(["--input", str(clip), "--output", str(out), *FAST], tmp_path)
    assert rc == 0
    assert doc["status"] == "ok" and doc["warnings"] == []
    assert doc["frames"] == N and doc["timed_frames"] == N - 2 and doc["warmup_frames"] == 2
    assert doc["fps"] > 0 and doc["seconds"] > 0
    assert set(doc["stages"]) == set(STAGES) and all(v is not None and v >= 0 for v in doc["stages"].values())
    assert 0 < doc["latency_ms"]["p50"] <= doc["latency_ms"]["p99"]
    acc = doc["accuracy"]
    assert all(isinstance(acc[k], float) for k in ("map50", "mota", "idf1", "hota"))
    assert "env" not in doc  # labkit records the environment in the ledger
    assert annotate.read_results(tmp_path / "r.json") == doc
    assert doc["config"]["batch_size"] == 1 and doc["config"]["backend"] == "torch"
    assert count_frames(out) == N


def test_default_output_goes_beside_the_results(clip, tmp_path):
    rc, doc = run(["--input", str(clip), *FAST], tmp_path)
    assert rc == 0
    assert Path(doc["config"]["output"]) == tmp_path / "r.mp4"
    assert count_frames(doc["config"]["output"]) == N
    assert not (tmp_path / "reports").exists()  # no labkit environment variable read


def test_without_results_or_output_no_video_is_written(clip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--input", str(clip), *FAST]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags, frames", [
    (["--batch-size", "4"], N),
    (["--batch-size", "5"], N),  # last batch partial
    (["--streams", "2"], 2 * N),
    (["--streams", "3", "--batch-size", "3"], 3 * N),
    (["--queues"], N),
    (["--queues", "--streams", "2", "--batch-size", "4"], 2 * N),
    (["--no-osd"], N),
    (["--interval", "3"], N),
    (["--interval", "2", "--queues", "--batch-size", "2"], N),
    (["--channels-last"], N),
    (["--backend", "onnxruntime"], N),
    (["--backend", "onnxruntime", "--batch-size", "4", "--queues"], N),
    (["--frames", "5", "--warmup", "0"], 5),
    (["--precision", "fp32", "--backend", "torch", "--osd"], N),
])
def test_flag_combinations_run_on_cpu(clip, tmp_path, flags, frames):
    rc, doc = run(["--input", str(clip), *FAST, *flags], tmp_path)
    assert rc == 0, doc
    assert doc["status"] == "ok"
    assert doc["frames"] == frames
    assert doc["accuracy"]["mota"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--compile"], ["--backend", "onnxruntime", "--precision", "int8"]])
def test_slow_flag_combinations_run_on_cpu(clip, tmp_path, flags):
    rc, doc = run(["--input", str(clip), *FAST, *flags, "--frames", "4"], tmp_path)
    assert rc == 0 and doc["status"] == "ok"


def test_stage_ranges_are_annotated_with_batch_and_items(clip, tmp_path):
    rc, _ = run(["--input", str(clip), *FAST, "--batch-size", "4", "--interval", "2"], tmp_path)
    assert rc == 0
    recs = annotate.records()
    names = {r.name for r in recs}
    assert set(STAGES) <= names
    infer = [r for r in recs if r.name == "infer"]
    assert [r.batch for r in infer] == [0, 1, 2]
    assert sum(r.items for r in infer) == N // 2  # detector on every 2nd frame
    assert sum(r.items for r in recs if r.name == "display") == N


def test_interval_runs_detector_on_every_kth_frame(clip, tmp_path):
    rc, doc = run(["--input", str(clip), *FAST, "--interval", "3", "--warmup", "0"], tmp_path)
    assert rc == 0
    assert doc["stage_detail"]["infer"]["items"] == 4
    assert doc["stage_detail"]["track"]["items"] == N
    assert "4 frames the detector ran on" in doc["accuracy"]["note"]
    # `stages` is per processed frame: the detector's time is spread over all N frames.
    infer = doc["stage_detail"]["infer"]
    assert doc["stages"]["infer"] == pytest.approx(infer["total_ms"] / N, rel=1e-3, abs=1e-3)
    assert doc["stages"]["infer"] < infer["ms_per_item"]


def test_sync_and_queued_give_the_same_answer(clip, tmp_path):
    _, a = run(["--input", str(clip), *FAST, "--batch-size", "2"], tmp_path)
    _, b = run(["--input", str(clip), *FAST, "--batch-size", "2", "--queues"], tmp_path)
    _, c = run(["--input", str(clip), *FAST, "--batch-size", "2", "--streams", "2"], tmp_path)
    assert a["accuracy"]["counts"] == b["accuracy"]["counts"] == c["accuracy"]["counts"]
    assert a["accuracy"]["map50"] == b["accuracy"]["map50"] == c["accuracy"]["map50"]


def test_video_without_ground_truth_says_so(clip, tmp_path):
    other = tmp_path / "user_video.mp4"
    shutil.copy(clip, other)
    rc, doc = run(["--input", str(other), *FAST], tmp_path)
    assert rc == 0 and doc["status"] == "ok"
    assert all(doc["accuracy"][k] is None for k in ("map50", "mota", "idf1", "hota"))
    assert "no ground truth" in doc["accuracy"]["note"]


def test_warmup_longer_than_the_clip_warns(clip, tmp_path):
    rc, doc = run(["--input", str(clip), *FAST, "--warmup", "50"], tmp_path)
    assert rc == 0 and doc["fps"] > 0
    assert any("warm-up" in w for w in doc["warnings"])


# ----------------------------------------------------------------------------- bad input
def cli(*args, timeout=120):
    """Run the real CLI; return (exit code, stderr lines)."""
    r = subprocess.run([sys.executable, "source_code/detect_video.py", *args], capture_output=True, text=True,
                       timeout=timeout)
    assert "Traceback" not in r.stderr
    return r.returncode, [line for line in r.stderr.splitlines() if line.strip()], r.stdout


def assert_failed_results(path: Path):
    if path.exists():
        assert json.loads(path.read_text())["status"] == "failed"


def test_missing_file(tmp_path):
    res = tmp_path / "r.json"
    rc, err, _ = cli("--input", str(tmp_path / "nope.mp4"), "--results", str(res))
    assert rc == 2 and err == [f"detect_video: error: input not found: {tmp_path / 'nope.mp4'}"]
    assert_failed_results(res)


def test_truncated_mp4_is_unreadable(clip, tmp_path):
    bad = tmp_path / "trunc.mp4"
    data = clip.read_bytes()
    bad.write_bytes(data[: len(data) // 2])  # mp4v from OpenCV keeps its index (moov) at the end
    res = tmp_path / "r.json"
    rc, err, _ = cli("--input", str(bad), "--results", str(res), *FAST)
    assert rc == 1 and len(err) == 1 and "not a readable video" in err[0]
    assert_failed_results(res)


def test_garbage_file_is_unreadable(tmp_path):
    bad = tmp_path / "noise.mp4"
    bad.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    rc, err = main_err(["--input", str(bad), *FAST])
    assert rc == 1 and "not a readable video" in err


def main_err(argv):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        rc = main(argv)
    lines = [line for line in buf.getvalue().splitlines() if line.strip()]
    assert len(lines) <= 1, lines
    return rc, (lines[0] if lines else "")


def test_zero_frame_video(tmp_path):
    empty = tmp_path / "empty.mp4"
    w = cv2.VideoWriter(str(empty), cv2.VideoWriter_fourcc(*"mp4v"), 10, (320, 192))
    w.release()
    res = tmp_path / "r.json"
    rc, err = main_err(["--input", str(empty), "--results", str(res), *FAST])
    assert rc == 1 and ("no decodable frames" in err or "not a readable video" in err)
    assert json.loads(res.read_text())["status"] == "failed"


def test_video_damaged_midway_keeps_frames_and_reports_partial(tmp_path):
    video, _ = make_video(tmp_path / "long.avi", seconds=3, config=SceneConfig(seed=32, width=320, height=192, fps=10))
    data = video.read_bytes()
    video.write_bytes(data[: int(len(data) * 0.6)])
    out = tmp_path / "partial.mp4"
    res = tmp_path / "r.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        rc = main(["--input", str(video), "--output", str(out), "--results", str(res), *FAST])
    doc = json.loads(res.read_text())
    assert rc == 0
    assert doc["status"] == "partial"
    assert 0 < doc["frames"] < 30
    assert any("damaged or truncated" in w for w in doc["warnings"])
    assert "damaged or truncated" in buf.getvalue()
    assert count_frames(out) == doc["frames"]
    assert doc["accuracy"]["mota"] is not None  # evaluated on the frames that were decoded


@pytest.mark.parametrize("args, code, message", [
    (["--batch-size", "0"], 2, "--batch-size must be at least 1"),
    (["--streams", "0"], 2, "--streams must be at least 1"),
    (["--interval", "0"], 2, "--interval must be at least 1"),
    (["--frames", "0"], 2, "--frames must be at least 1"),
    (["--input-hw", "100x100"], 2, "multiples of 32"),
    (["--gpu-preprocess"], 3, "--gpu-preprocess needs a CUDA device"),
    (["--cuda-graphs"], 3, "cuda"),
    (["--precision", "fp16"], 3, "fp16"),
    (["--weights", "/nonexistent/w.pt"], 3, "detector weights not found"),
])
def test_bad_requests_give_one_line_and_exit_code(clip, tmp_path, args, code, message):
    if torch.cuda.is_available() and code == 3 and "weights" not in args:
        pytest.skip("this machine has a GPU")
    res = tmp_path / "r.json"
    rc, err = main_err(["--input", str(clip), *FAST, "--device", "cpu", *args, "--results", str(res)])
    assert rc == code
    assert err.startswith("detect_video: error:") and message.lower() in err.lower()
    assert_failed_results(res)


def test_unknown_backend_cli(clip):
    rc, err, _ = cli("--input", str(clip), "--backend", "openvino")
    assert rc == 2 and len(err) == 1 and "invalid choice: 'openvino'" in err[0]


def test_batch_size_zero_cli(clip):
    rc, err, _ = cli("--input", str(clip), "--batch-size", "0")
    assert rc == 2 and err == ["detect_video: error: --batch-size must be at least 1 (got 0)"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_device_cuda_without_gpu_cli(clip, tmp_path):
    res = tmp_path / "r.json"
    rc, err, _ = cli("--input", str(clip), "--device", "cuda", "--results", str(res))
    assert rc == 3 and len(err) == 1 and "no CUDA GPU" in err[0]
    assert_failed_results(res)


def test_tensorrt_without_tensorrt_cli(clip, tmp_path):
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available():
        pytest.skip("TensorRT and a GPU are present")
    rc, err, _ = cli("--input", str(clip), "--backend", "tensorrt", *FAST)
    assert rc == 3 and len(err) == 1 and "tensorrt" in err[0].lower()


def test_refuses_to_overwrite_an_input(clip, tmp_path):
    before = clip.read_bytes()
    rc, err = main_err(["--input", str(clip), "--output", str(clip), *FAST])
    assert rc == 2 and "refusing to overwrite" in err
    assert clip.read_bytes() == before


@pytest.mark.parametrize("mode", [[], ["--queues"]], ids=["sync", "queued"])
def test_out_of_memory_names_the_fix(clip, tmp_path, mode, _cache):
    """A real allocation failure: the process may use 8 GiB of address space, and a batch of 4
    frames at a 16384x16384 input needs more. One line naming smaller settings, exit code 4,
    a results file that says 'failed'."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    res = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "source_code/detect_video.py", "--input", str(clip), "--frames", "8",
                        "--batch-size", "4", "--input-hw", "16384x16384", "--device", "cpu", "--warmup", "0",
                        "--no-osd", "--results", str(res), "--cache-dir", str(_cache), *mode],
                       capture_output=True, text=True, timeout=300, preexec_fn=limit)
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 4 and len(err) == 1, r.stderr[-2000:]
    assert err[0].startswith("detect_video: error: out of memory at --batch-size 4, --streams 1, input 16384x16384")
    assert "Try --batch-size 2 or a smaller --input-hw than 16384x16384" in err[0]
    assert_failed_results(res)
    assert "out of memory" in json.loads(res.read_text())["error"]


def test_other_errors_are_not_called_out_of_memory():
    from source_code.errors import out_of_memory_message
    from source_code.options import PipelineConfig

    cfg = PipelineConfig(inputs=("x.mp4",), batch_size=1, streams=4)
    assert out_of_memory_message(ValueError("shape mismatch"), cfg) is None
    msg = out_of_memory_message(MemoryError(), cfg)
    assert "Try fewer --streams or a smaller --input-hw than 384x640" in msg and "nvidia-smi" not in msg
    gpu = out_of_memory_message(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), cfg)
    assert "(CUDA out of memory. Tried to allocate 2.00 GiB)" in gpu and "nvidia-smi" in gpu
