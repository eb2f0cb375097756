"""The application's errors: ``PipelineError`` (one line naming the fix, and an exit code) and
the one place where allocation failures become the out-of-memory message (exit code 4).

Exit codes: 0 done, 1 bad or unreadable input / failure, 2 bad arguments or a refused path,
3 requested backend/device/weights unavailable, 4 out of memory.
"""
from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator

EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_OOM = 1, 2, 3, 4


class PipelineError(Exception):
    """A problem with the request or the input; ``str(e)`` is a one-line message naming the fix."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


_OOM_TEXT = re.compile(r"out of memory|can't allocate memory|failed to allocate memory", re.IGNORECASE)


def out_of_memory_message(exc: BaseException, cfg: Any) -> str | None:
    """A one-line message naming the fix when ``exc`` is an allocation failure (CUDA or host;
    torch, ONNX Runtime or TensorRT), else None."""
    import torch

    oom = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), MemoryError) if t is not None)
    text = str(exc).strip()
    if not isinstance(exc, oom) and not _OOM_TEXT.search(text):
        return None
    from source_code.detector import INPUT_HW

    h, w = cfg.input_hw or INPUT_HW
    first = text.splitlines()[0][:160] if text else type(exc).__name__
    fixes = [f"--batch-size {max(1, cfg.batch_size // 2)}"] if cfg.batch_size > 1 else []
    fixes += ["fewer --streams"] if cfg.streams > 1 else []
    fixes += [f"a smaller --input-hw than {h}x{w}"]
    on_gpu = isinstance(exc, oom[:-1]) or "cuda" in text.lower()
    where = ("; on a shared GPU, `nvidia-smi` shows what else holds its memory" if on_gpu
             else "; or free host memory (close other programs, or raise `ulimit -v`)")
    return (f"out of memory at --batch-size {cfg.batch_size}, --streams {cfg.streams}, input {h}x{w} ({first}). "
            f"Try {', '.join(fixes[:-1]) + ' or ' if len(fixes) > 1 else ''}{fixes[-1]}{where}")


@contextlib.contextmanager
def out_of_memory_is_exit_4(cfg: Any) -> Iterator[None]:
    """Turn an allocation failure inside the block (loading the weights, building the backend,
    the frame loop) into a PipelineError with exit code 4; other errors pass unchanged."""
    try:
        yield
    except PipelineError:
        raise
    except Exception as e:  # noqa: BLE001 - only allocation failures are translated
        msg = out_of_memory_message(e, cfg)
        if msg is None:
            raise
        raise PipelineError(msg, EXIT_OOM) from None


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception, for one-line reports."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
