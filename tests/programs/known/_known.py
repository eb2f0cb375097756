"""What the known-answer programs share: work of a known cost that releases the GIL, the
command line (``--fix`` applies the program's lever) and the one JSON line each prints at exit.

CPU work is SHA-256 over a 1 MiB buffer, ``n`` times: hashlib releases the GIL for buffers this
large, so two threads really run on two cores, and the cost is fixed by the work, not by a clock
(0.57 ms per MiB on the 2-core CI machine, so 18 MiB is about 10 ms). Waits are ``time.sleep``,
as I/O would be: nsys's OS-runtime trace records them as ``clock_nanosleep``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

MIB = bytes(1 << 20)


def cpu(mib: int) -> str:
    """Hash ``mib`` MiB (about 0.57 ms each on the CI machine), releasing the GIL."""
    h = hashlib.sha256()
    for _ in range(mib):
        h.update(MIB)
    return h.hexdigest()


def wait(ms: float) -> None:
    """Block for ``ms`` milliseconds, as a read from a slow device would."""
    time.sleep(ms / 1e3)


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
