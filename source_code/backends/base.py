"""The common interface of every backend: the callable, its stream and event, devices, TF32.

A ``Backend`` is called as ``backend(x, ready=None)`` with a float32 ``(N, 3, H, W)`` tensor
on its device and returns the model's outputs as float32 tensors on that device. ``N`` may be
anything from 1 to ``batch_size``: nothing is padded (see ``GPU_STREAMS.md``).

On CUDA every backend runs its work on its own stream (``backend.stream``: the one given to
``make_backend``, or a new non-default stream of that device) and records ``backend.event``
after it. Before the work it waits on ``ready`` (an event recorded after the input was
written) or, without one, on the caller's current stream; after it, the caller's current
stream waits on ``backend.event``. All waits are GPU-side (``cudaStreamWaitEvent``): no call
blocks the host or the whole device. On CPU ``stream`` and ``event`` are ``None`` and the
same code runs without them.
"""
from __future__ import annotations

from typing import Sequence

import torch


class BackendUnavailable(RuntimeError):
    """The requested backend/precision/device cannot run here; the message names the fix."""


class Backend:
    """A callable inference backend: ``backend(x, ready=None) -> tuple of float32 tensors``."""

    name: str = "backend"
    device: torch.device = torch.device("cpu")
    batch_size: int = 1
    stream = None  # torch.cuda.Stream on CUDA: where this backend's GPU work runs
    event = None  # torch.cuda.Event recorded on ``stream`` after the last call's work

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The backend's work on ``x``; on CUDA it runs with ``self.stream`` current."""
        raise NotImplementedError

    def __call__(self, x: torch.Tensor, *, ready=None) -> tuple[torch.Tensor, ...]:
        check_input(x, self.device, self.batch_size, self.name)
        if self.stream is None:
            return self._run(x)
        with torch.cuda.device(self.device):
            caller = torch.cuda.current_stream(self.device)
            own = self.stream
            if ready is not None:
                own.wait_event(ready)
            elif own != caller:
                own.wait_stream(caller)
            if own != caller:
                x.record_stream(own)  # x came from the caller's stream: keep it alive for ours
            with torch.cuda.stream(own):
                out = self._run(x)
            self.event = torch.cuda.Event()
            self.event.record(own)
            if own != caller:
                caller.wait_event(self.event)
                for o in out:
                    o.record_stream(caller)
        return out

    def close(self) -> None:
        """Release what the backend holds (sessions, engines, graph pools)."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} device={self.device} batch_size={self.batch_size}>"


def backend_stream(device: torch.device, stream=None):
    """The stream a backend on ``device`` runs on: ``stream`` if given, else a new one; None on CPU."""
    if device.type != "cuda":
        if stream is not None:
            raise BackendUnavailable(f"a CUDA stream was given for --device {device}: drop it, or use --device cuda")
        return None
    if stream is None:
        return torch.cuda.Stream(device=device)
    if stream.device != device:
        raise BackendUnavailable(f"the stream given is on {stream.device}, the backend on {device}: "
                                 f"create it with torch.cuda.Stream(device={str(device)!r})")
    return stream


def _new_tf32_api() -> bool:
    """torch >= 2.9 sets TF32 through ``fp32_precision`` (the ``allow_tf32`` flags are deprecated,
    and mixing the two raises when the legacy flag is read back)."""
    return hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(torch.backends.cudnn, "conv") \
        and hasattr(torch.backends.cudnn.conv, "fp32_precision")


def set_tf32(tf32: bool | None) -> None:
    """Allow or forbid TF32 for FP32 matmuls and cuDNN convolutions (process-wide); None keeps torch's defaults.

    PyTorch's defaults: cuDNN convolutions may use TF32, matmuls may not. On Ampere and Hopper
    GPUs an "fp32" detector therefore runs its convolutions in TF32 (10-bit mantissa inputs, FP32
    accumulation) unless this is False. Through ``torch.backends.cuda.matmul.fp32_precision`` and
    ``torch.backends.cudnn.conv.fp32_precision`` (``"tf32"`` or ``"ieee"``) on torch >= 2.9, the
    legacy ``allow_tf32`` flags before.
    """
    if tf32 is None:
        return
    if _new_tf32_api():
        mode = "tf32" if tf32 else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
        return
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
    torch.backends.cudnn.allow_tf32 = bool(tf32)


def tf32_state() -> tuple[bool, bool]:
    """Whether FP32 (matmuls, cuDNN convolutions) may run as TF32 now, read through the API :func:`set_tf32` uses."""
    if _new_tf32_api():
        conv = torch.backends.cudnn.conv.fp32_precision
        if conv == "none":  # inherits cuDNN's
            conv = torch.backends.cudnn.fp32_precision
        return torch.backends.cuda.matmul.fp32_precision == "tf32", conv == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)


def default_input_hw() -> tuple[int, int]:
    """The detector's network input ``(H, W)``."""
    from source_code.detector import INPUT_HW

    return tuple(INPUT_HW)


def parse_device(device: str | torch.device) -> torch.device:
    """``cpu`` or ``cuda[:N]`` as a ``torch.device`` with an explicit index on CUDA, or BackendUnavailable."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise BackendUnavailable(f"unknown device {device!r}: use cpu or cuda[:N]") from exc
    if dev.type not in ("cpu", "cuda"):
        raise BackendUnavailable(f"device {device!r} is not supported: use cpu or cuda[:N]")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendUnavailable(
                f"--device {device} asked for, but torch sees no CUDA GPU "
                f"(torch {torch.__version__}): use --device cpu, or install a CUDA build of torch on a GPU machine"
            )
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= torch.cuda.device_count():
            raise BackendUnavailable(
                f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s); use cuda:0"
            )
    return dev


def outputs_tuple(out) -> tuple[torch.Tensor, ...]:
    """The model's output as a tuple, whether it returned one tensor or several."""
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(out)


def check_input(x: torch.Tensor, device: torch.device, batch_size: int, name: str) -> None:
    """Raise ValueError naming the fix unless ``x`` is ``(N <= batch_size, 3, H, W)`` on ``device``."""
    if x.dim() != 4 or x.shape[1] != 3:
        raise ValueError(f"{name}: expected a (N, 3, H, W) tensor, got shape {tuple(x.shape)}")
    if x.shape[0] > batch_size:
        raise ValueError(f"{name}: batch of {x.shape[0]} frames exceeds batch_size={batch_size}")
    if x.device != device:
        raise ValueError(f"{name}: input is on {x.device}, backend runs on {device}; move it with x.to({str(device)!r})")


def warm_sizes(batch_size: int, batch_sizes: Sequence[int] | None) -> tuple[int, ...]:
    """The batch sizes to prepare ahead (graphs, compiled shapes): ``batch_sizes`` or just ``batch_size``."""
    sizes = sorted({int(n) for n in (batch_sizes or (batch_size,))}, reverse=True)
    bad = [n for n in sizes if not 1 <= n <= batch_size]
    if bad:
        raise BackendUnavailable(f"batch_sizes {bad} are outside 1..batch_size={batch_size}: "
                                 "list the sizes the run will call the backend with")
    return tuple(sizes)


def expected_batch_sizes(batch_size: int, *, interval: int = 1, streams: int = 1,
                         frames: Sequence[int | None] | None = None) -> tuple[int, ...]:
    """The detector batch sizes a run produces: frames muxed round-robin from ``streams`` sources into
    batches of ``batch_size``, the detector on every ``interval``-th frame of each source.

    For ``make_backend(batch_sizes=...)``. ``frames``: each source's frame count where known
    (``VideoSource.expected()``); the clip's last, shorter batch and the batches after a short
    source ends are then included too, so that every size is prepared before the first timed
    frame. A count that is unknown (None) leaves those sizes out; backends then run a size
    they did not prepare eagerly (``TorchBackend``, ``CudaGraphBackend``), never compiling
    or capturing inside the timed frames.
    """
    b, k, s = int(batch_size), max(1, int(interval)), max(1, int(streams))
    period = b * k * s  # the pattern of detected frames repeats after this many muxed frames
    detect = [(t // s) % k == 0 for t in range(period)]
    sizes = {sum(detect[i:i + b]) for i in range(0, period, b)}
    counts = list(frames or [])
    if counts and all(c is not None for c in counts):
        sizes |= set(muxed_batch_sizes(b, k, [int(c) for c in counts]))
    return tuple(sorted((n for n in sizes if n > 0), reverse=True))


def muxed_batch_sizes(batch_size: int, interval: int, counts: Sequence[int]) -> list[int]:
    """The detector batch size of every batch of a run over sources of ``counts`` frames, in order:
    the muxer's round-robin (``source_code.sources.Muxer``) replayed on counts, no video read."""
    left, seen, live, rr = list(counts), [0] * len(counts), [i for i, c in enumerate(counts) if c > 0], 0
    out: list[int] = []
    while live:
        n = detected = 0
        while n < batch_size and live:
            s = live[rr % len(live)]
            if left[s] == 0:
                live.remove(s)
                continue
            detected += seen[s] % max(1, interval) == 0
            seen[s] += 1
            left[s] -= 1
            n += 1
            rr += 1
        if n:
            out.append(detected)
    return out
