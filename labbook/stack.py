"""Whether torch and ONNX Runtime on this machine were built for the same CUDA major version
(environment.yml pairs them; a CUDA 13 torch beside a CUDA 12 onnxruntime-gpu loads two CUDA
runtimes and ONNX Runtime's CUDA provider fails to start or falls back to the CPU).

    python -m labbook.stack      # one line: ok, or the problem and its fix (exit status 1)

Nothing here names the application: labkit's doctor can take :func:`cuda_match` as it is.
"""
from __future__ import annotations

import sys

INDEX = {12: "cu128", 13: "cu130"}
"""PyTorch's wheel index for each CUDA major (download.pytorch.org/whl/<tag>)."""
FIX = ("install the torch wheel built for CUDA {ort}: pip install --force-reinstall torch "
       "--index-url https://download.pytorch.org/whl/{tag} (as environment.yml does), or an onnxruntime-gpu "
       "built for CUDA {torch}")


def major(version: str | None) -> int | None:
    """12 for '12.8', None for None or ''."""
    try:
        return int(str(version).split(".")[0]) if version else None
    except ValueError:
        return None


def cuda_verdict(torch_cuda: str | None, ort_cuda: str | None) -> tuple[bool, str]:
    """(ok, one line) for torch's CUDA version (``torch.version.cuda``) beside ONNX Runtime's
    (``onnxruntime.capi.build_and_package_info.cuda_version``; None for the CPU package)."""
    t, o = major(torch_cuda), major(ort_cuda)
    if t is None or o is None:
        which = "both are CPU builds" if t is None and o is None else \
            f"{'torch' if t is None else 'onnxruntime'} is a CPU build"
        return True, f"CUDA builds: torch {torch_cuda or 'CPU'}, onnxruntime {ort_cuda or 'CPU'} ({which}: no pair to match)"
    if t == o:
        return True, f"CUDA builds match: torch {torch_cuda}, onnxruntime-gpu {ort_cuda} (CUDA {t})"
    return False, (f"torch is built for CUDA {torch_cuda} but onnxruntime-gpu for CUDA {ort_cuda}: "
                   + FIX.format(ort=o, torch=t, tag=INDEX.get(o, f"cu{o}x")))


def cuda_match() -> tuple[bool, str]:
    """:func:`cuda_verdict` for the torch and ONNX Runtime installed here."""
    try:
        import torch
        torch_cuda = torch.version.cuda
    except ImportError:
        torch_cuda = None
    try:
        from onnxruntime.capi import build_and_package_info as info
        ort_cuda = getattr(info, "cuda_version", None)
    except ImportError:
        ort_cuda = None
    return cuda_verdict(torch_cuda, ort_cuda)


if __name__ == "__main__":
    ok, line = cuda_match()
    print(line, file=sys.stdout if ok else sys.stderr)
    sys.exit(0 if ok else 1)
