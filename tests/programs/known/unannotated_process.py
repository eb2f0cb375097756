"""(v) A feeder process nobody annotated, as a DataLoader's worker: a spawned process without NVTX
ranges computes each item (20 ms) and sends it through a ``multiprocessing.Queue``; the main
process blocks reading the queue's pipe (a ``read``), then ``consume``s the item (5 ms, a range).
Each read returns just after the feeder's write (its queue's feeder thread, no ranges either): a wait
on that process, not latency. ``--fix``: the feeder computes 5.5 ms an item, just over the
consumer's 5.

Known answer: lever ``cheaper_stage`` on the time outside the ranges (no stage); 20/5 = 4x (a
bound), the fix 20/5.5 = 3.6x. Before, only threads with ranges could end a peer's read, so the
reads were the consumer's latency: 'The limiting thread waits on its input', 1.10x, with the
feeder's time kept.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the spawned child imports _known too

from _known import args, fed_by_process  # noqa: E402

if __name__ == "__main__":
    a = args(__doc__, items=40)
    fed_by_process(a.items, 5.5 if a.fix else 20, annotated=False, name="feeder")
