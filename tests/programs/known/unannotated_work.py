"""(w) Work between the ranges: per item the main thread prepares it outside any range (20 ms of
computing, as preprocessing its author did not annotate), then ``consume``s it (5 ms, a range).
``--fix``: the preparation takes 0.5 ms.

Known answer: lever ``cheaper_stage`` on the time outside the ranges (no stage); 25/5.5 = 4.5x (5x
if it took no time). Before labkit read untraced time as a finding, nothing was found: the thread
was busy 21 % in its ranges, and its time between them was not its own.
"""
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=40)
with Steady(a.items):
    for i in range(a.items):
        cpu(0.5 if a.fix else 20)
        with annotate.range("consume", batch=i, items=1):
            cpu(5)
