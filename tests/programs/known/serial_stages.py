"""(d) Two CPU stages in series in one thread that could overlap: ``features`` (25 ms)
then ``classify`` (15 ms). ``--fix`` runs features in a second thread feeding classify
through a queue (hashing releases the GIL, so both use a core).

Known answer: lever ``overlap_stages``; 40/25 = 1.6x (on two free cores also in work done).
"""
import queue
import threading

from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=30)


def features(i: int) -> int:
    with annotate.range("features", batch=i, items=1):
        cpu(25)
    return i


with Steady(a.items):
    if a.fix:
        q: queue.Queue = queue.Queue(maxsize=4)
        t = threading.Thread(target=lambda: [q.put(features(i)) for i in range(a.items)], name="features")
        t.start()
    for i in range(a.items):
        if a.fix:
            with annotate.range("wait_features"):
                q.get()
        else:
            features(i)
        with annotate.range("classify", batch=i, items=1):
            cpu(15)
    if a.fix:
        t.join()
