"""(f) Per-call overhead: each ``infer`` call pays a fixed ``setup`` (6 MiB, ~3.4 ms, nested) and
then 2 MiB (~1.1 ms) per item; the slow variant calls it once per item. ``--fix`` calls it on
batches of 16 items.

Known answer: lever ``batch`` on ``infer``; 4.5/(3.4/16 + 1.1) = 3.4x with batches of 16
(4x if the fixed cost vanished).
"""
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=288)
size = 16 if a.fix else 1
with Steady(a.items):
    for b, first in enumerate(range(0, a.items, size)):
        n = min(size, a.items - first)
        with annotate.range("infer", batch=b, items=n):
            with annotate.range("setup"):
                cpu(6)
            cpu(2 * n)
