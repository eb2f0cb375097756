"""Detector contract: shapes, FLOPs, decoding, preprocessing, weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from source_code.detector import (DEFAULT_WEIGHTS, INPUT_HW, NUM_CLASSES, STRIDE, build_detector, count_flops, decode,
                                  load_detector, preprocess_frames, preprocess_frames_torch, scale_boxes)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_detector().eval()


@pytest.mark.parametrize("hw", [(96, 160), (128, 224)])
@pytest.mark.parametrize("n", [1, 3])
def test_forward_returns_three_maps_at_stride_4(model, hw, n):
    with torch.no_grad():
        out = model(torch.rand(n, 3, *hw))
    assert isinstance(out, tuple) and len(out) == 3
    h, w = hw[0] // STRIDE, hw[1] // STRIDE
    assert out[0].shape == (n, NUM_CLASSES, h, w)
    assert out[1].shape == (n, 2, h, w) and out[2].shape == (n, 2, h, w)
    assert all(o.dtype == torch.float32 for o in out)


def test_cost_is_realistic(model):
    flops = count_flops(model, INPUT_HW)
    assert flops >= 5e9
    # FLOPs scale with the pixel count: the network is fully convolutional
    assert count_flops(model, (INPUT_HW[0] // 2, INPUT_HW[1] // 2)) == pytest.approx(flops / 4, rel=0.05)


def test_flops_counted_on_meta_equal_a_real_forward_pass(model):
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros(2, 3, 96, 160))
    assert count_flops(model, (96, 160), batch=2) == counter.get_total_flops() // 2
    assert next(model.parameters()).device.type == "cpu"  # the model itself stays where it was


def test_decode_recovers_a_hand_built_peak():
    hm = torch.full((1, 2, 24, 40), -10.0)
    hm[0, 1, 10, 20] = 3.0  # pedestrian peak
    hm[0, 1, 10, 21] = 2.0  # neighbour, suppressed by the 3x3 max-pool
    wh = torch.zeros(1, 2, 24, 40)
    wh[0, :, 10, 20] = torch.tensor([4.0, 8.0])
    off = torch.zeros(1, 2, 24, 40)
    off[0, :, 10, 20] = torch.tensor([0.5, 0.25])
    det = decode((hm, wh, off), score_thresh=0.5, max_det=10)
    assert len(det) == 1 and det[0].shape == (1, 6)
    x1, y1, x2, y2, score, cls = det[0][0]
    cx, cy = (20 + 0.5) * STRIDE, (10 + 0.25) * STRIDE
    assert (x1, y1, x2, y2) == pytest.approx((cx - 8, cy - 16, cx + 8, cy + 16))
    assert score == pytest.approx(torch.sigmoid(torch.tensor(3.0)).item()) and cls == 1


def test_decode_respects_threshold_and_max_det():
    torch.manual_seed(1)
    out = (torch.randn(2, 2, 24, 40) * 3, torch.rand(2, 2, 24, 40) * 5, torch.rand(2, 2, 24, 40))
    dets = decode(out, score_thresh=0.0, max_det=7)
    assert [d.shape for d in dets] == [(7, 6), (7, 6)]
    assert all((np.diff(d[:, 4]) <= 0).all() for d in dets)
    assert all(len(d) == 0 or d[:, 4].min() >= 0.9 for d in decode(out, score_thresh=0.9, max_det=100))


def test_decode_accepts_channels_last_outputs():
    # a channels_last network (--channels-last) returns non-contiguous maps; decode must not
    # assume a contiguous layout (it once called .view and failed on the GPU)
    torch.manual_seed(2)
    out = (torch.randn(3, 2, 24, 40) * 3, torch.rand(3, 2, 24, 40) * 5, torch.rand(3, 2, 24, 40))
    cl = tuple(o.to(memory_format=torch.channels_last) for o in out)
    assert not cl[0].is_contiguous()
    for a, b in zip(decode(out, score_thresh=0.3, max_det=20), decode(cl, score_thresh=0.3, max_det=20)):
        np.testing.assert_array_equal(a, b)


def test_scale_boxes_maps_to_frame():
    d = np.array([[10, 20, 30, 40, 0.9, 0]], np.float32)
    s = scale_boxes(d, (384, 640), (720, 1280))
    assert s[0, :4] == pytest.approx([20, 37.5, 60, 75])
    assert d[0, 0] == 10  # input untouched


def test_preprocess_cpu_and_torch_agree():
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (72, 128, 3), dtype=np.uint8) for _ in range(2)]
    cpu = preprocess_frames(frames, (72, 128))  # no resize: exact
    tor = preprocess_frames_torch(torch.from_numpy(np.stack(frames)), (72, 128)).numpy()
    assert cpu.shape == (2, 3, 72, 128) and cpu.dtype == np.float32
    assert np.allclose(cpu, tor, atol=1e-6)
    assert np.allclose(cpu[0, 0], frames[0][:, :, 2] / 255.0)  # channel 0 is red
    cpu_r = preprocess_frames(frames, (36, 64))
    tor_r = preprocess_frames_torch(torch.from_numpy(np.stack(frames)), (36, 64)).numpy()
    assert np.abs(cpu_r - tor_r).mean() < 0.01  # resize implementations differ by rounding only


def test_load_detector_missing_weights_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_detector.py"):
        load_detector(tmp_path / "nope.pt")


def test_shipped_weights_load_small_and_in_eval_mode():
    assert DEFAULT_WEIGHTS.is_file(), "run python source_code/train_detector.py"
    assert DEFAULT_WEIGHTS.stat().st_size < 20e6
    m = load_detector()
    assert not m.training
    assert all(p.dtype == torch.float32 for p in m.parameters())
    assert (DEFAULT_WEIGHTS.parent / "MODEL_CARD.md").is_file()


def test_onnx_export_with_dynamic_batch(tmp_path, model):
    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "det.onnx"
    x = torch.rand(1, 3, 64, 96)
    torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["hm", "wh", "off"],
                      dynamic_axes={"x": {0: "n"}, "hm": {0: "n"}, "wh": {0: "n"}, "off": {0: "n"}}, dynamo=False)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x3 = torch.rand(3, 3, 64, 96)
    got = sess.run(None, {"x": x3.numpy()})
    with torch.no_grad():
        want = model(x3)
    for g, w in zip(got, want):
        assert np.allclose(g, w.numpy(), atol=1e-4)
