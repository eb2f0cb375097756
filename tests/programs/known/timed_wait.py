"""(q) A consumer that waits with a timeout: a producer thread computes each item (``produce``,
12 ms) and puts it in a queue; the main thread takes items with ``queue.get(timeout=0.05)`` (a
worker loop that checks a stop flag between tries), then ``consume``s each (4 ms). Python's timed
waits block in ``sem_clockwait``, which nsys 2022.4's OS runtime trace does not record: the wait
is seen only as time off the CPU (context switches). ``--fix``: ``produce`` takes 4 ms.

Known answer: lever ``cheaper_stage`` on ``produce``; 12/4 = 3x, the consumer's 4 ms then limits.
Profiled as ``timed_wait`` with context switches (the wait is time off the CPU in no traced call),
and as ``timed_wait_untraced`` without them (labkit's default): there the wait is an untraced gap
between the consumer's ranges, and the producer's act ends nearly every one of them.
"""
import queue
import threading

from _known import Steady, args, cpu, produce

from labkit import annotate

a = args(__doc__, items=40)
q: queue.Queue = queue.Queue()
stop = threading.Event()

with Steady(a.items):
    t = threading.Thread(target=produce, args=(q, a.items, 4 if a.fix else 12), name="producer")
    t.start()
    done = 0
    while done < a.items and not stop.is_set():
        try:
            i = q.get(timeout=0.05)
        except queue.Empty:
            continue
        with annotate.range("consume", batch=i, items=1):
            cpu(4)
        done += 1
    t.join()
