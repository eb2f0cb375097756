"""(j) Dominated by start-up: 1 s of waiting (imports, as from a network file system) and a 1 s
``build`` (hashing, as an engine build) before a short steady loop of 30 items that each
``load`` (wait 10 ms) then ``step`` (15 ms). ``--fix`` prefetches the loads in a thread.

Known answer, in the steady window only (start-up left out): lever ``overlap_stages`` on ``load``;
25/15 = 1.7x. Over the whole trace the same lever would read as 2.75/2.45 = 1.1x.
"""
from _known import Steady, args, cpu, inputs, wait

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
    for i in inputs(load, a.items, ahead=a.fix, wait_name="wait_input", thread="loader"):
        with annotate.range("step", batch=i, items=1):
            cpu(15)
