"""(r) A consumer fed through a pipe by another process: a producer process (spawned, so nsys traces
it) computes each item (``produce``, 20 ms) and sends it through a ``multiprocessing.Queue``; the
main process blocks reading the queue's pipe (a ``read`` to nsys, as a file's would be), then
``consume``s the item (5 ms). Each read returns just after the producer's write: a wait on that
peer, not latency of its own. ``--fix``: ``produce`` takes 5 ms (a cheaper stage).

Known answer: lever ``cheaper_stage`` on ``produce``; 20/5 = 4x, the consumer's 5 ms then limits. A
model that counts the reads as the consumer's latency sees two processes each occupied all along:
balanced, nothing to find.
"""
import multiprocessing as mp
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the spawned child imports _known too

from _known import Steady, args, cpu, produce  # noqa: E402

from labkit import annotate  # noqa: E402

if __name__ == "__main__":
    a = args(__doc__, items=40)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=produce, args=(q, a.items + 1, 5 if a.fix else 20), name="producer")
    p.start()
    q.get()  # the first item: the child's interpreter start-up is not the steady loop
    with Steady(a.items):
        for _ in range(a.items):
            i = q.get()
            with annotate.range("consume", batch=i, items=1):
                cpu(5)
    p.join()
