"""(g) Work on every item where one in four suffices: ``detect`` (30 ms) then ``track``
(3 ms) on every item; the tracker carries the boxes between detections. ``--fix`` detects
every 4th item only.

Known answer (advise told ``skip_every=4``): lever ``skip_work`` on ``detect``;
33/(30/4 + 3) = 3.1x.
"""
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=36)
every = 4 if a.fix else 1
with Steady(a.items):
    for i in range(a.items):
        if i % every == 0:
            with annotate.range("detect", batch=i, items=1):
                cpu(30)
        with annotate.range("track", batch=i, items=1):
            cpu(3)
