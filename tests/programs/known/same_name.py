"""(y) One range name on two threads: the main thread's 'work' (8 ms an item) feeds, through a
queue of four, a worker whose 'work' takes 30 ms. The two run at once; they are no pool (they do
different work per item) and take no turns. ``--fix``: the worker's 'work' costs nothing.

Known answer: lever ``cheaper_stage`` on ``work``; 30/8 = 3.75x (a model that takes the two for a
pool removes the main thread's work too and reads hundreds of x; one that sees turns reads 1.6x).
"""
import queue
import threading

from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=30)
q = queue.Queue(maxsize=4)


def worker() -> None:
    while True:
        with annotate.range("wait_input"):
            i = q.get()
        if i is None:
            return
        with annotate.range("work", batch=i, items=1):
            if not a.fix:
                cpu(30)


t = threading.Thread(target=worker, name="worker")
with Steady(a.items):
    t.start()
    for i in range(a.items):
        with annotate.range("work", batch=i, items=1):
            cpu(8)
        q.put(i)
    q.put(None)
    t.join()
