"""(b) A starved consumer: a loader thread waits 30 ms per batch (as a read would) and decodes it
(1 ms) into a queue; the training loop waits for each batch, then trains on it (10 ms).
``--fix`` runs four loader threads, so batches arrive faster than training uses them.

Known answer: the loader thread limits (``load_batch``); lever ``parallel_input`` (or
``overlap_stages``); 31/10 = about 3x once the loader no longer limits.
"""
import queue
import threading

from _known import Steady, args, cpu, wait

from labkit import annotate

a = args(__doc__, items=40)
loaders = 4 if a.fix else 1
q: queue.Queue = queue.Queue(maxsize=8)


def loader(k: int) -> None:
    for i in range(k, a.items, loaders):
        with annotate.range("load_batch", batch=i, items=1):
            wait(30)
            cpu(1)
        q.put(i)


with Steady(a.items):
    threads = [threading.Thread(target=loader, args=(k,), name=f"loader{k}") for k in range(loaders)]
    for t in threads:
        t.start()
    for _ in range(a.items):
        with annotate.range("wait_batch"):
            i = q.get()
        with annotate.range("train", batch=i, items=1):
            cpu(10)
    for t in threads:
        t.join()
