"""(h) No NVTX at all: 32 requests, each waits 30 ms (a remote store's latency), reads 1 MiB from a
file in 4 KiB ``read`` calls and hashes for 0.5 ms. Nearly all its time is blocked, not computing.
``--fix`` issues the requests from 8 threads at once.

Known answer: the judgement calls the run blocked (sleeps), not compute; lever ``parallel_input``;
about 32 x 31 ms / (4 x 30 ms + what the reads and hashing of 32 requests add on 2 cores) =
7.4x measured.
"""
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

from _known import Steady, args, cpu, wait

a = args(__doc__, items=32)
fd, path = tempfile.mkstemp(suffix=".bin")
os.write(fd, os.urandom(1 << 20))
os.close(fd)


def request(i: int) -> None:
    wait(30)
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 4096):
            pass
    finally:
        os.close(fd)
    cpu(0.5)


try:
    with Steady(a.items):
        if a.fix:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(request, range(a.items)))
        else:
            for i in range(a.items):
                request(i)
finally:
    os.unlink(path)
