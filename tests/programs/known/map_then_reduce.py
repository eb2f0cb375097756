"""(o) Map on a process pool, then reduce, one after the other: each round the main process hands 4
chunks to a pool of one worker process (40 ms each: 160 ms) and waits for them all, then reduces
them itself (80 ms) before handing out the next round. The worker is a forked process, which nsys
does not trace by default: the main thread waits in 'map' on work that no traced thread does, and a
result-handler thread of the pool sits in reads of its pipe all along. ``--fix``: hand out the
next round before reducing the last one (map_async), so the reduce runs while the worker maps.

Known answer: lever ``overlap_stages`` on 'reduce'; per round 240 ms -> 160 ms (the reduce hidden
behind the map), 16 rounds: 3840 / 2640 ms = 1.45x on two free cores (one for the worker, one for
the reduce).
"""
import multiprocessing as mp

from _known import Steady, args, cpu

from labkit import annotate


def chunk(i: int) -> int:
    return cpu(40)


def reduce_(parts) -> None:
    cpu(80)


if __name__ == "__main__":
    a = args(__doc__, items=16)
    with mp.get_context("fork").Pool(1) as pool, Steady(a.items):
        if a.fix:
            pending = None
            for i in range(a.items):
                with annotate.range("map", batch=i, items=1):
                    res = pool.map_async(chunk, range(4))
                if pending is not None:
                    with annotate.range("reduce", batch=i - 1, items=1):
                        reduce_(pending)
                with annotate.range("map", batch=i, items=1):
                    pending = res.get()
            with annotate.range("reduce", batch=a.items - 1, items=1):
                reduce_(pending)
        else:
            for i in range(a.items):
                with annotate.range("map", batch=i, items=1):
                    parts = pool.map(chunk, range(4))
                with annotate.range("reduce", batch=i, items=1):
                    reduce_(parts)
