"""(k) Pageable copies: each step copies a 256 MiB pageable host tensor to the GPU (``copy``), then
runs a short kernel on it (``compute``). ``--fix`` pins the host tensor once before the loop and
copies with ``non_blocking=True``. Needs torch with CUDA.

Known answer: lever ``pin_memory``; the speed-up is pageable over pinned bandwidth (about 2x on
PCIe; measured, not assumed).
"""
import torch
from _known import Steady, args

from labkit import annotate

a = args(__doc__, items=30)
host = torch.ones(64 << 20, dtype=torch.float32)  # 256 MiB
if a.fix:
    host = host.pin_memory()
dev = torch.empty_like(host, device="cuda")
dev.copy_(host)  # warm the allocator and the context
torch.cuda.synchronize()
with Steady(a.items):
    for i in range(a.items):
        with annotate.range("copy", batch=i, items=1):
            dev.copy_(host, non_blocking=a.fix)
        with annotate.range("compute", batch=i, items=1):
            dev.mul_(1.0001)
    torch.cuda.synchronize()
