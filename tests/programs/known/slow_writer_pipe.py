"""(ah) A slow writer's back-pressure, through a pipe: the main process computes each item
(``produce``, 5 ms) and writes it, 256 KiB, into the pipe of a child process (started with
exec, so nsys traces it) that reads each item whole and then encodes it (``encode``, 15 ms of
computing). The pipe holds 64 KiB, so the producer's ``write`` blocks until the child has read
the item: the child's pace, not the producer's work. ``--fix``: ``encode`` takes 3 ms (a cheaper
encoder).

Known answer: lever ``cheaper_stage`` on ``encode``; 15/5 = 3x, the producer's 5 ms then limits
(moving 256 KiB through a pipe costs well under a millisecond). A model that counts the blocked
writes as the producer's own latency sees two busy processes.
"""
import os
import subprocess
import sys

from _known import Steady, args, cpu

from labkit import annotate

ITEM = 256 << 10

CHILD = """
import os, sys
sys.path.insert(0, {here!r})
from _known import cpu
from labkit import annotate
ms, n, item = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
fd = sys.stdin.fileno()
for i in range(n):
    got = 0
    while got < item:
        chunk = os.read(fd, item - got)
        if not chunk:
            sys.exit(0)
        got += len(chunk)
    with annotate.range("encode", batch=i, items=1):
        cpu(ms)
"""

if __name__ == "__main__":
    a = args(__doc__, items=40)
    here = os.path.dirname(os.path.abspath(__file__))
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(here=here), str(3 if a.fix else 15),
                              str(a.items + 1), str(ITEM)], stdin=subprocess.PIPE)
    payload = bytes(ITEM)
    child.stdin.write(payload)  # the first item: the child's start-up is not the steady loop
    child.stdin.flush()
    with Steady(a.items):
        for i in range(a.items):
            with annotate.range("produce", batch=i, items=1):
                cpu(5)
            child.stdin.write(payload)
            child.stdin.flush()
        child.stdin.close()
        child.wait()
