"""Inference backends: the PyTorch variants, the early errors, the TensorRT and GPU tiers.

CPU tests use the real detector architecture (random weights, fixed seed) at a small input
size so they stay fast; ONNX and ONNX Runtime tests live in test_onnx.py.
"""
from __future__ import annotations

import pytest
import torch

from source_code import backends as B
from source_code.detector import build_detector

SMALL_HW = (64, 96)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_detector().eval()


@pytest.fixture(scope="module")
def frames():
    torch.manual_seed(1)
    return torch.rand(3, 3, *SMALL_HW)


def _reference(model, x):
    with torch.inference_mode():
        return model(x)


def _max_abs(a, b) -> float:
    return max(float((u.float() - v.float()).abs().max()) for u, v in zip(a, b))


# --------------------------------------------------------------------------- torch on CPU


def test_torch_fp32_is_the_model(model, frames):
    backend = B.make_backend(model, batch_size=3, input_hw=SMALL_HW)
    out = backend(frames)
    assert backend.name == "torch-fp32"
    assert isinstance(out, tuple) and len(out) == 3
    assert all(o.dtype == torch.float32 and o.device.type == "cpu" for o in out)
    assert _max_abs(out, _reference(model, frames)) == 0.0
    backend.close()


def test_torch_partial_batch_and_oversize(model, frames):
    backend = B.make_backend(model, batch_size=3, input_hw=SMALL_HW)
    out = backend(frames[:1])
    assert [tuple(o.shape) for o in out] == [(1, 2, 16, 24), (1, 2, 16, 24), (1, 2, 16, 24)]
    with pytest.raises(ValueError, match="exceeds batch_size=2"):
        B.make_backend(model, batch_size=2, input_hw=SMALL_HW)(frames)


def test_channels_last_matches_fp32(model, frames):
    backend = B.make_backend(model, batch_size=3, channels_last=True, input_hw=SMALL_HW)
    assert backend.name == "torch-fp32-channels_last"
    out = backend(frames)
    assert all(o.is_contiguous() for o in out)
    assert _max_abs(out, _reference(model, frames)) < 1e-4


def test_backend_does_not_modify_callers_model(model, frames):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    B.make_backend(model, batch_size=1, channels_last=True, input_hw=SMALL_HW)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert next(model.parameters()).is_contiguous()


def test_torch_compile_on_cpu_runs_the_true_batch(model, frames):
    """Cold inductor compile of the small model at two sizes: about 40 s on 2 cores, 8 s with a warm cache.

    No padding: a short batch (--interval, the clip's end) reaches the compiled detector at
    its own size, compiled ahead through ``batch_sizes``; a channels-last input is brought
    back to the NCHW layout the warm-up compiled for (no recompile on the first batch).
    """
    torch._dynamo.reset()
    backend = B.make_backend(model, batch_size=2, compile=True, input_hw=SMALL_HW, batch_sizes=(2, 1))
    assert backend.name == "torch-fp32-compile"
    seen = []
    compiled = backend._forward
    backend._forward = lambda x: seen.append((x.shape[0], x.stride(), x.dtype)) or compiled(x)
    ref = _reference(model, frames[:2])
    assert _max_abs(backend(frames[:2]), ref) < 1e-4
    out = backend(frames[:1].contiguous(memory_format=torch.channels_last))
    assert out[0].shape[0] == 1
    assert _max_abs(out, [r[:1] for r in ref]) < 1e-4
    h, w = SMALL_HW
    nchw = (3 * h * w, h * w, w, 1)
    assert seen == [(2, nchw, torch.float32), (1, nchw, torch.float32)]


# --------------------------------------------------------------------------- errors, raised early

NO_GPU = not torch.cuda.is_available()


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(backend="caffe"), "unknown backend 'caffe': choose one of torch, onnxruntime, tensorrt"),
        (dict(precision="fp8"), "unknown precision 'fp8'"),
        (dict(batch_size=0), "batch_size must be at least 1"),
        (dict(precision="int8"), "use --backend onnxruntime or tensorrt with --precision int8"),
        (dict(backend="onnxruntime", precision="fp16"), "offers fp32 and int8"),
        (dict(backend="ort", channels_last=True), "--channels-last applies to --backend torch only"),
        (dict(backend="ort", compile=True, cuda_graphs=True), "--cuda-graphs and --compile apply to --backend torch only"),
        (dict(device="tpu"), "use cpu or cuda"),
    ],
)
def test_bad_requests_fail_in_make_backend(model, kwargs, needle):
    with pytest.raises(B.BackendUnavailable, match=_escape(needle)):
        B.make_backend(model, input_hw=SMALL_HW, **kwargs)


@pytest.mark.skipif(not NO_GPU, reason="checks the messages given where there is no GPU")
@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(precision="fp16"), "fp16 needs a CUDA GPU (--device cuda)"),
        (dict(cuda_graphs=True), "CUDA graphs need --device cuda"),
        (dict(device="cuda"), "torch sees no CUDA GPU"),
        (dict(backend="onnxruntime", device="cuda"), "torch sees no CUDA GPU"),
    ],
)
def test_gpu_requests_without_gpu(model, kwargs, needle):
    with pytest.raises(B.BackendUnavailable, match=_escape(needle)):
        B.make_backend(model, input_hw=SMALL_HW, **kwargs)


def _tensorrt_importable() -> bool:
    try:
        import tensorrt  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.skipif(_tensorrt_importable(), reason="TensorRT is installed here; the missing-TensorRT message cannot show")
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_missing_tensorrt_message(model, device, tmp_path):
    with pytest.raises(B.BackendUnavailable) as info:
        B.make_backend(model, backend="tensorrt", precision="fp16", device=device, input_hw=SMALL_HW, cache_dir=tmp_path)
    msg = str(info.value)
    assert msg.startswith("TensorRT is not installed")
    assert "pip install tensorrt" in msg and "--backend torch / --backend onnxruntime" in msg
    assert not any(tmp_path.iterdir()), "nothing may be exported or built before the error"


def test_available_backends_lists_every_combination():
    rows = B.available_backends()
    keys = {(r["backend"], r["precision"], r["device"], r["variant"]) for r in rows}
    assert len(keys) == len(rows)
    assert all(set(r) == {"backend", "precision", "device", "variant", "available", "reason"} for r in rows)
    assert all(bool(r["reason"]) != r["available"] for r in rows)
    by_key = {(r["backend"], r["precision"], r["device"], r["variant"]): r for r in rows}
    assert by_key[("torch", "fp32", "cpu", "")]["available"]
    assert by_key[("onnxruntime", "int8", "cpu", "")]["available"]
    assert not by_key[("torch", "fp16", "cpu", "")]["available"]
    trt = [r for r in rows if r["backend"] == "tensorrt"]
    assert [r["precision"] for r in trt] == ["fp32", "fp16", "int8"]
    if not _tensorrt_importable():
        assert all(r["reason"].startswith("TensorRT is not installed") for r in trt)


# --------------------------------------------------------------------------- cache keys


def test_model_hash_follows_weights_and_input_size(model):
    h = B.model_hash(model, input_hw=SMALL_HW)
    assert h == B.model_hash(model, input_hw=SMALL_HW) and len(h) == 16
    assert h != B.model_hash(model, input_hw=(128, 96))
    other = build_detector().eval()
    assert h != B.model_hash(other, input_hw=SMALL_HW)


@pytest.mark.parametrize("field, value", [("precision", "int8"), ("batch_size", 32), ("gpu", "NVIDIA_A100"),
                                          ("trt_version", "10.9.0"), ("mhash", "ffff"), ("tf32", False)])
def test_engine_path_keys_every_setting(tmp_path, field, value):
    base = dict(mhash="abcd", precision="fp16", batch_size=8, gpu="NVIDIA_H100_80GB_HBM3", trt_version="10.3.0")
    a = B.engine_path(tmp_path, **base)
    b = B.engine_path(tmp_path, **{**base, field: value})
    assert a != b
    # "typed": strongly typed builds; engines of the earlier flag-based recipe are not reused
    assert a.name == "abcd-fp16-b1_8_8-NVIDIA_H100_80GB_HBM3-trt10.3.0-typed.engine"


def test_calibration_key_follows_settings():
    base = B.CalibrationSettings()
    assert base.key() == B.CalibrationSettings().key()
    assert base.key() != B.CalibrationSettings(seeds=(1, 2)).key()
    assert base.key() != B.CalibrationSettings(method="entropy").key()
    assert set(base.seeds).isdisjoint(range(0, 1000)), "calibration seeds must stay clear of evaluation seeds"
    assert min(base.seeds) < 100000, "and clear of the training seeds (>= 100000)"


# --------------------------------------------------------------------------- GPU tier


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs, tol", [
    (dict(precision="fp16"), 5e-2),
    (dict(precision="fp16", channels_last=True), 5e-2),
    (dict(channels_last=True), 1e-3),
    (dict(cuda_graphs=True), 1e-3),
    (dict(precision="fp16", cuda_graphs=True), 5e-2),
    (dict(compile=True), 1e-3),
])
def test_torch_cuda_variants(model, frames, kwargs, tol):
    gpu_model = build_detector().eval()
    gpu_model.load_state_dict(model.state_dict())
    x = frames.cuda()
    # tf32=False (before the reference): TF32 would otherwise make the fp32 comparisons depend on the GPU.
    backend = B.make_backend(gpu_model, device="cuda", batch_size=3, input_hw=SMALL_HW, tf32=False, **kwargs)
    ref = _reference(gpu_model.cuda(), x)
    out = backend(x)
    assert all(o.device.type == "cuda" and o.dtype == torch.float32 for o in out)
    assert _max_abs(out, ref) < tol
    part = backend(x[:2])  # partial batch: run at its own size (a graph captured for 2, a compile for 2)
    assert part[0].shape[0] == 2 and _max_abs(part, [r[:2] for r in ref]) < tol
    backend.close()


@pytest.mark.gpu
def test_cuda_graph_outputs_survive_next_replay(model, frames):
    backend = B.make_backend(model, device="cuda", batch_size=3, cuda_graphs=True, input_hw=SMALL_HW)
    x = frames.cuda()
    first = backend(x)
    kept = [o.clone() for o in first]
    backend(torch.zeros_like(x))
    assert _max_abs(first, kept) == 0.0


# --------------------------------------------------------------------------- TensorRT tier


def _need_gpu_for_tensorrt():
    # Not @pytest.mark.gpu: without TensorRT the skip reason must say TensorRT.
    if not torch.cuda.is_available():
        pytest.skip("TensorRT is importable but torch sees no CUDA GPU")


@pytest.mark.tensorrt
@pytest.mark.parametrize("precision, tol", [("fp32", 1e-2), ("fp16", 5e-2)])
def test_tensorrt_engine_matches_torch(model, frames, precision, tol, tmp_path):
    _need_gpu_for_tensorrt()
    x = frames.cuda()
    gpu_model = build_detector().eval()
    gpu_model.load_state_dict(model.state_dict())
    ref = _reference(gpu_model.cuda(), x)
    backend = B.make_backend(gpu_model, backend="tensorrt", precision=precision, device="cuda", batch_size=3,
                             input_hw=SMALL_HW, cache_dir=tmp_path)
    engines = list(tmp_path.glob("*.engine"))
    assert len(engines) == 1
    out = backend(x)
    assert _max_abs(out, ref) < tol
    assert _max_abs(backend(x[:1]), [r[:1] for r in ref]) < tol
    # A second backend reuses the cached engine instead of building again.
    mtime = engines[0].stat().st_mtime_ns
    B.make_backend(gpu_model, backend="tensorrt", precision=precision, device="cuda", batch_size=3,
                   input_hw=SMALL_HW, cache_dir=tmp_path).close()
    assert engines[0].stat().st_mtime_ns == mtime


@pytest.mark.tensorrt
def test_tensorrt_int8_engine_runs(model, frames, tmp_path):
    _need_gpu_for_tensorrt()
    calib = B.CalibrationSettings(seeds=(9101,), frames_per_seed=8, seconds=1.0)
    backend = B.make_backend(model, backend="tensorrt", precision="int8", device="cuda", batch_size=3,
                             input_hw=SMALL_HW, cache_dir=tmp_path, calibration=calib)
    out = backend(frames.cuda())
    assert all(torch.isfinite(o).all() for o in out)
    assert len(list(tmp_path.glob("*-int8-*.onnx"))) == 1


def _escape(text: str) -> str:
    import re

    return re.escape(text)


# --------------------------------------------------------------------------- benchmark script


def test_throughput_benchmark_writes_rows_and_skips(tmp_path):
    import csv
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "detector_throughput.py"
    spec = importlib.util.spec_from_file_location("detector_throughput", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.run(configs=["torch-fp32", "torch-fp16", "tensorrt-int8"], batch_sizes=[1, 2], device="cpu",
                     min_seconds=0.0, max_iters=1, weights=None, cache_dir=tmp_path, warmup=0,
                     log=lambda *_: None)
    status = [(r["config"], r["batch_size"], r["status"]) for r in rows]
    assert status[:2] == [("torch-fp32", 1, "ok"), ("torch-fp32", 2, "ok")]
    assert ("torch-fp16", 1, "skipped") in status  # one row per skipped config, not per batch size
    assert all(float(r["frames_per_s"]) > 0 for r in rows if r["status"] == "ok")
    csv_path, md_path = bench.write(rows, tmp_path / "t.csv")
    with csv_path.open() as f:
        assert [r["config"] for r in csv.DictReader(f)] == [r["config"] for r in rows]
    assert "fp16 needs a CUDA GPU" in md_path.read_text()
