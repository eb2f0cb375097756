"""The QDQ (INT8) model with every float tensor in FP16, for a strongly typed TensorRT build.

Under strong typing TensorRT runs each layer in the type the ONNX model gives it: the FP32 QDQ
model's unquantized layers (the heads) would run in FP32, while ONNX Runtime's TensorRT provider
(``trt_fp16_enable``) runs them in FP16, which biases an INT8-versus-FP16 comparison. Here the
float parts become FP16: weights, biases and activations, with FP32 input and outputs kept (casts
at the edges). QuantizeLinear and DequantizeLinear stay in FP32 (``Q_DQ``: casts around them), so
their scales stay FP32: a small scale (a weight's per-channel one) in FP16 can be subnormal or
zero, and a zero scale quantizes a whole channel to nothing.
Conversion by ONNX Runtime's own tool (``onnxruntime.transformers.float16``).
"""
from __future__ import annotations

import os
from pathlib import Path

QDQ_FP16_OPSET = 19  # Cast and the QDQ pairs between FP16 layers: the opset TensorRT 10.12+ parses for them
Q_DQ = ("QuantizeLinear", "DequantizeLinear")
"""Kept in FP32, and with them their scales."""


def _topological(graph) -> None:
    """Sort ``graph``'s nodes so every input is made before it is used (the converter appends its casts)."""
    have = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    nodes, order = list(graph.node), []
    while nodes:
        ready = [n for n in nodes if all(i in have for i in n.input)]
        if not ready:
            raise ValueError("the converted graph has a cycle or an input nothing produces")
        for n in ready:
            order.append(n)
            have.update(n.output)
            nodes.remove(n)
    del graph.node[:]
    graph.node.extend(order)


def _fp32_scales(path: Path) -> bool:
    """Whether a cached conversion keeps its Q/DQ scales in FP32 (one made before this recipe did not)."""
    import onnx

    g = onnx.load(str(path), load_external_data=False).graph
    inits = {t.name: t.data_type for t in g.initializer}
    return all(inits.get(n.input[1], onnx.TensorProto.FLOAT) == onnx.TensorProto.FLOAT for n in g.node if n.op_type in Q_DQ)


def qdq_to_fp16(src: Path, dst: Path | None = None) -> Path:
    """``src`` (an FP32 QDQ model) with its float parts in FP16, FP32 I/O; cached as ``<stem>-fp16rest.onnx``."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    src = Path(src)
    dst = Path(dst) if dst is not None else src.with_name(f"{src.stem}-fp16rest.onnx")
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime and _fp32_scales(dst):
        return dst
    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True, op_block_list=list(Q_DQ))
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            op.version = max(op.version, QDQ_FP16_OPSET)
    _topological(model.graph)
    onnx.checker.check_model(model)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, dst)
    return dst
