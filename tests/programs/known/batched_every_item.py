"""(k) Work on every item, in batches whose calls pay a fixed cost: ``detect`` runs on batches of 8
consecutive items, each call paying a nested ``setup`` (24 ms) and then 3 ms per item, and
``track`` takes 2 ms per item. ``--fix`` detects every 4th item only, in the same batches: every
batch still holds one (items 0 and 4 of each), so every call is still made.

Known answer (advise told ``skip_every=4``): lever ``skip_work`` on ``detect``;
(24 + 8 x 3 + 8 x 2) / (24 + 2 x 3 + 8 x 2) = 64/46 = 1.39x. Scaling the stage's whole time by 1/4
would say 64/28 = 2.3x: the fixed cost is paid per call, not per item.
"""
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=64)
every, size = (4 if a.fix else 1), 8
with Steady(a.items):
    for b, first in enumerate(range(0, a.items, size)):
        run = [i for i in range(first, min(first + size, a.items)) if i % every == 0]
        if run:
            with annotate.range("detect", batch=b, items=len(run)):
                with annotate.range("setup"):
                    cpu(24)
                cpu(3 * len(run))
        with annotate.range("track", batch=b, items=size):
            cpu(2 * size)
