"""The detector stage alone under two sets of options: how much a change of backend, precision,
layout or compiler changes the stage's own time, measured in interleaved pairs.

    python -m source_code.stage_alone --base '{"batch_size": 4}' --lever '{"batch_size": 4, "compile": true}'
        [--pairs 8] [--seconds 0.25]

``--base`` and ``--lever`` are ``detect_video.py`` options as JSON (snake-case names, the values
``source_code.options`` takes); only what builds the detector is read (backend, precision, device,
batch size, channels_last, CUDA graphs, compile, TF32, input size, weights, cache folder, threads).
Both backends are built first (ONNX export, calibration and engine builds are cached in the cache
folder; compile and graph capture are not, and count in ``setup_s``), then each is timed for
``--seconds`` (at least two calls) in turn, base then lever, ``--pairs`` times: the two share
whatever else the machine does at that moment. The input is a float32 batch of the run's batch
size and input size already on the device, in the layout the pipeline hands the backend; on CUDA
each timing ends with a synchronize (a dense network does the same work whatever the pixels).

Prints one JSON line: ``factor`` (the lever's time over the base's, the median over the pairs),
``low`` and ``high`` (its 95 % bootstrap interval over the pairs, scipy.stats.bootstrap),
``pairs``, ``base_ms`` and ``lever_ms`` (median ms a batch), ``batch_size``, ``input_hw``,
``devices``, ``backends`` (their names) and ``setup_s``. Exit 3 with one line naming the fix when
either side cannot run here (``BackendUnavailable``), 2 for bad options.
"""
from __future__ import annotations

import json
import os
import sys
import time

PROG = "stage_alone"
BUILDS = ("backend", "precision", "device", "batch_size", "channels_last", "cuda_graphs", "compile", "tf32",
          "input_hw", "weights", "cache_dir", "threads", "gpu_preprocess")
"""The options that build or feed the detector stage; the others do not change its own work."""


def config_of(options: dict):
    """The ``PipelineConfig`` of ``options`` (a mapping of option names), its other options at their
    defaults; raises ValueError naming a bad one."""
    from source_code.options import build_parser, config_from_args, to_argv

    opts = {k: v for k, v in dict(options).items() if k in BUILDS}
    try:
        args = build_parser().parse_args(to_argv({"inputs": ["-"], **opts}))
    except SystemExit:  # the parser printed its one line
        raise ValueError(f"bad detector options {json.dumps(opts)}") from None
    return config_from_args(args)


def time_backend(backend, x, *, min_seconds: float, max_iters: int, warmup: int = 2) -> tuple[float, int]:
    """Seconds per call of ``backend(x)``, timed over at least ``min(2, max_iters)`` calls after
    ``warmup`` untimed ones (on CUDA, synchronized before and after)."""
    import torch

    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        backend(x)
    sync()
    iters, start = 0, time.perf_counter()
    while True:
        backend(x)
        iters += 1
        if iters >= max_iters or (iters >= 2 and time.perf_counter() - start >= min_seconds):
            break
    sync()
    return (time.perf_counter() - start) / iters, iters


def build(cfg, model_cache: dict):
    """(backend, input batch) of the detector stage under ``cfg``, as ``source_code.pipeline`` builds it."""
    import torch

    from source_code import backends, checks
    from source_code.detector import INPUT_HW, load_detector
    from source_code.options import TF32

    device = checks.resolve_device(cfg.device)
    key = (str(cfg.weights), str(device))
    if key not in model_cache:
        model_cache[key] = load_detector(cfg.weights, device=device)
    hw = tuple(cfg.input_hw) if cfg.input_hw else tuple(INPUT_HW)
    if cfg.compile:
        torch._dynamo.reset()  # a fresh compiler cache: the base's shapes must not count against dynamo's limit
    fn = backends.make_backend(model_cache[key], backend=cfg.backend, precision=cfg.precision, device=device,
                               batch_size=cfg.batch_size, channels_last=cfg.channels_last,
                               cuda_graphs=cfg.cuda_graphs, compile=cfg.compile, input_hw=hw,
                               batch_sizes=(cfg.batch_size,), tf32=TF32[cfg.tf32], cache_dir=checks.cache_folder(cfg))
    torch.manual_seed(0)
    x = torch.rand(cfg.batch_size, 3, *hw, device=device)
    if cfg.channels_last and cfg.gpu_preprocess:  # the GPU resize hands the layout asked for
        x = x.contiguous(memory_format=torch.channels_last)
    return fn, x, device, hw


def interval(ratios, confidence: float = 0.95) -> tuple[float, float]:
    """The bootstrap interval of the median of ``ratios`` (scipy.stats.bootstrap, percentile method);
    one ratio: (it, it)."""
    import numpy as np
    from scipy.stats import bootstrap

    r = np.asarray(ratios, dtype=float)
    if len(r) < 2 or np.ptp(r) == 0:
        return float(r.min()), float(r.max())
    res = bootstrap((r,), np.median, confidence_level=confidence, n_resamples=2000, method="percentile",
                    random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def measure(base: dict, lever: dict, *, pairs: int = 8, seconds: float = 0.25, max_iters: int = 50) -> dict:
    """The lever's stage time over the base's, in ``pairs`` interleaved pairs (see the module docstring)."""
    import numpy as np

    cfg_a, cfg_b = config_of(base), config_of(lever)
    if cfg_a.batch_size != cfg_b.batch_size or cfg_a.input_hw != cfg_b.input_hw:
        raise ValueError("base and lever must share the batch size and input size: the factor is the stage's "
                         "time under the same work")
    if cfg_a.threads:
        import torch

        torch.set_num_threads(cfg_a.threads)
    models: dict = {}
    t0 = time.perf_counter()
    a, xa, dev_a, hw = build(cfg_a, models)
    b, xb, dev_b, _ = build(cfg_b, models)
    setup = time.perf_counter() - t0
    try:
        time_backend(a, xa, min_seconds=0, max_iters=1)  # warm both before the first pair
        time_backend(b, xb, min_seconds=0, max_iters=1)
        ta, tb = [], []
        for _ in range(pairs):
            ta.append(time_backend(a, xa, min_seconds=seconds, max_iters=max_iters, warmup=1)[0])
            tb.append(time_backend(b, xb, min_seconds=seconds, max_iters=max_iters, warmup=1)[0])
    finally:
        a.close()
        b.close()
    ratios = np.asarray(tb) / np.asarray(ta)
    lo, hi = interval(ratios)
    factor = float(np.median(ratios))
    return {"factor": round(factor, 4), "low": round(min(lo, factor), 4), "high": round(max(hi, factor), 4),
            "pairs": pairs, "base_ms": round(float(np.median(ta)) * 1e3, 3),
            "lever_ms": round(float(np.median(tb)) * 1e3, 3), "batch_size": cfg_a.batch_size,
            "input_hw": list(hw), "devices": [str(dev_a), str(dev_b)], "backends": [a.name, b.name],
            "setup_s": round(setup, 2)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as detect_video.py, before torch loads: no spinning threads
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the base's detect_video options, as a JSON object")
    p.add_argument("--lever", required=True, help="the lever's detect_video options, as a JSON object")
    p.add_argument("--pairs", type=int, default=8, help="interleaved pairs (default 8)")
    p.add_argument("--seconds", type=float, default=0.25, help="timed seconds of each side in a pair, at least")
    args = p.parse_args(argv)

    def fail(message: str, code: int) -> int:
        sys.stderr.write(f"{PROG}: error: {message}\n")
        return code

    try:
        base, lever = json.loads(args.base), json.loads(args.lever)
    except json.JSONDecodeError as e:
        return fail(f"--base and --lever take JSON objects of options ({e.msg} at {e.pos})", 2)
    if not isinstance(base, dict) or not isinstance(lever, dict) or args.pairs < 1 or not args.seconds > 0:
        return fail("--base and --lever take JSON objects of options; --pairs at least 1, --seconds above 0", 2)
    from source_code.backends import BackendUnavailable
    from source_code.errors import PipelineError, first_line

    try:
        out = measure(base, lever, pairs=args.pairs, seconds=args.seconds)
    except ValueError as e:
        return fail(first_line(e), 2)
    except (BackendUnavailable, PipelineError) as e:
        return fail(first_line(e), 3)
    except FileNotFoundError as e:  # the weights
        return fail(first_line(e), 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
