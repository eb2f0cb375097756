"""(o) Threads that take turns: two workers each prepare an item (10 ms) and then commit it
(20 ms) holding one shared lock, so the commits run one at a time. Each thread is busy about the
same share of the run (neither limits it alone); the commits, end to end, are the run. ``--fix``:
'commit' costs nothing.

Known answer: lever ``cheaper_stage`` on ``commit``; 30 x 20 ms of commits against 15 x 10 ms of
prepares per thread: 4x.
"""
import threading

from _known import Steady, args, cpu, workers

from labkit import annotate

a = args(__doc__, items=30)
lock = threading.Lock()


def worker(first: int) -> None:
    for i in range(first, a.items, 2):
        with annotate.range("prepare", batch=i, items=1):
            cpu(10)
        with lock, annotate.range("commit", batch=i, items=1):
            if not a.fix:
                cpu(20)


with Steady(a.items):
    workers(worker)
