"""(t) A pool that limits: the main thread computes each item (``produce``, 3 ms) and puts it in a
queue of four; four worker threads take items with ``queue.get(timeout=0.05)`` and ``work`` on each
(40 ms, a remote call: a sleep): 10 ms an item across the pool. ``--fix``: ``work`` takes 8 ms (a
cheaper stage): the pool could take an item every 2 ms, and the feeder's 3 ms limits.

Known answer: lever ``cheaper_stage`` on ``work``; 10/3 = 3.3x. The four workers' own times are
within 10 % of each other: a model that weighs threads alone calls them balanced and finds nothing,
or reads the workers' turns on the critical path as a lock they take in turn. The pool limits, as
one.
"""
import queue
import threading

from _known import Steady, args, cpu, wait

from labkit import annotate

a = args(__doc__, items=48)
q: queue.Queue = queue.Queue(4)


def worker() -> None:
    while True:
        try:
            i = q.get(timeout=0.05)
        except queue.Empty:
            continue
        if i is None:
            return
        with annotate.range("work", batch=i, items=1):
            wait(8 if a.fix else 40)


with Steady(a.items):
    pool = [threading.Thread(target=worker, name=f"worker{k}") for k in range(4)]
    for w in pool:
        w.start()
    for i in range(a.items):
        with annotate.range("produce", batch=i, items=1):
            cpu(3)
        q.put(i)
    for _ in pool:
        q.put(None)
    for w in pool:
        w.join()
