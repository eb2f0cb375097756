"""Layouts, batch sizes and streams of the backends (issue 18, items 2, 5, 8), on CPU; GPU tier below.

The detector is the real architecture with seeded random weights at a small input size;
preprocessing is the application's own (``preprocess_frames``, ``preprocess_frames_torch``).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from source_code import backends as B
from source_code.detector import preprocess_frames, preprocess_frames_torch
from test_backends import SMALL_HW, model  # noqa: F401 (model is a fixture)

H, W = SMALL_HW


NCHW = (3 * H * W, H * W, W, 1)  # contiguous strides of a float (N, 3, H, W) tensor
NHWC = (3 * H * W, 1, W * 3, 3)  # channels_last strides of the same shape


@pytest.fixture(scope="module")
def frames_bgr():
    """Three BGR uint8 frames (N, H0, W0, 3) of another size than the network's, and of the same."""
    rng = np.random.default_rng(3)
    return {"resize": rng.integers(0, 256, (3, 120, 160, 3), dtype=np.uint8),
            "same": rng.integers(0, 256, (3, H, W, 3), dtype=np.uint8)}


# --------------------------------------------------------------------------- item 2: layouts


@pytest.mark.parametrize("size", ["resize", "same"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_torch_preprocessing_layout_follows_the_flag(frames_bgr, size, channels_last):
    x = preprocess_frames_torch(torch.from_numpy(frames_bgr[size]), SMALL_HW, channels_last=channels_last)
    assert x.shape == (3, 3, H, W) and x.dtype == torch.float32
    assert x.stride() == (NHWC if channels_last else NCHW)
    # the same values as the CPU path, whatever the layout
    ref = torch.from_numpy(preprocess_frames(list(frames_bgr[size]), SMALL_HW))
    assert float((x - ref).abs().max()) < 0.02


def test_cpu_preprocessing_is_contiguous_nchw(frames_bgr):
    x = torch.from_numpy(preprocess_frames(list(frames_bgr["resize"]), SMALL_HW))
    assert x.stride() == NCHW


@pytest.mark.parametrize("gpu_path", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
def test_the_detector_sees_the_backends_layout(model, frames_bgr, gpu_path, channels_last):
    """Each flag combination (--gpu-preprocess path on CPU tensors, --channels-last): the model
    receives the layout the backend was built for, never the layout preprocessing happened to leave."""
    backend = B.make_backend(model, batch_size=3, channels_last=channels_last, input_hw=SMALL_HW)
    seen = []
    backend.model.register_forward_pre_hook(lambda _m, args: seen.append((args[0].stride(), args[0].dtype)))
    raw = frames_bgr["resize"]
    if gpu_path:
        x = preprocess_frames_torch(torch.from_numpy(raw), SMALL_HW, channels_last=channels_last)
    else:
        x = torch.from_numpy(preprocess_frames(list(raw), SMALL_HW))
    out = backend(x)
    assert seen == [(NHWC if channels_last else NCHW, torch.float32)]
    assert all(o.is_contiguous() and o.dtype == torch.float32 for o in out)
    # a mismatched input layout is converted, not run as is
    seen.clear()
    backend(x.contiguous(memory_format=torch.contiguous_format if channels_last else torch.channels_last))
    assert seen == [(NHWC if channels_last else NCHW, torch.float32)]


def test_warm_up_goes_through_the_call_path(model):
    """The compile warm-up input is what calls deliver (contiguous NCHW float32), prepared the same way."""
    backend = B.make_backend(model, batch_size=2, channels_last=True, input_hw=SMALL_HW)
    ex = backend.example(2)
    assert ex.stride() == NCHW and ex.dtype == torch.float32
    assert backend.prepare(ex).stride() == NHWC
    seen = []
    backend.model.register_forward_pre_hook(lambda _m, args: seen.append(args[0].stride()))
    backend.warm_up(1)
    assert seen == [NHWC]


# --------------------------------------------------------------------------- item 8: true batch sizes


def test_eager_backend_runs_the_true_batch(model):
    backend = B.make_backend(model, batch_size=4, input_hw=SMALL_HW)
    sizes = []
    backend.model.register_forward_pre_hook(lambda _m, args: sizes.append(args[0].shape[0]))
    for n in (4, 1, 2):
        assert backend(torch.rand(n, 3, H, W))[0].shape[0] == n
    assert sizes == [4, 1, 2]


@pytest.mark.parametrize("batch, interval, streams, sizes", [
    (4, 1, 1, (4,)), (4, 3, 1, (2, 1)), (6, 4, 1, (2, 1)), (4, 2, 2, (2,)), (1, 5, 1, (1,)), (32, 3, 1, (11, 10)),
])
def test_expected_batch_sizes_follow_the_interval(batch, interval, streams, sizes):
    """Frame i of each source is detected when i % interval == 0, sources muxed round-robin (as the pipeline does)."""
    assert B.expected_batch_sizes(batch, interval=interval, streams=streams) == sizes


@pytest.mark.parametrize("sizes, message", [((5,), "outside 1..batch_size=4"), ((0, 2), "outside 1..batch_size=4")])
@pytest.mark.parametrize("kwargs", [dict(compile=True), dict(), dict(backend="onnxruntime")])
def test_batch_sizes_are_checked_early(model, sizes, message, kwargs, tmp_path):
    with pytest.raises(B.BackendUnavailable, match=message):
        B.make_backend(model, batch_size=4, batch_sizes=sizes, input_hw=SMALL_HW, cache_dir=tmp_path, **kwargs)
    assert not any(tmp_path.iterdir()), "nothing exported before the error"


# --------------------------------------------------------------------------- item 5: streams, on CPU none


def test_cpu_backends_run_without_streams(model):
    backend = B.make_backend(model, batch_size=2, input_hw=SMALL_HW)
    backend(torch.rand(2, 3, H, W))
    assert backend.stream is None and backend.event is None


def test_a_stream_for_a_cpu_backend_is_refused(model):
    with pytest.raises(B.BackendUnavailable, match="a CUDA stream was given for --device cpu"):
        B.make_backend(model, batch_size=2, input_hw=SMALL_HW, stream=object())


def _tf32_precisions():
    return torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision


def test_tf32_setting_sets_both_torch_flags(model):
    before = _tf32_precisions()
    try:
        B.make_backend(model, batch_size=1, input_hw=SMALL_HW, tf32=False)
        assert B.tf32_state() == (False, False) and _tf32_precisions() == ("ieee", "ieee")
        B.make_backend(model, batch_size=1, input_hw=SMALL_HW, tf32=True)
        assert B.tf32_state() == (True, True)
        B.make_backend(model, batch_size=1, input_hw=SMALL_HW)  # None: left as they are
        assert B.tf32_state() == (True, True)
    finally:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = before


def test_tf32_is_set_through_the_current_api_without_a_warning(model):
    """torch >= 2.9 deprecates ``allow_tf32`` (and raises on reading it back after the new API was
    used): set_tf32 goes through ``fp32_precision``, and says nothing."""
    import warnings

    before = _tf32_precisions()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            B.set_tf32(False)
            B.set_tf32(True)
            assert B.tf32_state() == (True, True)
        assert not [str(w.message) for w in caught], [str(w.message) for w in caught]
        assert _tf32_precisions() == ("tf32", "tf32")
    finally:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = before


# --------------------------------------------------------------------------- GPU tier


@pytest.mark.gpu
def test_cuda_graphs_one_graph_per_size_no_padding(model):
    x = torch.rand(4, 3, H, W, device="cuda")
    backend = B.make_backend(model, device="cuda", batch_size=4, cuda_graphs=True, input_hw=SMALL_HW,
                             batch_sizes=(4, 2))
    assert sorted(backend._graphs) == [2, 4]
    ref = backend(x)
    assert backend._graphs[2][1].shape[0] == 2  # the graph's input buffer holds 2 frames, not 4
    part = backend(x[:1])  # a size not captured ahead: eager, never captured once frames flow
    assert sorted(backend._graphs) == [2, 4] and backend.eager_calls == 1
    assert max(float((a - b[:1]).abs().max()) for a, b in zip(part, ref)) < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs", [dict(), dict(cuda_graphs=True), dict(channels_last=True)])
def test_cuda_backend_runs_on_its_stream_and_orders_by_events(model, kwargs):
    dev = torch.device("cuda", torch.cuda.current_device())
    own = torch.cuda.Stream(device=dev)
    backend = B.make_backend(model, device=dev, batch_size=2, input_hw=SMALL_HW, stream=own, **kwargs)
    assert backend.stream is own
    producer = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(producer):
        x = preprocess_frames_torch(torch.randint(0, 256, (2, 120, 160, 3), dtype=torch.uint8, device=dev), SMALL_HW)
        ready = torch.cuda.Event()
        ready.record(producer)
    out = backend(x, ready=ready)
    assert isinstance(backend.event, torch.cuda.Event)
    backend.event.synchronize()
    with torch.inference_mode():
        ref = backend.model(x.to(next(backend.model.parameters()).dtype))
    assert max(float((a - b.float()).abs().max()) for a, b in zip(out, ref)) < 1e-2


def test_the_backends_listing_says_fp32_is_tf32_on_ampere_and_hopper(capsys):
    from source_code.backends.registry import TF32_NOTE

    B.main([])
    lines = capsys.readouterr().out.splitlines()
    assert any("torch fp32 cuda" in line for line in lines)
    assert lines[-1] == TF32_NOTE and "TF32" in TF32_NOTE and "--tf32 off" in TF32_NOTE
