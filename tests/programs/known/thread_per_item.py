"""(z) A thread started per item and joined: the main thread prepares each item (16 ms), then starts
a thread that infers it (32 ms) and waits for it to end. The main thread is the busiest, at a
third of the run; 'infer' holds two thirds of the critical path, spread over one short-lived
thread per item. ``--fix``: 'infer' costs nothing.

Known answer: lever ``cheaper_stage`` on ``infer``; 48/16 = 3x (a model that reads the busiest
thread sees 'prepare'; one that sees threads taking turns in 'infer' reads a lock). Under nsys a
thread's start costs about 0.4 ms more here (its TLS set-up, which the report's PROFILER_OVERHEAD
shows at 76 us, and the start of its tracing), time the bound keeps: with 8 ms of preparing it read
4.6 % under the measured speed-up, with 16 ms about half that.
"""
import threading

from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=30)


def infer(i: int) -> None:
    with annotate.range("infer", batch=i, items=1):
        if not a.fix:
            cpu(32)


with Steady(a.items):
    for i in range(a.items):
        with annotate.range("prepare", batch=i, items=1):
            cpu(16)
        t = threading.Thread(target=infer, args=(i,), name="infer")
        t.start()
        t.join()
