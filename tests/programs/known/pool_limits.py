"""(t) A pool that limits: the main thread computes each item (``produce``, 6 ms) and puts it in a
queue of four; four worker threads take items with ``queue.get(timeout=0.05)`` and ``work`` on each
(60 ms, a remote call: a sleep): 15 ms an item across the pool. ``--fix``: ``work`` takes 12 ms (a
cheaper stage): the pool could take an item every 3 ms, and the feeder's 6 ms limits.

Known answer: lever ``cheaper_stage`` on ``work``; 15/6 = 2.5x. (With a 3 ms feeder and 40 ms workers
the bound, 3.9-4.0x, read 22-25 % above the 3.21x measured: the feeder's hand-over to a pool that keeps
up costs it about 0.7 ms an item more than it did in the slow run, which no profile of the slow run
shows; twice the feeder's work halves that share.) The four workers' own times are
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
    pool = remote_pool(q, 4, 12 if a.fix else 60)
    for i in range(a.items):
        with annotate.range("produce", batch=i, items=1):
            cpu(6)
        q.put(i)
    join_pool(q, pool)
