"""(i) A balanced pipeline with nothing to fix (the control): a reader thread waits 20 ms per item,
the main thread computes (20 ms), a writer thread waits 20 ms per item; queues between
them. ``--fix`` is the same program.

Known answer: no finding above noise; fix over slow = 1.0x.
"""
import queue
import threading

from _known import Steady, args, cpu, wait

from labkit import annotate

a = args(__doc__, items=60)
inq: queue.Queue = queue.Queue(maxsize=4)
outq: queue.Queue = queue.Queue(maxsize=4)


def reader() -> None:
    for i in range(a.items):
        with annotate.range("read", batch=i, items=1):
            wait(20)
        inq.put(i)


def writer() -> None:
    for _ in range(a.items):
        i = outq.get()
        with annotate.range("write", batch=i, items=1):
            wait(20)


with Steady(a.items):
    threads = [threading.Thread(target=reader, name="reader"), threading.Thread(target=writer, name="writer")]
    for t in threads:
        t.start()
    for _ in range(a.items):
        with annotate.range("wait_input"):
            i = inq.get()
        with annotate.range("compute", batch=i, items=1):
            cpu(20)
        outq.put(i)
    for t in threads:
        t.join()
