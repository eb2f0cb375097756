"""ONNX Runtime's own op profile as DataFrames: where a session's kernel time goes, by op type.

ONNX Runtime writes a Chrome-trace JSON when ``SessionOptions.enable_profiling`` is set
(``session.end_profiling()`` returns its path). Each kernel run is an event of category
``Node`` named ``<node>_kernel_time`` whose ``args`` hold ``op_name`` (the op type that ran
after graph optimization, e.g. ``QLinearConv`` once a DequantizeLinear -> Conv ->
QuantizeLinear group was fused) and ``provider``; ``dur`` is in microseconds.

- ``read_profile(path)``: one row per kernel run (node, op_type, provider, dur_us).
- ``op_profile(path)``: one row per op type and input type: calls, total ms, share of kernel
  time, and its class: ``quantized`` (integer kernels: QLinear*, *Integer, quantized contrib
  ops; and any other op whose first input is an 8-bit integer tensor, e.g. a Resize or
  Transpose moving quantized data), ``qdq`` (QuantizeLinear / DequantizeLinear, the
  conversions between float and integer), ``float`` (everything else).
- ``class_shares(path)``: the share of kernel time per class (sums to 1).
- ``profile_model(model, inputs, runs=)``: run an ONNX model ``runs`` times with profiling on
  and return the profile's path (every run is in it, the first one's allocations too).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

# Op types that compute on integers (ONNX and com.microsoft contrib ops run by ONNX Runtime).
QUANTIZED_OPS = frozenset({
    "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul", "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearAveragePool",
    "QLinearGlobalAveragePool", "QLinearLeakyRelu", "QLinearSigmoid", "QLinearSoftmax", "QLinearWhere",
    "QLinearReduceMean", "QGemm", "QAttention", "QOrderedMatMul", "NhwcQLinearConv", "FusedQLinearConv",
    "MatMulNBits",
})
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
CLASSES = ("quantized", "qdq", "float")


class ProfileError(ValueError):
    """The file is not an ONNX Runtime profile; the message says what to pass instead."""


INT8_TYPES = frozenset({"int8", "uint8"})


def op_class(op_type: str, input_type: str = "") -> str:
    """``quantized``, ``qdq`` or ``float`` for one op type (and the element type of its first input)."""
    if op_type in QDQ_OPS:
        return "qdq"
    if op_type in QUANTIZED_OPS or op_type.startswith("QLinear") or input_type in INT8_TYPES:
        return "quantized"
    return "float"


def _input_type(args: dict) -> str:
    shapes = args.get("input_type_shape") or [{}]
    first = shapes[0] if isinstance(shapes[0], dict) else {}
    return next(iter(first), "")


def read_profile(path: str | Path) -> pd.DataFrame:
    """Kernel runs of an ONNX Runtime profile JSON: node, op_type, input_type, provider, dur_us, class."""
    path = Path(path)
    try:
        events = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such file; pass the path session.end_profiling() returned") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not JSON ({exc}); pass the file ONNX Runtime wrote with "
                           "SessionOptions.enable_profiling") from None
    if isinstance(events, dict):  # a Chrome trace object rather than a bare event list
        events = events.get("traceEvents", [])
    rows = [(e["name"].removesuffix("_kernel_time"), e.get("args", {}).get("op_name", ""),
             _input_type(e.get("args", {})), e.get("args", {}).get("provider", ""), float(e.get("dur", 0)))
            for e in events if isinstance(e, dict) and e.get("cat") == "Node"
            and str(e.get("name", "")).endswith("_kernel_time")]
    if not rows:
        raise ProfileError(f"{path}: no kernel events; run the session at least once with profiling "
                           "enabled before end_profiling()")
    df = pd.DataFrame(rows, columns=["node", "op_type", "input_type", "provider", "dur_us"])
    df["class"] = [op_class(op, t) for op, t in zip(df["op_type"], df["input_type"])]
    return df


def op_profile(path: str | Path) -> pd.DataFrame:
    """Kernel time per op type and input type, largest first: op_type, input_type, class, calls,
    total_ms, share (0-1)."""
    df = read_profile(path)
    out = (df.groupby(["op_type", "input_type", "class"], as_index=False)
           .agg(calls=("dur_us", "size"), total_ms=("dur_us", "sum")))
    out["total_ms"] = out["total_ms"] / 1e3
    out["share"] = out["total_ms"] / out["total_ms"].sum()
    return out.sort_values("total_ms", ascending=False, ignore_index=True)


OPTIMIZATION = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
                "all": "ORT_ENABLE_ALL"}
"""ONNX Runtime's graph optimization levels, by the name :func:`profile_model` takes."""


def profile_model(model: str | Path, inputs, *, runs: int = 5, prefix: str | Path | None = None,
                  providers: tuple[str, ...] = ("CPUExecutionProvider",), optimization: str = "all") -> Path:
    """Run the ONNX model ``model`` ``runs`` times on ``inputs`` (an array for its first input, or a
    dict of input name -> array) with ONNX Runtime's profiling on; return the profile JSON's path
    (``<prefix>_<date>.json``; default prefix: the model's path without its suffix).
    ``optimization``: ONNX Runtime's graph optimization level, one of :data:`OPTIMIZATION`
    (``"all"``, its default, fuses Q/DQ groups into integer kernels)."""
    import onnxruntime as ort

    if optimization not in OPTIMIZATION:
        raise ValueError(f"optimization={optimization!r}: use one of {', '.join(OPTIMIZATION)}")
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION[optimization])
    so.enable_profiling = True
    so.profile_file_prefix = str(prefix if prefix is not None else Path(model).with_suffix(""))
    sess = ort.InferenceSession(str(model), so, providers=list(providers))
    feed = inputs if isinstance(inputs, dict) else {sess.get_inputs()[0].name: inputs}
    for _ in range(runs):
        sess.run(None, feed)
    return Path(sess.end_profiling())


def takes(model: str | Path, inputs) -> bool:
    """Whether the ONNX model ``model`` accepts an array shaped like ``inputs`` as its first input
    (a dynamic dimension takes any size). A model cache holds one file per input size: pick by
    this, not by the newest file."""
    import onnx

    dims = onnx.load(str(model), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    return len(dims) == inputs.ndim and all(not d.HasField("dim_value") or d.dim_value == n
                                            for d, n in zip(dims, inputs.shape))


def class_shares(path: str | Path) -> pd.Series:
    """Share of kernel time in quantized ops, in Q/DQ conversions and in float ops (sums to 1)."""
    ops = op_profile(path)
    return ops.groupby("class")["share"].sum().reindex(list(CLASSES), fill_value=0.0)
