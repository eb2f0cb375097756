"""(o) The input is read between the ranges: per item an unannotated read waits 20 ms (a dataset's
``__getitem__`` reading from disk, outside the ranges its author wrote), then ``step`` computes for
10 ms. ``--fix`` reads the inputs on 8 threads at once, in order (as ``DataLoader(num_workers=8)``).

Known answer: lever ``parallel_input`` on the loop (no stage holds the wait); 30/10 = 3x: the
step stays on the one thread (a model that spreads the whole loop's CPU time over the cores says
6x).
"""
from concurrent.futures import ThreadPoolExecutor

from _known import Steady, args, cpu, wait

from labkit import annotate

a = args(__doc__, items=30)


def read(i: int) -> int:
    wait(20)
    return i


with Steady(a.items), ThreadPoolExecutor(8) as pool:
    for i in (pool.map(read, range(a.items)) if a.fix else map(read, range(a.items))):
        with annotate.range("step", batch=i, items=1):
            cpu(10)
