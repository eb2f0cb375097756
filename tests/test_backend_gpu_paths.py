"""The GPU paths that can be checked without a GPU (issue 18, items 4 and 7), on real exports and sessions.

- ONNX Runtime: a CUDA provider asked for but not started (here: the CPU build, as with a
  CUDA 12 onnxruntime-gpu beside a CUDA 13 torch) falls back to CPU silently; the backend
  must refuse it with the cause. The TensorRT provider needs ORT >= 1.27 for TensorRT 11.
- TensorRT FP16 comes from an FP16 ONNX export whose input and outputs stay float32.
"""
from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from source_code import backends as B
from source_code.backends.ort import check_ort_tensorrt, check_session_providers
from test_backends import SMALL_HW, model  # noqa: F401 (model is a fixture)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("gpu_paths_cache")


def test_fp16_export_has_float16_body_and_float32_io(model, cache):
    path = B.ensure_onnx(model, cache_dir=cache, input_hw=SMALL_HW, fp16=True)
    assert path.name.endswith("-fp16.onnx")
    proto = onnx.load(str(path))
    f32, f16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
    assert [i.type.tensor_type.elem_type for i in proto.graph.input] == [f32]
    assert [o.type.tensor_type.elem_type for o in proto.graph.output] == [f32, f32, f32]
    conv_weights = {n.input[1] for n in proto.graph.node if n.op_type == "Conv"}
    types = Counter(i.data_type for i in proto.graph.initializer if i.name in conv_weights)
    assert types == Counter({f16: 22}), "every convolution's weights in float16"
    assert {p.key: p.value for p in proto.metadata_props}["labkit.precision"] == "fp16"
    # It runs (ONNX Runtime CPU) and agrees with the FP32 model to FP16 accuracy.
    x = torch.rand(2, 3, *SMALL_HW)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.inference_mode():
        ref = model(x)
    assert all(g.dtype == np.float32 for g in got)
    assert max(float(np.abs(g - r.numpy()).max()) for g, r in zip(got, ref)) < 5e-2
    # The FP32 export is a different file, float32 throughout.
    fp32 = B.ensure_onnx(model, cache_dir=cache, input_hw=SMALL_HW)
    assert fp32 != path
    assert {i.data_type for i in onnx.load(str(fp32)).graph.initializer} == {f32}


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(),
                    reason="this onnxruntime has a CUDA provider: the fallback shows only with the CPU build")
@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning")
def test_cuda_provider_fallback_is_refused_with_its_cause(model, cache):
    """A real session asking for CUDA on this CPU-only onnxruntime: ORT falls back without an error."""
    path = B.ensure_onnx(model, cache_dir=cache, input_hw=SMALL_HW)
    requested = [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
    session = ort.InferenceSession(str(path), providers=requested)
    assert session.get_providers() == ["CPUExecutionProvider"]  # the silent fallback
    with pytest.raises(B.BackendUnavailable) as info:
        check_session_providers(requested, session.get_providers(), ort_version=ort.__version__)
    msg = str(info.value)
    assert "could not start its CUDA provider and fell back to CPUExecutionProvider" in msg
    assert "pip install --force-reinstall --no-deps onnxruntime-gpu" in msg
    check_session_providers(["CPUExecutionProvider"], session.get_providers(), ort_version=ort.__version__)


@pytest.mark.parametrize("ort_version, trt_version, ok", [
    ("1.26.1", "11.4.0.106", False), ("1.27.0", "11.4.0.106", True), ("1.32.0", "11.0.0", True),
    ("1.20.0", "10.13.3.9", True), ("1.26.0", None, True), ("1.26.0+cu130", "11.1", False),
])
def test_ort_tensorrt_provider_needs_1_27_for_tensorrt_11(ort_version, trt_version, ok):
    if ok:
        check_ort_tensorrt(ort_version, trt_version)
        return
    with pytest.raises(B.BackendUnavailable, match=r"pip install 'onnxruntime-gpu>=1\.27', or pip install 'tensorrt>=10,<11'"):
        check_ort_tensorrt(ort_version, trt_version)


@pytest.mark.gpu
def test_ort_cuda_runs_on_the_backends_stream(model, cache):
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDA provider here: pip install onnxruntime-gpu")
    dev = torch.device("cuda", torch.cuda.current_device())
    backend = B.make_backend(model, backend="onnxruntime", device=dev, batch_size=2, input_hw=SMALL_HW, cache_dir=cache)
    assert backend.stream is not None and backend.stream.cuda_stream != 0
    opts = backend.session.get_provider_options()["CUDAExecutionProvider"]
    assert opts["user_compute_stream"] == str(backend.stream.cuda_stream)
    x = torch.rand(2, 3, *SMALL_HW, device=dev)
    out = backend(x)
    with torch.inference_mode():
        ref = copy.deepcopy(model).to(dev)(x)
    assert max(float((a - b).abs().max()) for a, b in zip(out, ref)) < 1e-2
