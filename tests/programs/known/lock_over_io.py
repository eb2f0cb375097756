"""(q) A lock held over I/O: two workers each prepare an item (5 ms of compute) and then write it
(a 25 ms wait, as to a slow device) holding one shared lock, so the writes, which need no lock,
run one at a time. ``--fix``: the workers write outside the lock, both at once.

Known answer: lever ``release_lock`` on ``write``; 30 x 25 ms of writes in turn against
15 x (5 + 25) ms per thread at once: 750/450 = 1.7x. A cheaper 'write' would give far more (the
bound of that other lever), but a lock held for less is this program's fix.
"""
import threading

from _known import Steady, args, cpu, wait, workers

from labkit import annotate

a = args(__doc__, items=30)
lock = threading.Lock()


def worker(first: int) -> None:
    for i in range(first, a.items, 2):
        with annotate.range("prepare", batch=i, items=1):
            cpu(5)
        if a.fix:
            with annotate.range("write", batch=i, items=1):
                wait(25)
        else:
            with lock, annotate.range("write", batch=i, items=1):
                wait(25)


with Steady(a.items):
    workers(worker)
