"""(e) A stage the output does not need: per item ``infer`` (15 ms) then ``display``
(30 ms, drawing frames nobody looks at). ``--fix`` drops display.

Known answer (advise told ``removable=("display",)``): lever ``remove_stage`` on ``display``;
45/15 = 3.0x.
"""
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=28)
with Steady(a.items):
    for i in range(a.items):
        with annotate.range("infer", batch=i, items=1):
            cpu(15)
        if not a.fix:
            with annotate.range("display", batch=i, items=1):
                cpu(30)
