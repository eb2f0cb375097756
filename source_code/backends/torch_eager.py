"""PyTorch backends: eager, fp16, channels_last and torch.compile (CUDA graphs: ``cuda_graphs.py``).

FP32 on an Ampere or Hopper GPU means TF32 convolutions under PyTorch's defaults (see
``base.set_tf32`` and ``make_backend(tf32=...)``).
"""
from __future__ import annotations

import copy
from typing import Callable, Sequence

import torch

from source_code.backends.base import Backend, backend_stream, outputs_tuple, warm_sizes


class TorchBackend(Backend):
    """Eager PyTorch, optionally fp16, channels_last, or torch.compile; always at the true batch size."""

    def __init__(self, model: torch.nn.Module, *, device: torch.device, precision: str, batch_size: int,
                 channels_last: bool, compile: bool, input_hw: tuple[int, int],
                 batch_sizes: Sequence[int] | None = None, stream=None):
        self.device, self.batch_size, self.input_hw = device, batch_size, input_hw
        self.precision, self.channels_last = precision, channels_last
        self.dtype = torch.float16 if precision == "fp16" else torch.float32
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.stream = backend_stream(device, stream)
        # A private copy: .half() and channels_last would otherwise change the caller's model.
        m = copy.deepcopy(model).eval().to(device=device, dtype=self.dtype, memory_format=self.memory_format)
        self.model = m
        self._forward: Callable = m
        self.compiled = compile
        self.prepared: tuple[int, ...] = ()  # batch sizes compiled (or warmed) before the first frame
        self.eager_calls = 0  # calls at a size not prepared: run eagerly, never compiled inside the run
        self.note: str | None = None  # what the run should be told of how it runs (the compile cap)
        parts = ["torch", precision] + (["channels_last"] if channels_last else []) + (["compile"] if compile else [])
        self.name = "-".join(parts)
        if compile:
            # One static graph per batch size, compiled here for the sizes the run will use
            # (batch_sizes, the clip's last batch included), not padded: a short batch does the
            # work of its own frames. A size not listed runs eagerly (``eager_calls``): a
            # recompile inside the timed frames would cost seconds (dynamic=False).
            self._forward = torch.compile(m, dynamic=False)
            from labkit import annotate

            sizes = warm_sizes(batch_size, batch_sizes)
            limit = recompile_limit()
            # dynamo compiles a function at most `limit` times, then runs it eagerly without a word:
            # the largest sizes (the full batch first) are compiled, the rest run eagerly, said here
            self.prepared = sizes[:limit]
            if len(sizes) > limit:
                rest = ", ".join(map(str, sizes[limit:]))
                self.note = (f"torch.compile: {limit} of {len(sizes)} batch sizes compiled (dynamo's recompile limit, "
                             f"torch._dynamo.config); batches of {rest} run eagerly")
            with annotate.range("torch_compile"):
                for n in self.prepared:
                    self.warm_up(n)
            stop_compile_workers()
        else:
            # eager too: the first call at a shape picks its kernels (cuDNN's heuristics, oneDNN's
            # primitives) and grows the allocator, which must not land in the timed frames
            self.prepared = warm_sizes(batch_size, batch_sizes)
            for n in self.prepared:
                self.warm_up(n)

    def example(self, n: int) -> torch.Tensor:
        """A zero batch of ``n`` frames as the pipeline delivers it: float32, contiguous NCHW."""
        h, w = self.input_hw
        return torch.zeros((n, 3, h, w), device=self.device)

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` in the dtype and memory format this backend runs, whatever layout it came in."""
        return x.to(self.dtype).contiguous(memory_format=self.memory_format)

    def warm_up(self, n: int) -> None:
        """One call at batch ``n`` through the same path as ``__call__`` (layout, dtype, stream)."""
        self(self.example(n))

    def forward_for(self, n: int) -> Callable:
        """What runs a batch of ``n``: the compiled graph for a prepared size, else the eager model."""
        if self.compiled and self.prepared and n not in self.prepared:
            self.eager_calls += 1
            return self.model
        return self._forward

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.inference_mode():
            out = outputs_tuple(self.forward_for(x.shape[0])(self.prepare(x)))
            return tuple(o.float().contiguous() for o in out)

    def close(self) -> None:
        self.model = None
        self._forward = None


def recompile_limit() -> int:
    """How many graphs dynamo compiles for one function before it falls back to eager
    (``torch._dynamo.config.recompile_limit``; ``cache_size_limit`` before torch 2.6)."""
    import torch._dynamo.config as dynamo

    return int(getattr(dynamo, "recompile_limit", None) or getattr(dynamo, "cache_size_limit", 8))


def stop_compile_workers() -> None:
    """Stop Inductor's compile-worker processes once every size is compiled: left running they
    share the cores with the timed frames (measured on a 2-core CPU: 26 frames at batch 4 ran at
    0.4-0.55x the frames/s of 24 with them, 1.0-1.5x without). Nothing compiles after set-up (an
    unseen size runs eagerly); a later compile would start them again."""
    try:
        from torch._inductor.async_compile import shutdown_compile_workers
    except ImportError:  # a torch without Inductor's worker pool: nothing to stop
        return
    shutdown_compile_workers()
