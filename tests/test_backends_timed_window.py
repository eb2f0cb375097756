"""Issue 23's backend defects, their logic on CPU: no compile inside the timed frames (tail and
--interval sizes prepared ahead, unseen sizes eager), ORT's run options, the compile and TensorRT
checks, and the INT8 model's unquantized layers in FP16."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from source_code.backends import make_backend
from source_code.backends.base import BackendUnavailable, expected_batch_sizes, muxed_batch_sizes
from source_code.backends.ort import NO_SYNC_KEY, run_options
from source_code.backends.registry import compile_unavailable
from source_code.backends.tensorrt_build import check_tensorrt_version
from source_code.detector import build_detector

HW = (64, 96)


def test_the_clip_tail_is_among_the_sizes_prepared():
    assert expected_batch_sizes(4) == (4,)
    assert expected_batch_sizes(4, frames=[26]) == (4, 2)  # the 26 frames at batch 4
    assert 24 in expected_batch_sizes(32, frames=[600])  # full GPU settings: 600 frames at batch 32
    assert 8 in expected_batch_sizes(32, interval=3, frames=[600])
    assert muxed_batch_sizes(32, 3, [600])[-1] == 8
    # two streams of different lengths: after the short one ends the batches hold one stream only
    assert muxed_batch_sizes(4, 1, [3, 7]) == [4, 4, 2]
    assert expected_batch_sizes(4, streams=2, frames=[3, 7]) == (4, 2)
    assert expected_batch_sizes(4, frames=[None]) == (4,)  # unknown length: the tail runs eagerly


def _compiles() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["stats"].values()) + sum(counters["frames"].values())


def test_compile_prepares_its_sizes_ahead_and_runs_an_unseen_size_eagerly():
    torch.manual_seed(0)
    model = build_detector().eval()
    backend = make_backend(model, batch_size=4, compile=True, input_hw=HW, batch_sizes=expected_batch_sizes(4, frames=[26]))
    assert backend.prepared == (4, 2)
    before = _compiles()
    x = torch.rand(4, 3, *HW)
    with torch.inference_mode():
        ref = [o.float() for o in model(x[:3])]
    for n in (4, 2, 4, 2):
        backend(x[:n])
    assert _compiles() == before  # the prepared sizes: no compile once frames flow
    out = backend(x[:3])  # a size not prepared: eager, not compiled
    assert _compiles() == before and backend.eager_calls == 1
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_ort_gpu_calls_do_not_synchronize_inside_run():
    opts = run_options(torch.device("cuda", 0))  # RunOptions need no GPU to be made
    assert opts.get_run_config_entry(NO_SYNC_KEY) == "1"
    assert run_options(torch.device("cpu")) is None


def test_compile_needs_a_compiler_on_cuda_too(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no compiler on it
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    assert "needs a C compiler for Triton (gcc): apt-get install gcc" in compile_unavailable("cuda")
    assert "needs a C++ compiler (g++)" in compile_unavailable("cpu")
    with pytest.raises(BackendUnavailable, match="C\\+\\+ compiler"):
        make_backend(build_detector(), compile=True, input_hw=HW)


@pytest.mark.parametrize("version, ok", [("10.0.1", False), ("10.11.0.33", False), ("10.12.0.36", True),
                                         ("10.13.3.9", True), ("11.0.0", True), ("8.6.1", False)])
def test_strong_typing_needs_tensorrt_10_12(version, ok):
    if ok:
        check_tensorrt_version(version)
    else:
        with pytest.raises(BackendUnavailable, match=r"too old: .*complete from TensorRT 10\.12; pip install 'tensorrt>=10\.12'"):
            check_tensorrt_version(version)


def test_int8_models_unquantized_layers_become_fp16(tmp_path):
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    from source_code.backends.qdq_fp16 import qdq_to_fp16

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
    torch.onnx.export(m, torch.zeros(1, 3, 16, 16), tmp_path / "f.onnx", input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    head = [n.name for n in onnx.load(tmp_path / "f.onnx").graph.node if n.op_type == "Conv"][-1]
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.random((1, 3, 16, 16), dtype=np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    nodes_to_exclude=[head])  # the last conv stays unquantized, as the detector's heads
    out = qdq_to_fp16(tmp_path / "q.onnx")
    model = onnx.load(out)
    floats = {i.name: i.data_type for i in model.graph.initializer if i.data_type in (1, 10)}
    scales = {n.input[1] for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    assert scales and {floats[s] for s in scales} == {onnx.TensorProto.FLOAT}  # Q/DQ scales stay FP32 (issue 32)
    rest = {k: v for k, v in floats.items() if k not in scales}
    assert rest and set(rest.values()) == {onnx.TensorProto.FLOAT16}  # every float weight and bias in FP16
    assert [t.type.tensor_type.elem_type for t in (*model.graph.input, *model.graph.output)] == [1, 1]  # FP32 I/O
    x = rng.random((1, 3, 16, 16), dtype=np.float32)
    a = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"x": x})[0]
    b = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    assert b.dtype == np.float32 and np.abs(a - b).max() < 0.02 * np.abs(a).max() + 1e-3


@pytest.mark.gpu
def test_cuda_graphs_capture_ahead_share_one_pool_and_never_capture_mid_run():
    torch.manual_seed(0)
    model = build_detector().eval()
    dev = torch.device("cuda", 0)
    backend = make_backend(model, device=dev, batch_size=4, cuda_graphs=True, input_hw=HW,
                           batch_sizes=expected_batch_sizes(4, frames=[26]))
    assert backend.captures == 2 and backend.prepared == (4, 2)
    x = torch.rand(4, 3, *HW, device=dev)
    for n in (4, 2, 3, 4):
        backend(x[:n])
    torch.cuda.synchronize()
    assert backend.captures == 2 and backend.eager_calls == 1  # size 3: eager, no capture inside the frames
    ref = [o.float() for o in model.to(dev)(x[:2])]
    for a, b in zip(backend(x[:2]), ref):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_compile_on_cuda_prepares_the_tail():
    model = build_detector().eval()
    backend = make_backend(model, device="cuda:0", batch_size=4, compile=True, input_hw=HW,
                           batch_sizes=expected_batch_sizes(4, frames=[26]))
    before = _compiles()
    x = torch.rand(4, 3, *HW, device="cuda:0")
    for n in (4, 2, 4):
        backend(x[:n])
    assert _compiles() == before
