"""(f) Per-call overhead: each ``infer`` call pays a fixed ``setup`` (12 ms, nested) and then
4 ms per item; the slow variant calls it once per item. ``--fix`` calls it on
batches of 16 items.

Known answer: lever ``batch`` on ``infer``; 16/(12/16 + 4) = 3.4x with batches of 16
(4x if the fixed cost vanished).
"""
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=64)
size = 16 if a.fix else 1
with Steady(a.items):
    for b, first in enumerate(range(0, a.items, size)):
        n = min(size, a.items - first)
        with annotate.range("infer", batch=b, items=n):
            with annotate.range("setup"):
                cpu(12)
            cpu(4 * n)
