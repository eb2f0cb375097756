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

from _known import Steady, args, cpu, join_pool, remote_pool

from labkit import annotate

a = args(__doc__, items=48)
q: queue.Queue = queue.Queue(4)

with Steady(a.items):
    pool = remote_pool(q, 4, 8 if a.fix else 40)
    for i in range(a.items):
        with annotate.range("produce", batch=i, items=1):
            cpu(3)
        q.put(i)
    join_pool(q, pool)
