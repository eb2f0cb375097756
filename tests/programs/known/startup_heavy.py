"""(j) Dominated by start-up: 1 s of waiting (imports, as from a network file system) and a 1 s
``build`` (hashing, as an engine build) before a short steady loop of 30 items that each
``load`` (wait 10 ms) then ``step`` (15 ms). ``--fix`` prefetches the loads in a thread.

Known answer, in the steady window only (start-up left out): lever ``overlap_stages`` on ``load``;
25/15 = 1.7x. Over the whole trace the same lever would read as 2.75/2.45 = 1.1x.
"""
import queue
import threading

from _known import Steady, args, cpu, wait

from labkit import annotate

a = args(__doc__, items=30)
wait(1000)
with annotate.range("build"):
    cpu(1000)


def load(i: int) -> int:
    with annotate.range("load", batch=i, items=1):
        wait(10)
    return i


with Steady(a.items):
    if a.fix:
        q: queue.Queue = queue.Queue(maxsize=4)
        t = threading.Thread(target=lambda: [q.put(load(i)) for i in range(a.items)], name="loader")
        t.start()
    for i in range(a.items):
        if a.fix:
            with annotate.range("wait_input"):
                q.get()
        else:
            load(i)
        with annotate.range("step", batch=i, items=1):
            cpu(15)
    if a.fix:
        t.join()
