"""(s) A pool its feeder starves: the main thread computes each item (``produce``, 10 ms) and puts it
in a queue; four worker threads take items with ``queue.get(timeout=0.05)`` (a loop that checks a
stop flag; the wait is ``sem_clockwait``, which nsys 2022.4 does not trace) and ``work`` on each (20
ms, a remote call: a sleep). The pool could take an item every 5 ms. ``--fix``: ``produce`` takes 4
ms (a cheaper stage).

Known answer: lever ``cheaper_stage`` on ``produce``; 10/5 = 2x, the pool's 5 ms an item then
limits. Two things a model must see: the workers' untraced gaps are waits for the feeder (its acts
end them, though busy bystanders act too and a woken worker waits for a core), and a pool's threads
share its items after the change (each took 9 to 12 of them in the slow run).
"""
import queue

from _known import Steady, args, cpu, join_pool, remote_pool

from labkit import annotate

a = args(__doc__, items=48)
q: queue.Queue = queue.Queue()

with Steady(a.items):
    pool = remote_pool(q, 4, 20)
    for i in range(a.items):
        with annotate.range("produce", batch=i, items=1):
            cpu(4 if a.fix else 10)
        q.put(i)
    join_pool(q, pool)
