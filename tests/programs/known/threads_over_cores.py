"""(ab) More threads than cores: per batch the main thread prepares it (20 ms), then starts four
threads that each infer one item (20 ms) and joins them. On the 2-core VM four threads compute at
once on two cores, and the main thread starts the later ones while the first already run: its
thread starts wait for a core. ``--fix``: 'infer' costs nothing.

Known answer: lever ``cheaper_stage`` on ``infer``; (20 + 20) / 20 = 2x on a machine with a core
for every thread, more where the cores are short (2.26x on the 2-core VM: without the workers
running the thread starts take their own time again). A model that reads measured times as fixed
calls its 2.06x a bound, and the fix exceeds it: with more threads ready than cores, the finding is
an estimate (``labkit.judge.advice._short_of_cores``).
"""
import threading

from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=15)


def infer(b: int) -> None:
    with annotate.range("infer", batch=b, items=1):
        if not a.fix:
            cpu(20)


with Steady(a.items):
    for b in range(a.items):
        with annotate.range("prepare", batch=b, items=4):
            cpu(20)
        workers = [threading.Thread(target=infer, args=(b,), name="infer") for _ in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
