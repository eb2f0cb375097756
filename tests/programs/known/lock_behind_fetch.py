"""(lock) A lock close behind the limiter: four threads each 'fetch' an item (a 24 ms wait, as from
the network) and then 'write' it (a 6 ms wait) holding one shared lock. The fetches limit (4 threads
x 12 items x 30 ms, 360 ms a thread), and the writes, one at a time, hold the lock 48 x 6 = 288 ms
of the run. ``--fix``: 'fetch' four times cheaper (6 ms).

Known answer: lever ``cheaper_stage`` on ``fetch``; the lock then limits: the run cannot be shorter
than its 288 ms of writes in turn, so the fix measures about 360/288 = 1.25x where 'fetch costs
nothing' read alone would promise several times that.
"""
import threading

from _known import Steady, args, wait, workers

from labkit import annotate

THREADS = 4
a = args(__doc__, items=48)
lock = threading.Lock()


def worker(first: int) -> None:
    for i in range(first, a.items, THREADS):
        with annotate.range("fetch", batch=i, items=1):
            wait(6 if a.fix else 24)
        with lock, annotate.range("write", batch=i, items=1):
            wait(6)


with Steady(a.items):
    workers(worker, THREADS)
