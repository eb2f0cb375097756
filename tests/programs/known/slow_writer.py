"""(ag) A slow writer's back-pressure, between threads: the main thread computes each item
(``produce``, 5 ms) and puts it into a bounded queue (two places); a writer thread takes each and
writes it to a slow device (``write``, a 15 ms wait, as a disk or a socket would be). Once the queue
is full the producer blocks in ``put`` until the writer takes an item: its waits are the writer's
doing, not time of its own. ``--fix``: the write takes 3 ms (a faster device, or a buffered write).

Known answer: lever ``cheaper_stage`` on ``write``; 15/5 = 3x, the producer's 5 ms then limits. A
model that counts the producer's blocked ``put`` as its own latency sees two busy threads.
"""
import queue
import threading

from _known import Steady, args, produce, wait

from labkit import annotate

a = args(__doc__, items=40)
q: queue.Queue = queue.Queue(maxsize=2)


def writer() -> None:
    while True:
        i = q.get()
        if i is None:
            return
        with annotate.range("write", batch=i, items=1):
            wait(3 if a.fix else 15)


t = threading.Thread(target=writer, name="writer")
t.start()
with Steady(a.items):
    produce(q, a.items, 5)
    q.put(None)
    t.join()
