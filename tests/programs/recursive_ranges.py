"""Recursive NVTX ranges: 8 rounds, each a ``solve`` that computes 2 ms and calls itself twice down to
depth 4 (31 nested ``solve`` ranges, 62 ms), then ``check`` (20 ms). The repeated range of the run is
``round``: ``solve``'s levels, summed, hold more time than the rounds themselves."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "known"))
from _known import cpu  # noqa: E402

from labkit import annotate  # noqa: E402


def solve(depth: int) -> None:
    with annotate.range("solve"):
        cpu(2)
        if depth < 4:
            solve(depth + 1)
            solve(depth + 1)


for i in range(8):
    with annotate.range("round", batch=i):
        solve(0)
        with annotate.range("check"):
            cpu(20)
