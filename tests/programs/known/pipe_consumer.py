"""(r) A consumer fed through a pipe by another process: a producer process (spawned, so nsys traces
it) computes each item (``produce``, 20 ms) and sends it through a ``multiprocessing.Queue``; the
main process blocks reading the queue's pipe (a ``read`` to nsys, as a file's would be), then
``consume``s the item (5 ms). Each read returns just after the producer's write: a wait on that
peer, not latency of its own. ``--fix``: ``produce`` takes 5 ms (a cheaper stage).

Known answer: lever ``cheaper_stage`` on ``produce``; 20/5 = 4x, the consumer's 5 ms then limits. A
model that counts the reads as the consumer's latency sees two processes each occupied all along:
balanced, nothing to find.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the spawned child imports _known too

from _known import args, fed_by_process  # noqa: E402

if __name__ == "__main__":
    a = args(__doc__, items=40)
    fed_by_process(a.items, 5 if a.fix else 20, name="producer")
