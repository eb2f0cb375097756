"""The GPU defects of issue 32, each shown where a CPU can show it (and on a GPU where only it can):
ONNX Runtime's sessions are the ones asked for, INT8 on CUDA is calibrated for the GPU, levers the
application refuses together are data it exposes, postprocess's ``cuda_ms`` is GPU work only, and
the CPU resize writes straight into the upload buffer."""
from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest
import torch

from source_code import backends as B
from source_code.backends.ort import OrtBackend, calibration_target, check_session
from source_code.detector import (INPUT_HW, build_detector, decode, decode_device, filter_detections,
                                  preprocess_frames)
from source_code.options import BY_NAME, REFUSED_TOGETHER, refused

HW = (96, 160)


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    torch.manual_seed(0)
    return B.ensure_onnx(build_detector().eval(), cache_dir=tmp_path_factory.mktemp("ort"), input_hw=HW)


def _open(path, providers):
    return OrtBackend(path, device=torch.device("cpu"), precision="fp32", batch_size=1, input_hw=HW,
                      providers=providers)


def test_a_session_without_the_provider_asked_for_is_a_one_line_error(onnx_path):
    """ONNX Runtime falls back to the CPU without a word when a provider cannot start (here: CUDA
    and TensorRT, which this onnxruntime lacks): the backend refuses the session instead."""
    for asked, named in (([("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"], "CUDA"),
                         ([("TensorrtExecutionProvider", {"device_id": 0, "trt_int8_enable": True}),
                           "CPUExecutionProvider"], "Tensorrt")):
        with pytest.raises(B.BackendUnavailable) as err:
            _open(onnx_path, asked)
        msg = str(err.value)
        assert "\n" not in msg and named in msg and ("pip install" in msg or "install" in msg), msg
    assert _open(onnx_path, ["CPUExecutionProvider"]).providers == ["CPUExecutionProvider"]  # as asked: fine


def test_a_session_whose_options_differ_from_those_asked_for_is_an_error():
    asked = [("CUDAExecutionProvider", {"device_id": 0, "has_user_compute_stream": "1", "user_compute_stream": "1234"}),
             "CPUExecutionProvider"]
    got = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    same = {"CUDAExecutionProvider": {"device_id": "0", "has_user_compute_stream": "1", "user_compute_stream": "1234"}}
    check_session(asked, got, same, ort_version="x")
    bare = {"CUDAExecutionProvider": {"device_id": "0", "has_user_compute_stream": "0", "user_compute_stream": "0"}}
    with pytest.raises(B.BackendUnavailable, match="has_user_compute_stream='0', not the '1' asked for"):
        check_session(asked, got, bare, ort_version="x")
    with pytest.raises(B.BackendUnavailable, match="started CUDA, CPU instead of the Tensorrt, CUDA, CPU"):
        check_session([("TensorrtExecutionProvider", {}), *asked], got, same, ort_version="x")


def test_int8_on_cuda_is_calibrated_for_the_gpu():
    assert calibration_target(torch.device("cpu")) == "cpu"
    assert calibration_target(torch.device("cuda", 0)) == "tensorrt"  # symmetric INT8 Q/DQ


def test_levers_the_application_refuses_together_are_its_own_data(tmp_path, capsys):
    """``optimized`` reads which options the application refuses together; each such set really
    exits 3 with a line naming them (on CPU the refusal comes before any device check)."""
    from source_code.detect_video import main
    from source_code.scenes import SceneConfig, make_video

    assert refused({"compile": True, "cuda_graphs": True}) == frozenset({"compile", "cuda_graphs"})
    assert refused({"compile": True, "cuda_graphs": False}) is None
    assert refused({"backend": "onnxruntime", "channels_last": True})
    video, _ = make_video(tmp_path / "c.mp4", seconds=0.4, config=SceneConfig(seed=31, width=320, height=192, fps=10))
    for together in REFUSED_TOGETHER:
        flags = [BY_NAME[o].flag for o in sorted(together)]
        rc = main(["--input", str(video), "--device", "cpu", "--input-hw", "96x160", "--no-osd", *flags,
                   "--cache-dir", str(tmp_path / "cache"), "--results", str(tmp_path / "r.json")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 3 and all(f in err[-1] for f in flags), err


def test_decode_split_into_gpu_and_host_parts_is_the_same_decode():
    torch.manual_seed(1)
    outs = (torch.randn(2, 2, 24, 40), torch.rand(2, 2, 24, 40) * 8, torch.rand(2, 2, 24, 40))
    whole = decode(outs, score_thresh=0.3)
    parts = filter_detections(decode_device(outs).numpy(), score_thresh=0.3)
    assert len(whole) == 2 and all(np.array_equal(a, b) for a, b in zip(whole, parts))


def test_cpu_resize_writes_straight_into_the_buffer_given(tmp_path):
    """The CPU-resize path fills the (pinned) upload buffer frame by frame: the same values as
    before, in the buffer given, and no float batch made on the way (allocation peak well under one)."""
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (720, 1280, 3), dtype=np.uint8) for _ in range(8)]
    h, w = INPUT_HW
    expected = preprocess_frames(frames, INPUT_HW)
    buf = np.empty((8, 3, h, w), np.float32)
    batch_bytes = buf.nbytes
    tracemalloc.start()
    try:
        got = preprocess_frames(frames, INPUT_HW, out=buf)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.shares_memory(got, buf) and np.array_equal(got, expected)
    assert peak < batch_bytes / 4, (peak, batch_bytes)
    with pytest.raises(ValueError, match="out must be float32"):
        preprocess_frames(frames, INPUT_HW, out=np.empty((4, 3, h, w), np.float32))


@pytest.mark.gpu
def test_postprocess_cuda_ms_is_gpu_work_only():
    """Slow host filtering (50 ms a batch) does not show in postprocess's GPU time."""
    from source_code.stages import Batch, Postprocess

    dev = torch.device("cuda", torch.cuda.current_device())
    post = Postprocess(input_hw=INPUT_HW, device=dev)
    real = post._filter

    def slow(*a, **k):
        time.sleep(0.05)
        return real(*a, **k)

    post._filter = slow
    for i in range(5):
        h, w = INPUT_HW[0] // 4, INPUT_HW[1] // 4
        outs = tuple(torch.randn(4, c, h, w, device=dev) for c in (2, 2, 2))
        b = Batch(index=i, frames=[np.zeros((720, 1280, 3), np.uint8)] * 4, detect=[True] * 4, outputs=outs)
        b.done = torch.cuda.Event()
        b.done.record()
        post(b)
        assert len(b.dets) == 4
    assert post.work.total_ms() < 5 * 50 / 2  # host time would be over 250 ms


@pytest.mark.gpu
def test_cpu_resize_on_cuda_fills_one_pinned_buffer_and_matches_the_cpu_path():
    from source_code.stages import Preprocess

    dev = torch.device("cuda", torch.cuda.current_device())
    pre = Preprocess(device=dev, input_hw=INPUT_HW, gpu=False, batch_size=4, host_wait=True)
    rng = np.random.default_rng(0)
    for _ in range(4):
        frames = [rng.integers(0, 255, (720, 1280, 3), dtype=np.uint8) for _ in range(4)]
        x = pre.launch(pre.stage(frames))
        torch.cuda.synchronize()
        assert np.array_equal(x.cpu().numpy(), preprocess_frames(frames, INPUT_HW))
    assert pre.pinned.allocations == 2  # two buffers, used alternately, never a batch copied into them
