"""(x) A limit that moves during the run: a loader thread feeds a compute thread through a queue of
two, in blocks of ten items that alternate: loading 30 ms and computing 10 ms (the loader limits),
then loading 5 ms and computing 30 ms (the computing limits). Over the run the computing thread is the
busiest, yet the loader holds half of the critical path. Four balanced items (10 ms each side) go
first, untimed: labkit's steady window leaves them out as warm-up (the first tenth of the instances),
so the window and the timed loop hold the same blocks. ``--fix``: 'load' costs nothing.

Known answer: lever ``cheaper_stage`` on ``load``; (20 x 30 + 20 x 30) / (20 x 10 + 20 x 30) = 1.5x,
less what the queue smooths where the blocks change (1.40x measured on the 2-core VM); a model that
reads only the busiest thread sees nothing to gain from the loader.
"""
import queue
import threading

from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=40)
q = queue.Queue(maxsize=2)
WARM = 4


def costs(i: int) -> tuple[int, int]:
    """(load, compute) ms of item ``i``: balanced warm-up, then blocks of ten, loader-bound then
    compute-bound."""
    j = i - WARM
    return (10, 10) if j < 0 else (30, 10) if (j // 10) % 2 == 0 else (5, 30)


def loader() -> None:
    for i in range(WARM + a.items):
        with annotate.range("load", batch=i, items=1):
            if not a.fix:
                cpu(costs(i)[0])
        q.put(i)
    q.put(None)


def consume(n: int) -> None:
    for _ in range(n):
        with annotate.range("wait_input"):
            i = q.get()
        with annotate.range("compute", batch=i, items=1):
            cpu(costs(i)[1])


t = threading.Thread(target=loader, name="loader")
t.start()
consume(WARM)
with Steady(a.items):
    consume(a.items)
    q.get()
t.join()
