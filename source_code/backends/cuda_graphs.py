"""PyTorch captured into CUDA graphs, one per batch size that occurs; replayed on the backend's stream."""
from __future__ import annotations

from typing import Sequence

import torch

from source_code.backends.base import outputs_tuple, warm_sizes
from source_code.backends.torch_eager import TorchBackend

# Graphs kept per backend: with --interval K and batch B the sizes that occur are about
# ceil(B/K), floor(B/K), B and the clip's last batch; sizes beyond this many run eagerly.
MAX_GRAPHS = 8


class CudaGraphBackend(TorchBackend):
    """One CUDA graph per batch size, all captured ahead for ``batch_sizes``; a size not captured
    runs eagerly (``eager_calls``). Nothing is captured once frames flow: a capture in
    ``capture_error_mode="global"`` while other stage threads make CUDA calls is invalidated,
    and it would cost its time inside the timed window.

    The graphs share one memory pool (``torch.cuda.graph_pool_handle()``). That is safe here:
    the graphs replay one at a time on the backend's stream, each graph's static input and
    outputs stay referenced (so no later capture reuses them), and a call copies the outputs
    out right after its replay.

    Each graph reads a static input buffer and writes static output buffers: a call copies
    ``x`` into the buffer of its size, replays, and returns copies of the outputs so the
    next replay cannot overwrite what the caller holds. No batch is padded, so a short batch
    costs the work of its own frames.
    """

    def __init__(self, model: torch.nn.Module, *, batch_sizes: Sequence[int] | None = None, **kw):
        super().__init__(model, compile=False, **kw)
        self.name += "-cuda_graphs"
        self._graphs: dict[int, tuple] = {}
        self.captures = 0  # graphs captured: all at set-up
        from labkit import annotate

        with annotate.range("cuda_graph_capture"), torch.cuda.device(self.device):
            self._pool = torch.cuda.graph_pool_handle()  # one pool for every size's graph
            for n in warm_sizes(self.batch_size, batch_sizes)[:MAX_GRAPHS]:
                self._capture(n)
        self.prepared = tuple(self._graphs)

    def _capture(self, n: int) -> tuple:
        static_in = self.prepare(self.example(n))
        graph = torch.cuda.CUDAGraph()
        side = self.stream
        # Warm-up on the backend's (non-default) stream: cuDNN autotuning and lazy
        # allocations must happen before capture, in the layout and dtype the graph runs.
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(3):
                self.model(static_in)
        with torch.inference_mode(), torch.cuda.graph(graph, pool=self._pool, stream=side):
            static_out = outputs_tuple(self.model(static_in))
        side.synchronize()  # once per size, at set-up: the capture is complete before any replay
        self._graphs[n] = (graph, static_in, static_out)
        self.captures += 1
        return self._graphs[n]

    def graph_for(self, n: int):
        """The graph captured for batch ``n`` at set-up, or None: run eagerly (never captured now)."""
        return self._graphs.get(n)

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        entry = self.graph_for(x.shape[0])
        if entry is None:
            self.eager_calls += 1
            with torch.inference_mode():
                return tuple(o.float().contiguous() for o in outputs_tuple(self.model(self.prepare(x))))
        graph, static_in, static_out = entry
        if tuple(x.shape[2:]) != tuple(static_in.shape[2:]):
            raise ValueError(f"{self.name}: captured for {tuple(static_in.shape[2:])} frames, got {tuple(x.shape[2:])}")
        with torch.inference_mode():
            static_in.copy_(x)
            graph.replay()
            return tuple(o.to(torch.float32, copy=True) for o in static_out)

    def close(self) -> None:
        if self._graphs and self.stream is not None:
            self.stream.synchronize()  # a replay still running reads the buffers freed below
        super().close()
        self._graphs = {}
