"""(d) Two CPU stages in series in one thread that could overlap: ``features`` (25 ms)
then ``classify`` (15 ms). ``--fix`` runs features in a second thread feeding classify
through a queue (hashing releases the GIL, so both use a core).

Known answer: lever ``overlap_stages``; 40/25 = 1.6x (on two free cores also in work done).
"""
from _known import Steady, args, cpu, inputs

from labkit import annotate

a = args(__doc__, items=30)


def features(i: int) -> int:
    with annotate.range("features", batch=i, items=1):
        cpu(25)
    return i


with Steady(a.items):
    for i in inputs(features, a.items, ahead=a.fix, wait_name="wait_features", thread="features"):
        with annotate.range("classify", batch=i, items=1):
            cpu(15)
