"""Benchmark: microseconds per ``labkit.annotate.range``, without nsys and under nsys.

    python benchmarks/annotate_overhead.py [--ranges 50000] [--repeats 5] [--no-nsys]

Times N empty ranges with ``batch`` and ``items`` (as the pipeline's stages use them) in one
process, best of ``--repeats`` passes, and prints us/range. Then runs the same loop under
``nsys profile --sample=none --cpuctxsw=none -t nvtx`` (the nsys that labkit finds) and prints
its figure too; there the NVTX calls reach nsys's injection library, so the cost is real.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(n: int, repeats: int) -> float:
    """Microseconds per empty range with batch and items: the best of ``repeats`` passes (as
    timeit does: on a shared machine the slower passes measure the neighbours)."""
    from labkit import annotate

    per = []
    for _ in range(repeats):
        annotate.reset()
        t0 = time.perf_counter_ns()
        for i in range(n):
            with annotate.range("infer", batch=i, items=4):
                pass
        per.append((time.perf_counter_ns() - t0) / n / 1e3)
    annotate.reset()
    return min(per)


def under_nsys(n: int, repeats: int) -> float | None:
    """The same measurement in a child process run by nsys; None when nsys is not installed."""
    from labkit.env import find_nsys

    nsys = find_nsys()
    if nsys is None:
        print("under nsys: skipped (nsys not found: install it with scripts/install-nsys or set LABKIT_NSYS)")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "us.txt"
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import annotate_overhead as a; "
                f"open({str(out)!r}, 'w').write(str(a.measure({n}, {repeats})))")
        subprocess.run([str(nsys), "profile", "--sample=none", "--cpuctxsw=none", "-t", "nvtx", "-o",
                        str(Path(tmp) / "bench"), sys.executable, "-c", code],
                       check=True, capture_output=True, text=True, timeout=600)
        return float(out.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranges", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-nsys", action="store_true", help="skip the run under nsys")
    args = p.parse_args(argv)
    print(f"without nsys: {measure(args.ranges, args.repeats):.2f} us/range "
          f"({args.ranges} ranges with batch and items, best of {args.repeats})")
    if not args.no_nsys:
        us = under_nsys(args.ranges, args.repeats)
        if us is not None:
            print(f"under nsys -t nvtx: {us:.2f} us/range")
    return 0


if __name__ == "__main__":
    sys.exit(main())
