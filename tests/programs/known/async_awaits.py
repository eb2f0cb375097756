"""(ae) asyncio awaits one after another: an event loop takes each item in turn, awaits its fetch
(``fetch``, 30 ms: ``asyncio.sleep`` as a network request would wait, which nsys's OS-runtime trace
records as the loop's ``epoll_wait``), then computes on it (``compute``, 10 ms) before the next.
``--fix``: the next eight fetches always in flight (a task each, started as an item is taken), so
they wait while the loop computes. (A task starts only when the loop gets control: without
the ``await asyncio.sleep(0)`` that starts each, or with eight tasks that each fetch and compute
gathered under a semaphore of 8, it measured 2.9x here, not 3.7x: the loop runs the computes that
are ready before it starts the next fetches, so each round of eight still waits out one fetch.)

Known answer: lever ``parallel_input`` on ``fetch``; per item 40 ms -> 10 ms (the compute, one loop
on one thread; the waits hidden behind it), 40 items: 1,600 ms against 30 + 400 ms, 3.7x.
"""
import asyncio

from _known import Steady, args, cpu

from labkit import annotate


async def fetch(i: int) -> int:
    await asyncio.sleep(0.030)
    return i


async def one_at_a_time(items: int) -> None:
    for i in range(items):
        with annotate.range("fetch", batch=i, items=1):
            await fetch(i)
        with annotate.range("compute", batch=i, items=1):
            cpu(10)


async def in_flight(items: int) -> None:
    # the next eight fetches always in flight while the loop computes (no ranges here: a task's
    # ranges would interleave with another's on the one thread, and NVTX ranges nest per thread)
    ahead = {i: asyncio.create_task(fetch(i)) for i in range(min(8, items))}
    for i in range(items):
        await ahead.pop(i)
        if i + 8 < items:
            ahead[i + 8] = asyncio.create_task(fetch(i + 8))
            await asyncio.sleep(0)  # let it start: a task runs only when the loop gets control
        cpu(10)


if __name__ == "__main__":
    a = args(__doc__, items=40)
    with Steady(a.items):
        asyncio.run(in_flight(a.items) if a.fix else one_at_a_time(a.items))
