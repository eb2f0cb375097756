"""What a stage's CUDA events time: the host staging of a batch (cv2 resize, np.stack into a pinned
buffer, the wait for that buffer) happens before the start event, so ``cuda_ms`` is GPU work only.
The order is checked on CPU on the real Preprocess; the pinned buffers' reuse on a GPU."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from source_code.stages import Batch, Preprocess

HW = (64, 96)


def _frames(n, h=120, w=160):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in range(n)]


def _traced(pre: Preprocess, log: list) -> None:
    """Log, in order, when the host staging ends, the timed block opens and closes, and what launch gets."""
    stage, launch, timed = pre.stage, pre.launch, pre.work.timed

    def traced_stage(frames):
        out = stage(frames)
        log.append(("staged", None))
        return out

    def traced_launch(staged):
        log.append(("launch", [tuple(h.shape) for _, h, _ in staged]))
        return launch(staged)

    @contextlib.contextmanager
    def traced_timed(b, **kw):
        with timed(b, **kw):
            log.append(("start", None))  # where the start event is recorded on CUDA
            yield
            log.append(("end", None))

    pre.stage, pre.launch, pre.work.timed = traced_stage, traced_launch, traced_timed


@pytest.mark.parametrize("gpu_resize", [False, True])
def test_host_staging_comes_before_the_start_event(gpu_resize):
    pre = Preprocess(device=torch.device("cpu"), input_hw=HW, gpu=gpu_resize, batch_size=4)
    log: list = []
    _traced(pre, log)
    b = pre(Batch(index=0, frames=_frames(3), detect=[True, True, True]))
    assert [k for k, _ in log] == ["staged", "start", "launch", "end"]
    shapes = log[2][1]
    # with the CPU resize, what enters the timed block is already resized (the cv2 work was outside)
    assert shapes == ([(3, 120, 160, 3)] if gpu_resize else [(3, 3, *HW)])
    assert tuple(b.tensor.shape) == (3, 3, *HW)


def test_frames_of_two_sizes_keep_their_order():
    pre = Preprocess(device=torch.device("cpu"), input_hw=HW, gpu=True)
    small, big = _frames(1, 120, 160)[0], _frames(1, 90, 200)[0]
    b = pre(Batch(index=0, frames=[small, big, small], detect=[True, True, True]))
    one = Preprocess(device=torch.device("cpu"), input_hw=HW, gpu=True)
    ref = one(Batch(index=0, frames=[big], detect=[True])).tensor
    assert torch.equal(b.tensor[1:2], ref)


@pytest.mark.gpu
def test_pinned_buffers_are_allocated_once_and_reused():
    dev = torch.device("cuda", 0)
    pre = Preprocess(device=dev, input_hw=HW, gpu=True, batch_size=4)
    for i, n in enumerate((4, 4, 2, 4, 1)):  # a short batch uses the same buffers' first rows
        pre(Batch(index=i, frames=_frames(n), detect=[True] * n))
    torch.cuda.synchronize()
    assert pre.pinned.allocations == 2  # one pair, pinned from the start
    assert all(buf.is_pinned() for buf in pre.pinned._bufs.values())
    cpu = Preprocess(device=dev, input_hw=HW, gpu=False, batch_size=4)
    for i, n in enumerate((4, 3, 4)):
        cpu(Batch(index=i, frames=_frames(n), detect=[True] * n))
    assert cpu.pinned.allocations == 2
