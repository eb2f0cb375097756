"""(u) A feeder nobody annotated: a thread without NVTX ranges computes each item (20 ms, as a
library's decode thread would) and puts it in a queue of two; the main thread takes each (a
``sem_wait``) and ``consume``s it (5 ms, a range). No stage names the limit: the feeder's time lies
outside every range. ``--fix``: the feeder computes 5.5 ms an item (a cheaper library), just over
the consumer's 5.

Known answer: lever ``cheaper_stage`` on the time outside the ranges (no stage); the feeder taking
no time gives 20/5 = 4x (a bound), the consumer's 5 ms then limiting; the fix, 20/5.5 = 3.6x. (A
fix that took the feeder to 1 ms measured 4.00x against a 3.90x bound: the bound is read from the
profiled run, whose consumer took 2.5 % longer an item under nsys.) Before labkit read untraced
time as a finding, nothing was found.
"""
import queue
import threading

from _known import Steady, args, cpu, produce

from labkit import annotate

a = args(__doc__, items=40)
q: queue.Queue = queue.Queue(maxsize=2)
feeder = threading.Thread(target=produce, args=(q, a.items, 5.5 if a.fix else 20, False), name="feeder")
with Steady(a.items):
    feeder.start()
    for _ in range(a.items):
        i = q.get()
        with annotate.range("consume", batch=i, items=1):
            cpu(5)
feeder.join()
