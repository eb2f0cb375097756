"""INT8 that is INT8: the QDQ model ONNX Runtime runs on CPU quantizes every convolution, and
``labkit.report.ort_profile`` reads ONNX Runtime's own op profile of it.

Real parts only: the detector (trained weights when present, else seeded random weights: the
graph and the quantization recipe do not depend on training), torch's ONNX exporter,
onnxruntime.quantization with a small calibration on generated scene frames, and profiles
written by ONNX Runtime itself.
"""
from __future__ import annotations

import collections
import json

import numpy as np
import onnx
import pytest
import torch

from labkit.report import ort_profile
from source_code import backends as B
from source_code.backends.calibration import quantize_qdq
from source_code.detector import DEFAULT_WEIGHTS, INPUT_HW, build_detector, load_detector

# A small calibration (one scene, 4 frames) keeps the test quick; the recipe is the application's.
SMALL = B.CalibrationSettings(seeds=(9101,), frames_per_seed=4, seconds=1.0)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("int8_cache")


@pytest.fixture(scope="module")
def fp32_path(cache):
    if DEFAULT_WEIGHTS.is_file():
        model = load_detector()
    else:
        torch.manual_seed(0)
        model = build_detector().eval()
    return B.ensure_onnx(model, cache_dir=cache, input_hw=INPUT_HW)


@pytest.fixture(scope="module")
def int8_path(fp32_path, cache):
    return B.ensure_int8_onnx(fp32_path, calibration=SMALL, input_hw=INPUT_HW, cache_dir=cache,
                              workdir=cache / "scenes")


@pytest.fixture(scope="module")
def frames(cache):
    return B.scene_frames(seed=9901, count=2, seconds=1.0, workdir=cache / "scenes")


def profile(path, x, prefix):
    return ort_profile.profile_model(path, x, runs=1, prefix=prefix)


def test_every_conv_of_the_cpu_model_is_quantized_in_the_graph(fp32_path, int8_path):
    g = onnx.load(str(int8_path)).graph
    producer = {o: n for n in g.node for o in n.output}
    consumers = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            consumers[i].append(n)
    convs = [n for n in g.node if n.op_type == "Conv"]
    assert len(convs) == sum(n.op_type == "Conv" for n in onnx.load(str(fp32_path)).graph.node) == 22
    for conv in convs:
        # DequantizeLinear on the activation and on the weight, QuantizeLinear on the output:
        # the group ONNX Runtime fuses into one QLinearConv.
        assert producer[conv.input[0]].op_type == "DequantizeLinear", conv.name
        assert producer[conv.input[1]].op_type == "DequantizeLinear", conv.name
        assert [c.op_type for c in consumers[conv.output[0]]] == ["QuantizeLinear"], conv.name
    # Each Relu is folded into its Conv's output range; Add and Resize take quantized inputs.
    ops = collections.Counter(n.op_type for n in g.node)
    assert ops["Relu"] == 0
    for n in g.node:
        if n.op_type in ("Add", "Resize"):
            assert producer[n.input[0]].op_type == "DequantizeLinear", n.name
    # Activations are uint8 with a zero point; weights int8 per output channel.
    weight_dq = [producer[c.input[1]] for c in convs]
    inits = {t.name: t for t in g.initializer}
    scales = [onnx.numpy_helper.to_array(inits[dq.input[1]]) for dq in weight_dq]
    assert all(s.ndim == 1 and s.size > 1 for s in scales), "weights must be quantized per channel"
    act_zp = onnx.numpy_helper.to_array(inits[producer[convs[0].input[0]].input[2]])
    assert act_zp.dtype == np.uint8


def test_onnx_runtime_runs_every_conv_as_qlinearconv(int8_path, frames, tmp_path):
    df = ort_profile.read_profile(profile(int8_path, frames, tmp_path / "int8"))
    ran = collections.Counter(df["op_type"])
    assert ran["QLinearConv"] == 22
    assert ran["Conv"] == 0, "a Conv ran in float"
    shares = ort_profile.class_shares(profile(int8_path, frames, tmp_path / "int8b"))
    assert shares.sum() == pytest.approx(1.0)
    assert shares["quantized"] > 0.5


def test_op_profile_of_real_fp32_and_int8_profiles(fp32_path, int8_path, frames, tmp_path):
    fp32 = ort_profile.op_profile(profile(fp32_path, frames, tmp_path / "fp32"))
    assert set(fp32["class"]) == {"float"}
    assert fp32.iloc[0]["op_type"] == "Conv" and fp32.iloc[0]["calls"] == 22
    assert fp32["share"].sum() == pytest.approx(1.0)
    assert list(fp32["total_ms"]) == sorted(fp32["total_ms"], reverse=True)
    int8 = ort_profile.op_profile(profile(int8_path, frames, tmp_path / "int8"))
    by_op = int8.groupby("op_type")["class"].first()
    assert by_op["QLinearConv"] == "quantized" and by_op["QuantizeLinear"] == "qdq"
    assert by_op["Sub"] == "float"  # the input normalization, before the first QuantizeLinear
    resize = int8[int8["op_type"] == "Resize"]
    assert set(resize["input_type"]) == {"uint8"} and set(resize["class"]) == {"quantized"}


def test_op_class_and_bad_profiles(tmp_path):
    assert ort_profile.op_class("MatMulInteger") == "quantized"
    assert ort_profile.op_class("DequantizeLinear", "int8") == "qdq"
    assert ort_profile.op_class("Conv", "float") == "float"
    assert ort_profile.op_class("Transpose", "uint8") == "quantized"
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(ort_profile.ProfileError, match="enable_profiling"):
        ort_profile.read_profile(bad)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps([{"cat": "Session", "name": "model_loading_uri", "dur": 5}]))
    with pytest.raises(ort_profile.ProfileError, match="no kernel events"):
        ort_profile.read_profile(empty)
    with pytest.raises(ort_profile.ProfileError, match="no such file"):
        ort_profile.read_profile(tmp_path / "missing.json")


def test_tensorrt_target_is_symmetric_int8_with_float_heads(fp32_path, cache):
    import dataclasses

    trt = B.ensure_int8_onnx(fp32_path, calibration=dataclasses.replace(SMALL, target="tensorrt"),
                             input_hw=INPUT_HW, cache_dir=cache, workdir=cache / "scenes")
    g = onnx.load(str(trt)).graph
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    zps = [inits[n.input[2]] for n in g.node if n.op_type == "QuantizeLinear"]
    assert zps and all(z.dtype == np.int8 and not z.any() for z in zps), "TensorRT needs int8 zero points of 0"
    outputs = {o.name for o in g.output}
    heads = [n for n in g.node if n.op_type == "Conv" and set(n.output) & outputs]
    producer = {o: n for n in g.node for o in n.output}
    assert len(heads) == 3 and all(n.input[1] not in producer for n in heads), "heads keep float weights"


def test_unknown_target_is_one_line(fp32_path, tmp_path):
    import dataclasses

    with pytest.raises(ValueError, match="choose one of cpu, tensorrt"):
        quantize_qdq(fp32_path, tmp_path / "x.onnx", calibration=dataclasses.replace(SMALL, target="gpu"),
                       input_hw=INPUT_HW)


def test_a_model_is_picked_by_the_input_size_it_takes(fp32_path, int8_path, cache):
    """The cache holds one model per input size (small mode's 192x320, full mode's 384x640); 05
    took the newest INT8 model, a full-mode one after a full lab, and ONNX Runtime refused small
    mode's batch. ``ort_profile.takes`` reads the model's own input dimensions."""
    if DEFAULT_WEIGHTS.is_file():
        model = load_detector()
    else:
        torch.manual_seed(0)
        model = build_detector().eval()
    small = B.ensure_onnx(model, cache_dir=cache, input_hw=(192, 320))
    h, w = INPUT_HW
    assert small != fp32_path
    for path in (fp32_path, int8_path):
        assert ort_profile.takes(path, np.zeros((4, 3, h, w), np.float32))  # any batch: it is dynamic
        assert not ort_profile.takes(path, np.zeros((4, 3, 192, 320), np.float32))
    assert ort_profile.takes(small, np.zeros((2, 3, 192, 320), np.float32))
    assert not ort_profile.takes(small, np.zeros((2, 3, h, w), np.float32))


def test_the_tensorrt_recipe_keeps_biases_float_and_qdq_scales_fp32(fp32_path, cache):
    """What TensorRT's ONNX parser is given for INT8 (the TensorRT target, its float parts in FP16):
    no DequantizeLinear of an INT32 bias (the parser refuses one), every Q/DQ scale FP32 (an FP16
    scale of a small weight channel can be subnormal or zero), and Conv biases float."""
    import dataclasses

    from source_code.backends.qdq_fp16 import qdq_to_fp16

    src = B.ensure_int8_onnx(fp32_path, calibration=dataclasses.replace(SMALL, target="tensorrt"),
                             input_hw=INPUT_HW, cache_dir=cache, workdir=cache / "scenes")
    g = onnx.load(str(qdq_to_fp16(src))).graph
    inits = {t.name: t for t in g.initializer}
    qdq = [n for n in g.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq
    assert not [n.name for n in qdq if n.input[0] in inits and inits[n.input[0]].data_type == onnx.TensorProto.INT32]
    assert {inits[n.input[1]].data_type for n in qdq} == {onnx.TensorProto.FLOAT}
    smallest = min(float(np.abs(onnx.numpy_helper.to_array(inits[n.input[1]])).min()) for n in qdq)
    assert smallest > 0  # no scale underflowed to zero
    producer = {o: n for n in g.node for o in n.output}
    biases = [c.input[2] for c in g.node if c.op_type == "Conv" and len(c.input) > 2]
    assert biases and all(b in inits and inits[b].data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT)
                          for b in biases if b not in producer), "biases stay float initializers"
    assert not any(producer[b].op_type == "DequantizeLinear" for b in biases if b in producer)
