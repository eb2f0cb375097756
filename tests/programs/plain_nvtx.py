"""A small program that is not the lab's: plain ``nvtx`` annotations only (nvtx==0.2.11, which nsys
2022.4 records), two threads, two domains sharing the range name ``read``, named categories, and a
repeated outer range with nested steps. CPU only; about 0.5 s.

    nsys profile -t nvtx,osrt --sample=none --cpuctxsw=none python tests/programs/plain_nvtx.py
"""
import threading
import time

import nvtx



def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def loader(n: int) -> None:
    for _ in range(n):
        with nvtx.annotate("read", domain="IO", category="disk"):
            time.sleep(0.01)


def main(steps: int = 6) -> None:
    t = threading.Thread(target=loader, args=(steps,), name="loader")
    t.start()
    for i in range(steps):
        with nvtx.annotate("step", payload=i):
            with nvtx.annotate("read", domain="Compute", category="tensor"):
                spin(0.004)
            with nvtx.annotate("train"):
                spin(0.02)
    t.join()


if __name__ == "__main__":
    main()
