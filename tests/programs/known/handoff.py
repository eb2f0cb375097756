"""(n) A synchronous hand-off: the main thread prepares each item (10 ms), hands it to a worker
thread that infers (30 ms) and waits for the result before the next item, so the two never
overlap. No thread is busy all the time; the run is the chain prepare + infer. ``--fix``: 'infer'
costs nothing.

Known answer: lever ``cheaper_stage`` on ``infer``; 40/10 = 4x (a model that takes the busiest
thread, 30 of 40 ms, for the run's length says 3x, and the fix exceeds that "bound").
"""
from concurrent.futures import ThreadPoolExecutor

from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=30)


def infer(i: int) -> int:
    with annotate.range("infer", batch=i, items=1):
        if not a.fix:
            cpu(30)
    return i


with ThreadPoolExecutor(1, thread_name_prefix="infer") as pool, Steady(a.items):
    for i in range(a.items):
        with annotate.range("prepare", batch=i, items=1):
            cpu(10)
        pool.submit(infer, i).result()
