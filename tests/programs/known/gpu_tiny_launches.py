"""(m) Many tiny launches: each step adds to 500 separate 1,024-element tensors, one kernel each
(``update``). ``--fix`` keeps them as the rows of one (500, 1024) tensor and adds in one launch.
Needs torch with CUDA.

Known answer: lever ``batch`` (or ``cuda_graphs``/``compile``): launch cost, not the GPU, limits;
the fix removes 499 of 500 launches (about 10x and more).
"""
import torch
from _known import Steady, args

from labkit import annotate

a = args(__doc__, items=200, tensors=500)
whole = torch.zeros(a.tensors, 1024, device="cuda")
parts = [torch.zeros(1024, device="cuda") for _ in range(a.tensors)]
whole.add_(1.0)
parts[0].add_(1.0)
torch.cuda.synchronize()
with Steady(a.items):
    for i in range(a.items):
        with annotate.range("update", batch=i, items=a.tensors):
            if a.fix:
                whole.add_(1.0)
            else:
                for p in parts:
                    p.add_(1.0)
    torch.cuda.synchronize()
