"""(c) I/O-like waits in line with compute in one thread: per item ``read`` waits 15 ms, then
``compute`` computes for 25 ms. ``--fix`` prefetches the reads in a thread through a queue.

Known answer: lever ``overlap_stages`` on ``read``; 40/25 = 1.6x.
"""
import queue
import threading

from _known import Steady, args, cpu, wait

from labkit import annotate

a = args(__doc__, items=30)


def read(i: int) -> int:
    with annotate.range("read", batch=i, items=1):
        wait(15)
    return i


with Steady(a.items):
    if a.fix:
        q: queue.Queue = queue.Queue(maxsize=4)
        t = threading.Thread(target=lambda: [q.put(read(i)) for i in range(a.items)], name="reader")
        t.start()
    for i in range(a.items):
        if a.fix:
            with annotate.range("wait_input"):
                q.get()
        else:
            read(i)
        with annotate.range("compute", batch=i, items=1):
            cpu(25)
    if a.fix:
        t.join()
