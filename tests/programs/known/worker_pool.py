"""(l) A stage whose work a library's worker pool shares, as ONNX Runtime's intra-op threads or
OpenMP do: each ``infer`` call computes one half itself (15 ms) and hands the other half to a pool
thread that has no ranges of its own (15 ms), then waits for it; ``prep`` (6 ms) comes before it on
the main thread. ``--fix`` makes infer 15x cheaper (1 ms a half: a faster kernel library).

Known answer: lever ``cheaper_stage`` on ``infer``; 21/6 = 3.5x if infer cost nothing, 21/7 = 3.0x
with the fix. A model that counts the pool thread's 15 ms as independent work says removing infer
leaves that thread at 15 ms a step: at most 21/15 = 1.4x, a "bound" the fix exceeds.
"""
from concurrent.futures import ThreadPoolExecutor

from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=24)
half = 1 if a.fix else 15
with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pool") as pool, Steady(a.items):
    for i in range(a.items):
        with annotate.range("prep", batch=i, items=1):
            cpu(6)
        with annotate.range("infer", batch=i, items=1):
            other = pool.submit(cpu, half)
            cpu(half)
            other.result()
