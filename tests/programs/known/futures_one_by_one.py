"""(af) Submit, then wait, one request at a time: per item the main thread submits a request to a
``concurrent.futures`` thread pool (its worker, without ranges, waits 30 ms as a remote call would:
``time.sleep``) and waits for the future's result in 'request', then computes on the answer
(``compute``, 10 ms) before submitting the next. ``--fix``: the next eight requests always
submitted ahead (a pool of eight), so they wait while the main thread computes.

Known answer: lever ``parallel_input`` (or ``in_flight``) on 'request'; per item 40 ms -> 10 ms (the
compute; the waits hidden behind it), 40 items: 1,600 ms against 30 + 400 ms, 3.7x.
"""
from concurrent.futures import ThreadPoolExecutor

from _known import Steady, args, cpu, wait

from labkit import annotate


def remote(i: int) -> int:
    wait(30)
    return i


if __name__ == "__main__":
    a = args(__doc__, items=40)
    with ThreadPoolExecutor(8 if a.fix else 1) as pool:
        pool.submit(remote, -1).result()  # the worker's start is not the steady loop
        with Steady(a.items):
            if a.fix:
                ahead = {i: pool.submit(remote, i) for i in range(min(8, a.items))}
                for i in range(a.items):
                    with annotate.range("request", batch=i, items=1):
                        ahead.pop(i).result()
                    if i + 8 < a.items:
                        ahead[i + 8] = pool.submit(remote, i + 8)
                    with annotate.range("compute", batch=i, items=1):
                        cpu(10)
            else:
                for i in range(a.items):
                    with annotate.range("request", batch=i, items=1):
                        pool.submit(remote, i).result()
                    with annotate.range("compute", batch=i, items=1):
                        cpu(10)
