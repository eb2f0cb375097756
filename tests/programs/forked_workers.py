"""A program that is not the lab's: a ``multiprocessing`` pool of two workers started by fork (no
exec, as a PyTorch DataLoader's workers are), each 'load'ing items in an NVTX range (a 30 ms read,
then 5 ms of compute), the parent 'consume'-ing each in a range of its own (2 ms). About 1 s.

    nsys profile -t nvtx,osrt --trace-fork-before-exec=true python tests/programs/forked_workers.py
"""
import multiprocessing as mp
import time

import nvtx

ITEMS = 16


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def load(i: int) -> int:
    with nvtx.annotate("load", payload=i):
        time.sleep(0.03)
        spin(0.005)
    return i


if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as pool:
        for i in pool.imap(load, range(ITEMS)):
            with nvtx.annotate("consume", payload=i):
                spin(0.002)
