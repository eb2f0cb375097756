"""(c) I/O-like waits in line with compute in one thread: per item ``read`` waits 15 ms, then
``compute`` computes for 25 ms. ``--fix`` prefetches the reads in a thread through a queue.

Known answer: lever ``overlap_stages`` on ``read``; 40/25 = 1.6x.
"""
from _known import Steady, args, cpu, inputs, wait

from labkit import annotate

a = args(__doc__, items=30)


def read(i: int) -> int:
    with annotate.range("read", batch=i, items=1):
        wait(15)
    return i


with Steady(a.items):
    for i in inputs(read, a.items, ahead=a.fix, wait_name="wait_input", thread="reader"):
        with annotate.range("compute", batch=i, items=1):
            cpu(25)
