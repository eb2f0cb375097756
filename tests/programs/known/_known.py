"""What the known-answer programs share: work of a known duration that releases the GIL, the
command line (``--fix`` applies the program's lever) and the one JSON line each prints at exit.

CPU work is SHA-256 over 64 KiB chunks until its duration has passed (hashlib releases the GIL for
buffers this large, so two threads really run on two cores). Its duration, not its amount, is
fixed: on a machine shared with other jobs (the 2-core CI VM under load ran hashing at a third of
its idle speed) a stage still takes the milliseconds its program gives it, so each program's
limiter and the speed-up of its fix are the same on every run. The thread computes the whole
time (it never blocks), which is what the judgement must see. Waits are ``time.sleep``, as I/O
would be: nsys's OS-runtime trace records them as ``clock_nanosleep``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import threading
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

CHUNK = bytes(64 << 10)  # 0.04 ms of hashing on an idle CI core
_late = threading.local()  # .ms: how far this thread's cpu/wait calls ran past their durations


def _budget(ms: float) -> float:
    """This call's duration, less what the thread's earlier calls overran: a thread descheduled as
    a deadline passes (5 ms per call at load 10 on the 2-core machine) catches up in its next
    call, so a chain of calls takes the sum of their durations, not that plus one overrun each."""
    return max(ms - getattr(_late, "ms", 0.0), 0.0)


def _spent(ms: float, t0: float) -> None:
    _late.ms = min(getattr(_late, "ms", 0.0) + (time.perf_counter() - t0) * 1e3 - ms, 50.0)


def cpu(ms: float) -> int:
    """Compute (hash) for ``ms`` milliseconds of wall time, releasing the GIL; the chunks hashed."""
    h = hashlib.sha256()
    t0 = time.perf_counter()
    end = t0 + _budget(ms) / 1e3
    n = 0
    while True:
        h.update(CHUNK)
        n += 1
        if time.perf_counter() >= end:
            _spent(ms, t0)
            return n


def wait(ms: float) -> None:
    """Block for ``ms`` milliseconds, as a read from a slow device would."""
    t0 = time.perf_counter()
    time.sleep(_budget(ms) / 1e3)
    _spent(ms, t0)


def args(doc: str, **extra) -> argparse.Namespace:
    """``--fix`` (apply the lever) and ``--items`` (the steady loop's length, default ``items``)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="apply the lever this program is built to need")
    for name, default in extra.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    return p.parse_args()


class Steady:
    """Times the steady loop: ``with Steady(items) as s: ...`` prints ``{"wall_s", "items"}`` at exit."""

    def __init__(self, items: int):
        self.items = items

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            print(json.dumps({"wall_s": round(time.perf_counter() - self.t0, 6), "items": self.items}),
                  flush=True)


def produce(q, items: int, ms: float, annotated: bool = True) -> None:
    """Compute each of ``items`` items for ``ms`` milliseconds (a ``produce`` range, or none where not
    ``annotated``) and put its number in ``q``: the producer of the programs whose consumer waits on it
    (polling, on a pipe, with a timeout) or that a full queue holds back (slow_writer)."""
    from contextlib import nullcontext

    from labkit import annotate

    for i in range(items):
        with annotate.range("produce", batch=i, items=1) if annotated else nullcontext():
            cpu(ms)
        q.put(i)


def fed_by_process(items: int, ms: float, annotated: bool = True, name: str = "producer") -> None:
    """A spawned process (so nsys traces it) :func:`produce`\ s ``items`` + 1 items of ``ms`` each into
    a ``multiprocessing.Queue``; this process takes the first (the child's start-up is not the steady
    loop), then times taking and ``consume``-ing (5 ms, a range) each of the rest (:class:`Steady`).
    Call it under ``if __name__ == "__main__":``, from a script whose folder holds this module."""
    import multiprocessing as mp

    from labkit import annotate

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=produce, args=(q, items + 1, ms, annotated), name=name)
    p.start()
    q.get()
    with Steady(items):
        for _ in range(items):
            i = q.get()
            with annotate.range("consume", batch=i, items=1):
                cpu(5)
    p.join()


def _load(i: int, ms: float) -> int:
    cpu(ms)
    return i


def loaded(items: int, ms: float):
    """A data loader's worker process: a spawned ``multiprocessing.Pool(1)`` prepares each of
    ``items`` items (``ms`` each, no ranges) and hands it over through ``imap``, as a DataLoader's
    worker does. Yields each item's number inside the timed steady loop (:class:`Steady`); the worker
    is started before it. Call it under ``if __name__ == "__main__":``."""
    import functools
    import multiprocessing as mp

    load = functools.partial(_load, ms=ms)
    with mp.get_context("spawn").Pool(1) as pool:
        pool.map(load, range(2))  # the worker started, before the timed loop
        with Steady(items):
            yield from pool.imap(load, range(items))


def workers(target, n: int = 2, name: str = "worker") -> None:
    """Run ``target(k)`` for k in 0..n-1, each on a thread named ``{name}{k}``, and wait for them all."""
    threads = [threading.Thread(target=target, args=(k,), name=f"{name}{k}") for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def remote_pool(q, n: int, ms: float) -> list[threading.Thread]:
    """Start ``n`` worker threads (``worker0``...) that take items from ``q`` with
    ``q.get(timeout=0.05)`` (a loop that would check a stop flag; the wait is ``sem_clockwait``,
    which nsys 2022.4 does not trace) and ``work`` on each for ``ms`` milliseconds (a remote call: a
    sleep), until they take a None. :func:`join_pool` ends them."""
    from labkit import annotate

    def worker() -> None:
        while True:
            try:
                i = q.get(timeout=0.05)
            except queue.Empty:
                continue
            if i is None:
                return
            with annotate.range("work", batch=i, items=1):
                wait(ms)

    threads = [threading.Thread(target=worker, name=f"worker{k}") for k in range(n)]
    for t in threads:
        t.start()
    return threads


def join_pool(q, threads: list[threading.Thread]) -> None:
    """Put one None per thread of a :func:`remote_pool` in ``q`` and wait for them."""
    for _ in threads:
        q.put(None)
    for t in threads:
        t.join()


def inputs(make, items: int, *, ahead: bool, wait_name: str = "wait_input", thread: str = "prefetch"):
    """``make(i)`` for each item in order: in line, or (``ahead``) made by a thread of its own up to
    four items ahead through a queue, each take a ``wait_name`` NVTX range (the overlap lever)."""
    if not ahead:
        for i in range(items):
            yield make(i)
        return
    import queue
    import threading

    from labkit import annotate

    q: queue.Queue = queue.Queue(maxsize=4)
    t = threading.Thread(target=lambda: [q.put(make(i)) for i in range(items)], name=thread)
    t.start()
    for _ in range(items):
        with annotate.range(wait_name):
            yield q.get()
    t.join()
