"""(p) Threads that take turns on Python's GIL: two threads each run ``work`` on their share of the
items, pure-Python arithmetic (about 8 ms an item on an idle CI core) that holds the GIL, so only
one of them runs at a time although the machine has two cores. Unlike the other programs the work
is an amount, not a duration: time spent waiting for the GIL must not count as work done.
``--fix`` runs the two workers as processes (each its own interpreter and GIL).

Known answer: lever ``release_lock``; 2x on two free cores (each worker's half of the work at once).
"""
import multiprocessing
import threading

from _known import Steady, args

from labkit import annotate

a = args(__doc__, items=40, loop=240_000)


def worker(first: int) -> None:
    for i in range(first, a.items, 2):
        with annotate.range("work", batch=i, items=1):
            s = 0
            for k in range(a.loop):  # pure Python: the GIL is held throughout
                s += k * k


if __name__ == "__main__":
    make = multiprocessing.get_context("fork").Process if a.fix else threading.Thread
    with Steady(a.items):
        workers = [make(target=worker, args=(j,)) for j in (0, 1)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
