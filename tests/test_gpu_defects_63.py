"""Issue 63's defects that a CPU can show: the TensorRT backend's close order (with a recording
fake context: TensorRT cannot be installed here, the one fake this file allows) and torch.compile's
recompile cap (a real compile)."""
from __future__ import annotations

import gc

import torch

from source_code.backends.tensorrt_run import TensorRTBackend


class _Recorded:
    """Stands in for a TensorRT object; says in ``log`` when it is synchronized or dropped."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def synchronize(self):
        self.log.append(f"{self.name}.synchronize")

    def __del__(self):
        self.log.append(f"{self.name} dropped")


def test_tensorrt_close_waits_for_its_stream_before_dropping_the_context():
    log: list[str] = []
    b = TensorRTBackend.__new__(TensorRTBackend)  # no engine: the order of close() is what is checked
    b.device = torch.device("cpu")
    b.stream, b.context, b.engine, b._runtime = (_Recorded(n, log) for n in ("stream", "context", "engine", "runtime"))
    b.close()
    gc.collect()
    assert log[:4] == ["stream.synchronize", "context dropped", "engine dropped", "runtime dropped"], log
    b.close()  # twice: nothing left to wait for
    assert log.count("stream.synchronize") == 1


def test_compile_prepares_at_most_dynamos_recompile_limit_and_says_the_rest_run_eagerly():
    """A run whose batches come in more sizes than dynamo recompiles (its limit, 8 by default) used
    to list every size as compiled while dynamo ran the ninth and later eagerly without a word:
    now the largest sizes are compiled, the others run eagerly by choice, and the backend says so.
    A real torch.compile (Inductor on this CPU) of a one-layer model."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from source_code.backends.registry import compile_unavailable
    from source_code.backends.torch_eager import TorchBackend, recompile_limit

    why = compile_unavailable("cpu")
    if why:
        import pytest
        pytest.skip(why)
    torch._dynamo.reset()
    limit = recompile_limit()
    sizes = list(range(1, limit + 3))  # two more sizes than dynamo compiles
    model = torch.nn.Conv2d(3, 4, 3, padding=1)
    b = TorchBackend(model, device=torch.device("cpu"), precision="fp32", batch_size=max(sizes), channels_last=False,
                     compile=True, input_hw=(8, 8), batch_sizes=sizes)
    assert b.prepared == tuple(sorted(sizes, reverse=True)[:limit])
    assert f"{limit} of {len(sizes)} batch sizes compiled" in b.note
    assert "batches of 2, 1 run eagerly" in b.note
    compiled = counters["stats"]["unique_graphs"]
    for n in sizes:  # every size runs, and none compiles again inside the frames
        out = b(torch.rand(n, 3, 8, 8))
        assert out[0].shape[0] == n
    assert counters["stats"]["unique_graphs"] == compiled
    assert b.eager_calls == 2


def test_ort_tensorrt_engine_cache_is_a_folder_per_gpu_and_versions(tmp_path):
    """An engine is specific to the GPU and TensorRT that built it: two GPUs, or another onnxruntime or
    TensorRT, never share ORT's TensorRT cache folder (they shared cache/ort_tensorrt)."""
    from source_code.backends.ort import ort_tensorrt_cache

    h200 = ort_tensorrt_cache(tmp_path, gpu="NVIDIA H200", ort_version="1.22.0", trt_version="10.12.0.36")
    assert h200 == tmp_path / "ort_tensorrt" / "NVIDIA_H200-ort1.22.0-trt10.12.0.36"
    others = {ort_tensorrt_cache(tmp_path, gpu="NVIDIA H100 80GB HBM3", ort_version="1.22.0", trt_version="10.12.0.36"),
              ort_tensorrt_cache(tmp_path, gpu="NVIDIA H200", ort_version="1.23.0", trt_version="10.12.0.36"),
              ort_tensorrt_cache(tmp_path, gpu="NVIDIA H200", ort_version="1.22.0", trt_version="10.13.0.35")}
    assert len(others) == 3 and h200 not in others
    assert all(p.parent == tmp_path / "ort_tensorrt" for p in {h200, *others})


class _SeesBatches(torch.nn.Module):
    """A one-conv model that remembers the batch size of every call it gets."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.seen: list[int] = []

    def forward(self, x):
        self.seen.append(int(x.shape[0]))
        return self.conv(x)


def test_the_eager_backend_runs_every_batch_size_it_will_see_before_the_first_frame():
    """The first call at a shape picks its kernels and grows the allocator: the eager backend now
    calls each size the run will use once at set-up (it called none), as compile and graphs do."""
    from source_code.backends.torch_eager import TorchBackend

    b = TorchBackend(_SeesBatches(), device=torch.device("cpu"), precision="fp32", batch_size=8,
                     channels_last=False, compile=False, input_hw=(8, 8), batch_sizes=[8, 3, 5])
    assert sorted(b.model.seen) == [3, 5, 8] and b.prepared == (8, 5, 3)
    b(torch.rand(5, 3, 8, 8))
    assert sorted(b.model.seen) == [3, 5, 5, 8]


def test_onnx_runtime_steps_follow_the_labs_device():
    """The ONNX Runtime steps run where the lab runs: CUDA on a GPU machine whose onnxruntime has the
    CUDA provider, else the CPU (they were pinned to the CPU). Decisive where onnxruntime-gpu is
    installed: here (the CPU build) they stay on the CPU, as the row's device says."""
    import onnxruntime

    from labbook.steps import catalogue

    cuda = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    for name in ("ort_fp32", "ort_int8"):
        assert catalogue("full", gpu=True)[name].flags["device"] == ("cuda" if cuda else "cpu")
        assert catalogue("full", gpu=False)[name].flags["device"] == "cpu"
