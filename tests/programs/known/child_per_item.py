"""(n) A child process per item, one at a time: the main process prepares each item (10 ms), then
runs a child process that computes it (40 ms, after its interpreter starts) and waits for it, so
the items pass one after another through a chain of short-lived processes. No thread is busy most
of the window; every process waits for the next. ``--fix``: two items in flight (two threads, each
preparing its item and running its child).

Known answer: lever ``in_flight``; about 2x on two free cores (the chain's work, interpreter starts
included, shared by both).
"""
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from _known import Steady, args, cpu

from labkit import annotate

if len(sys.argv) > 2 and sys.argv[1] == "child":
    with annotate.range("compute"):
        cpu(float(sys.argv[2]))
    sys.exit(0)

a = args(__doc__, items=16)


def item(i: int) -> None:
    with annotate.range("prepare", batch=i, items=1):
        cpu(10)
    with annotate.range("run_child", batch=i, items=1):
        subprocess.run([sys.executable, __file__, "child", "40"], check=True)


with Steady(a.items):
    if a.fix:
        with ThreadPoolExecutor(2, thread_name_prefix="item") as pool:
            list(pool.map(item, range(a.items)))
    else:
        for i in range(a.items):
            item(i)
