"""(lock) A lock close behind the limiter, held over compute: eight threads each 'fetch' an item (a
40 ms wait) and then 'encode' it (4 ms of compute) holding one shared lock (an encoder that is not
thread-safe). The fetches limit (8 threads x 8 items x 44 ms, 352 ms a thread), and the encodes, one
at a time, hold the lock 64 x 4 = 256 ms of the run. ``--fix``: 'fetch' four times cheaper (10 ms).

Known answer: lever ``cheaper_stage`` on ``fetch``; the lock then limits: the run cannot be shorter
than its 256 ms of encodes in turn, so the fix measures about 352/256 = 1.4x.
"""
import threading

from _known import Steady, args, cpu, wait, workers

from labkit import annotate

THREADS = 8
a = args(__doc__, items=64)
lock = threading.Lock()


def worker(first: int) -> None:
    for i in range(first, a.items, THREADS):
        with annotate.range("fetch", batch=i, items=1):
            wait(10 if a.fix else 40)
        with lock, annotate.range("encode", batch=i, items=1):
            cpu(4)


with Steady(a.items):
    workers(worker, THREADS)
