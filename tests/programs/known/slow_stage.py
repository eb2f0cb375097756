"""(a) One slow stage among several in one thread: ``transform`` (36 ms) between ``decode`` and
``write`` (9 ms each). ``--fix`` makes transform 18x cheaper (2 ms: a faster library),
almost all of what removing it would give.

Known answer: lever ``cheaper_stage`` on ``transform``; 54/18 = 3.0x if transform cost nothing,
54/20 = 2.7x with the fix.
"""
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=24)
with Steady(a.items):
    for i in range(a.items):
        with annotate.range("decode", batch=i, items=1):
            cpu(9)
        with annotate.range("transform", batch=i, items=1):
            cpu(2 if a.fix else 36)
        with annotate.range("write", batch=i, items=1):
            cpu(9)
