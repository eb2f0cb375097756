"""(p) A consumer that polls: a producer thread computes each item (``produce``, 20 ms) and puts it
in a queue; the main thread checks the queue and naps 1 ms until an item is there (a polling loop,
no range around it), then ``consume``s it (5 ms). The consumer's naps are waits for the producer,
not latency of its own: nsys traces them as ``clock_nanosleep``, as it does a read's timer.
``--fix``: ``produce`` takes 5 ms (a cheaper stage).

Known answer: lever ``cheaper_stage`` on ``produce``; 20/5 = 4x, the consumer's 5 ms then limits. A
model that counts the naps as the consumer's latency sees two threads each occupied all along:
balanced, nothing to find.
"""
import queue
import threading
import time

from _known import Steady, args, cpu, produce

from labkit import annotate

a = args(__doc__, items=40)
q: queue.Queue = queue.Queue()

with Steady(a.items):
    t = threading.Thread(target=produce, args=(q, a.items, 5 if a.fix else 20), name="producer")
    t.start()
    done = 0
    while done < a.items:
        try:
            i = q.get_nowait()
        except queue.Empty:
            time.sleep(0.001)
            continue
        with annotate.range("consume", batch=i, items=1):
            cpu(5)
        done += 1
    t.join()
