"""(l) A per-step synchronization: each step queues ~8 ms of matrix products (``gpu_work``), waits for
the GPU (``sync``: ``torch.cuda.synchronize``) and then does 12 ms of CPU work (``cpu_work``) that does not need the result. ``--fix`` removes the per-step wait (one at the end), so
the CPU work overlaps the GPU's. Needs torch with CUDA.

Known answer: lever ``remove_sync``; (11 + 12)/12 = about 1.9x on an H100 (4 FP32 products of 4096^2: ~11 ms).
"""
import torch
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=60, matmuls=4)
x = torch.randn(4096, 4096, device="cuda")
y = torch.empty_like(x)
torch.mm(x, x, out=y)
torch.cuda.synchronize()
with Steady(a.items):
    for i in range(a.items):
        with annotate.range("gpu_work", batch=i, items=1):
            for _ in range(a.matmuls):
                torch.mm(x, x, out=y)
        if not a.fix:
            with annotate.range("sync", batch=i):
                torch.cuda.synchronize()
        with annotate.range("cpu_work", batch=i, items=1):
            cpu(12)
    torch.cuda.synchronize()
