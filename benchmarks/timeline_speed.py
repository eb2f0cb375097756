"""Time plot_timeline (draw and save a PNG) and the Perfetto export on synthetic reports of 20k
and 200k events, and the interactive timeline's first render: build the Bokeh figure, embed it
(BokehJS inline) and draw it in headless Chromium until BokehJS says the document is idle.

    python benchmarks/timeline_speed.py [--events 20000 200000] [--threads 6] [--no-browser]

Events are split over ``--threads`` threads (NVTX ranges, two nesting levels) and one GPU
stream (kernels with their CUDA API launch calls), as a long queued pipeline run records them.
The browser part needs Debian's chromium and chromium-driver and selenium (scripts/browser_lab.py).
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from labkit.show.perfetto import to_perfetto
from labkit.report.reader import CUDA_API_COLUMNS
from labkit.report.load import Report
from labkit.show.timeline import plot_timeline

STAGES = ("decode", "preprocess", "infer", "postprocess", "track", "display")


def synthetic(n: int, threads: int, seed: int = 0) -> Report:
    """A report of about ``n`` events: half NVTX ranges, a quarter kernels, a quarter launches."""
    rng = np.random.default_rng(seed)
    k = n // 2
    start = np.cumsum(rng.integers(1_000, 20_000, k))
    end = start + rng.integers(200, 15_000, k)
    tid = rng.integers(0, threads, k)
    nvtx = pd.DataFrame({"name": np.array(STAGES, dtype=object)[tid % len(STAGES)], "domain": "",
                         "start_ns": start, "end_ns": end, "duration_ns": end - start, "tid": 100 + tid,
                         "pid": 100, "global_tid": 100 + tid, "thread_name": "python", "depth": rng.integers(0, 2, k),
                         "parent": -1, "kind": "push_pop", "payload": pd.array([pd.NA] * k, dtype="Int64"),
                         "color": None, "category": -1, "ended": True})
    m = n // 4
    ks = np.sort(rng.integers(start[0], end[-1], m))
    kern = pd.DataFrame({"name": "conv", "demangled": "conv", "device_id": 0, "context_id": 1, "stream_id": 7,
                         "correlation_id": np.arange(m), "grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 1,
                         "block_y": 1, "block_z": 1, "start_ns": ks + 5_000, "end_ns": ks + 9_000,
                         "duration_ns": 4_000, "pid": 100})
    api = pd.DataFrame({"name": "cudaLaunchKernel", "tid": 101, "pid": 100, "global_tid": 101,
                        "correlation_id": np.arange(m), "start_ns": ks, "end_ns": ks + 2_000, "duration_ns": 2_000,
                        "return_value": 0})[CUDA_API_COLUMNS]
    return Report.from_frames(nvtx=nvtx, kernels=kern, cuda_api=api, path=f"synthetic-{n}")


_IDLE = "return !!(window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].is_idle)"


def first_render(reports: dict, driver) -> None:
    """Print, per report, the interactive timeline's first render: Python (figure and HTML) and
    the browser (load to idle)."""
    from labkit.show.interactive import interactive_timeline

    with tempfile.TemporaryDirectory() as tmp:
        for n, rep in reports.items():
            t0 = time.perf_counter()
            t = interactive_timeline(rep)
            path = Path(tmp) / f"timeline_{n}.html"
            t.save(path)
            t1 = time.perf_counter()
            driver.get(path.as_uri())
            while not driver.execute_script(_IDLE):
                time.sleep(0.02)
            t2 = time.perf_counter()
            what = f"{t.bars:,} bars" + (f", merged (gap {t.gap_ns / 1e3:.0f} us)" if t.gap_ns else ", none merged")
            print(f"{n:>8} events, interactive: python {t1 - t0:.2f} s, browser {t2 - t1:.2f} s, first render "
                  f"{t2 - t0:.2f} s ({what}, {path.stat().st_size / 1e6:.1f} MB of HTML)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, nargs="+", default=[20_000, 200_000])
    p.add_argument("--threads", type=int, default=6)
    p.add_argument("--no-browser", action="store_true", help="time the static timeline only")
    args = p.parse_args()
    plot_timeline(synthetic(100, args.threads)).savefig(io.BytesIO(), format="png")  # imports, fonts: not timed
    for n in args.events:
        rep = synthetic(n, args.threads)
        rep.gpu_ops()  # built once per report, as a notebook would have it already
        t0 = time.perf_counter()
        fig = plot_timeline(rep)
        t1 = time.perf_counter()
        fig.savefig(io.BytesIO(), format="png")
        t2 = time.perf_counter()
        print(f"{n:>8} events, static: plot {t1 - t0:.2f} s, save PNG {t2 - t1:.2f} s, total {t2 - t0:.2f} s")
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            out = to_perfetto(rep, Path(tmp) / "t.pftrace")
            print(f"{n:>8} events, Perfetto export: {time.perf_counter() - t0:.2f} s, {out.stat().st_size / 1e6:.1f} MB")
    if args.no_browser:
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import browser_lab

    why = browser_lab.missing()
    if why:
        print(f"interactive first render not timed: {why}")
        return
    with browser_lab.chromium() as driver:
        reports = {n: synthetic(n, args.threads) for n in args.events}
        for rep in reports.values():
            rep.gpu_ops()
        warm = synthetic(100, args.threads)  # BokehJS parsed once, imports done: not timed
        from labkit.show.interactive import interactive_timeline

        with tempfile.TemporaryDirectory() as tmp:
            interactive_timeline(warm).save(Path(tmp) / "warm.html")
            driver.get((Path(tmp) / "warm.html").as_uri())
        first_render(reports, driver)


if __name__ == "__main__":
    main()
