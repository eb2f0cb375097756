"""Video detection and tracking pipeline: decode -> preprocess -> infer -> postprocess -> track -> display.

``run_pipeline(config) -> dict`` checks the request once, opens the sources, loads the detector,
composes the stages (``source_code.stages``) with one runner (``source_code.runner``: sync, or
queued with every stage in its own thread) and returns the results document that
``detect_video.py --results`` writes (fields: ``labkit.annotate.RESULTS_FIELDS``).

Where things live: options ``source_code.options``; checks ``source_code.checks``; sources and
muxer ``source_code.sources``; the stats sink and accuracy ``source_code.results``; errors and
out-of-memory handling ``source_code.errors``; the FLOPs cache ``source_code.flops``.

Every stage call runs inside ``labkit.annotate.range(stage, batch=i, items=n)`` (NVTX range named
after the stage, payload = batch index, item count = frames). Decoder threads emit one
``decode`` range per frame (items=1, batch = the batch that frame lands in).
"""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Callable

import cv2

from labkit import annotate
from source_code import checks
from source_code.decode_workers import decode_pool
from source_code.errors import EXIT_FAILED, EXIT_OOM, EXIT_UNAVAILABLE, PipelineError, first_line, \
    out_of_memory_is_exit_4, out_of_memory_message
from source_code.nvdec import NvdecSource, require_nvdec
from source_code.options import TF32, PipelineConfig
from source_code.results import NO_ACCURACY, StatsSink, accuracy_cached, warmup_batches
from source_code.runner import run_queued, run_sync
from source_code.scenes import CLASS_NAMES
from source_code.sources import Muxer, VideoSource
from source_code.stages import Display, Infer, Postprocess, Preprocess, Track, stage_cuda_ms

__all__ = ["PipelineConfig", "PipelineError", "run_pipeline"]


def _detector(cfg: Any, device, input_hw, n_streams: int = 1, frames: list | None = None):
    """Load the detector and build its inference backend: (model info for the results, backend)."""
    from source_code import backends
    from source_code.detector import DEFAULT_WEIGHTS, count_flops, load_detector
    from source_code.flops import flops_per_frame

    try:
        model = load_detector(cfg.weights, device=device)
    except FileNotFoundError as e:
        raise PipelineError(str(e), EXIT_UNAVAILABLE) from None
    except (RuntimeError, KeyError, ValueError) as e:
        if out_of_memory_message(e, cfg):
            raise
        raise PipelineError(f"cannot load detector weights {cfg.weights or 'weights/detector.pt'}: "
                            f"{str(e).splitlines()[0]}", EXIT_UNAVAILABLE) from None
    cache = checks.cache_folder(cfg)
    flops = flops_per_frame(model, input_hw, count_flops, cache)
    model_info = {"weights": str(cfg.weights or DEFAULT_WEIGHTS),
                  "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 3),
                  "gflops_per_frame": round(flops / 1e9, 3),
                  "flops_convention": "FlopCounterMode, 2 FLOPs per multiply-accumulate, at input_hw"}
    try:
        # the sizes the run calls with (--interval, --streams, the clip's last batch), prepared
        # before the first frame: no compile or graph capture inside the timed frames
        sizes = backends.expected_batch_sizes(cfg.batch_size, interval=cfg.interval, streams=n_streams, frames=frames)
        infer_fn = backends.make_backend(model, backend=cfg.backend, precision=cfg.precision, device=device,
                                         batch_size=cfg.batch_size, channels_last=cfg.channels_last,
                                         cuda_graphs=cfg.cuda_graphs, compile=cfg.compile, input_hw=input_hw,
                                         batch_sizes=sizes, tf32=TF32[cfg.tf32], cache_dir=cache)
    except backends.BackendUnavailable as e:
        oom = out_of_memory_message(e, cfg)  # an engine build that ran out of memory
        raise PipelineError(oom or str(e), EXIT_OOM if oom else EXIT_UNAVAILABLE) from None
    return model_info, infer_fn


def _ground_truth(first_input: str, warnings: list[str]):
    """(ground truth of the first input or None, its path)."""
    from source_code.scenes import gt_path_for, read_gt

    gt_file = gt_path_for(first_input)
    if gt_file.is_file():
        try:
            return read_gt(gt_file), gt_file
        except (ValueError, KeyError, OSError) as e:
            warnings.append(f"ignoring ground truth {gt_file}: {e}")
    return None, gt_file


@contextlib.contextmanager
def _profiler_range(device):
    """cudaProfilerStart/Stop around the frames on a CUDA device, so that ``nsys profile
    --capture-range=cudaProfilerApi`` records the frames and leaves the set-up out (engine
    builds, compilation, CUDA graph capture), as TensorRT's guide advises. Without a profiler
    attached both calls do nothing."""
    if device.type != "cuda":
        yield
        return
    import torch

    try:
        torch.cuda.profiler.start()
    except Exception:  # noqa: BLE001 - a profiling marker must never stop the pipeline
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # an error on its way out is the one to report
            torch.cuda.profiler.stop()


def _open_sources(cfg: Any, out_path: Path | None, device) -> list[VideoSource]:
    """Every stream's source (first frames decoded, by OpenCV or NVDEC: ``--decode``); then the
    output video's frame size and disk are checked."""
    inputs = list(cfg.inputs) if len(cfg.inputs) > 1 else [cfg.inputs[0]] * cfg.streams
    sources: list[VideoSource] = []
    try:
        for i, p in enumerate(inputs):
            if cfg.decode == "nvdec":
                sources.append(NvdecSource(p, index=i, max_frames=cfg.frames, realtime=cfg.realtime, device=device))
            else:
                sources.append(VideoSource(p, index=i, max_frames=cfg.frames, realtime=cfg.realtime))
        first = sources[0]
        checks.check_video_target(out_path, frames=first.expected() or 10_000, width=first.width, height=first.height)
    except PipelineError:
        for s in sources:
            s.close()
        raise
    return sources


def _stages(cfg: Any, device, input_hw, infer_fn, display: Display, n_streams: int) -> list:
    wait = not cfg.queues  # one thread: each GPU stage's host range covers its own GPU work
    return [
        ("preprocess", Preprocess(device=device, input_hw=input_hw, gpu=cfg.gpu_preprocess,
                                  channels_last=cfg.channels_last, host_wait=wait, batch_size=cfg.batch_size)),
        ("infer", Infer(infer_fn, device=device, host_wait=wait)),
        ("postprocess", Postprocess(input_hw=input_hw, device=device)),
        ("track", Track(n_streams)),
        ("display", display),
    ]


def _run(muxer: Muxer, stages: list, sink: StatsSink, cfg: Any, device, warnings: list[str]) -> str:
    """Run the frames; returns the status ("ok", or "partial" when an error stopped a run that
    had already produced frames: they are kept)."""
    try:
        with _profiler_range(device):
            if cfg.queues and stages:
                run_queued(muxer, stages, sink, queue_size=cfg.queue_size, device=device)
            else:
                run_sync(muxer, stages, sink, device=device)
    except PipelineError:
        raise
    except (cv2.error, RuntimeError, ValueError, OSError, MemoryError) as e:
        if out_of_memory_message(e, cfg) or sink.frames == 0:
            raise
        warnings.append(f"stopped after {sink.frames} frames: {first_line(e)}")
        return "partial"
    return "ok"


def run_pipeline(cfg: Any, *, progress: Callable[[str], None] | None = None, rank: Any = None) -> dict:
    """Run the pipeline described by ``cfg`` (a PipelineConfig); return the results document.
    An allocation failure (loading the weights, building the backend, or in the frame loop)
    becomes a PipelineError with exit code 4 naming the fix. Under torchrun, ``rank``
    (``source_code.distributed.Rank``) hears ``start()`` just before the first frame (the ranks
    start together) and ``finished(sink, gt)`` after the last."""
    from source_code.detector import INPUT_HW

    checks.validate(cfg)
    checks.check_targets(cfg)
    out_path = checks.output_video(cfg)
    device = checks.resolve_device(cfg.device)
    if cfg.gpu_preprocess and device.type != "cuda":
        raise PipelineError("--gpu-preprocess needs a CUDA device: drop it or run with --device cuda", EXIT_UNAVAILABLE)
    if cfg.decode == "nvdec":
        require_nvdec(device)  # first, as TensorRT's import: nothing loads for a run that cannot decode
        if cfg.decode_workers or not (cfg.gpu_preprocess or cfg.decode_only):
            raise PipelineError("--decode nvdec leaves the frames on the GPU: add --gpu-preprocess, and drop "
                                "--decode-workers (decoder processes hand over host frames)", EXIT_UNAVAILABLE)
    input_hw = tuple(cfg.input_hw) if cfg.input_hw else tuple(INPUT_HW)
    warnings: list[str] = []
    sources = _open_sources(cfg, out_path, device)
    model_info, infer_fn, gt, gt_file, display, stages = None, None, None, None, None, []
    annotate.reset()  # before the decoder threads start recording
    muxer = None
    try:
        with out_of_memory_is_exit_4(cfg):
            if not cfg.decode_only:  # decode-only: the same sources and decoder threads, no stage after
                model_info, infer_fn = _detector(cfg, device, input_hw, len(sources), [s.expected() for s in sources])
                if getattr(infer_fn, "note", None):  # how the backend runs that the run must say (compile's cap)
                    warnings.append(infer_fn.note)
                gt, gt_file = _ground_truth(cfg.inputs[0], warnings)
                display = Display(osd=cfg.osd, output=out_path, fps=sources[0].fps, class_names=CLASS_NAMES)
                stages = _stages(cfg, device, input_hw, infer_fn, display, len(sources))
            if rank is not None:
                rank.start()
            total = sum((s.expected() or 0) for s in sources)
            sink = StatsSink(warmup_batches=warmup_batches(cfg.warmup, cfg.batch_size, total, warnings),
                             progress=progress)
            muxer = Muxer(sources, batch_size=cfg.batch_size, interval=cfg.interval,
                          threaded=cfg.streams > 1 or cfg.queues, queue_size=cfg.queue_size,
                          pool=decode_pool(sources, workers=cfg.decode_workers, batch_size=cfg.batch_size,
                                           queue_size=cfg.queue_size))
            try:
                status = _run(muxer, stages, sink, cfg, device, warnings)
            except (cv2.error, RuntimeError, ValueError, OSError) as e:
                if out_of_memory_message(e, cfg):
                    raise
                raise PipelineError(f"pipeline failed: {first_line(e)}", EXIT_FAILED) from None
    finally:
        if muxer is not None:
            muxer.close()
        for s in sources:
            s.close()
        if display is not None:
            short = display.close()
            if display.written and out_path is not None:
                checks.record_output(out_path)
            if short:
                warnings.append(short)
        if hasattr(infer_fn, "close"):
            infer_fn.close()
    if rank is not None:
        rank.finished(sink, gt)
    return _document(cfg, sink, sources, status, warnings, device=device, input_hw=input_hw, out_path=out_path,
                     model_info=model_info, infer_fn=infer_fn, gt=gt, gt_file=gt_file, display=display, stages=stages)


def _document(cfg: Any, sink: StatsSink, sources: list[VideoSource], status: str, warnings: list[str], *,
              device, input_hw, out_path, model_info, infer_fn, gt, gt_file, display, stages=()) -> dict:
    """The results document of a finished run (fields: ``labkit.annotate.RESULTS_FIELDS``)."""
    if sink.frames == 0:
        raise PipelineError(f"{cfg.inputs[0]} has no decodable frames (empty, damaged or truncated video)", EXIT_FAILED)
    if display is not None and display.short:
        status = "partial"  # the video asked for is short (Display.close): the run did not do all it was asked
    for s in sources:
        if s.truncated():
            status = "partial"
            warnings.append(f"{s.path}: decoding stopped at frame {s.count} of {s.declared} declared "
                            f"(damaged or truncated file){': ' + s.error if s.error else ''}; frames so far kept")
    figures = sink.figures()
    for name, ms in stage_cuda_ms(stages, skip_batches=sink.warmup_batches).items():  # stream spans beside host time (kernel-busy time: the profile)
        if name in figures["stage_detail"]:
            figures["stage_detail"][name]["cuda_ms"] = round(ms, 4)
    if figures["seconds"] is None and not sink.batch_frames:
        warnings.append("every batch was warm-up: no timing (lower --warmup)")
    elif sink.too_short_warning():  # Little's law (source_code.results.THROUGHPUT_RULE)
        warnings.append(sink.too_short_warning())
    n0 = sources[0].count
    acc = ({**NO_ACCURACY, "note": "--decode-only: nothing detected, no accuracy"} if cfg.decode_only
           else accuracy_cached(gt, sink, n0, CLASS_NAMES, gt_file=gt_file, cache_dir=checks.cache_folder(cfg)))
    if gt is not None and n0 < max(gt.keys(), default=-1) + 1 and cfg.frames is None and status == "ok":
        warnings.append(f"ground truth covers {max(gt.keys()) + 1} frames but {n0} were decoded")
    config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    return {
        "status": status,
        **figures,
        "accuracy": acc,
        "config": {**config, "device_resolved": str(device), "input_hw": list(input_hw),
                   "output": str(out_path) if out_path else None,
                   "backend_name": "none (decode only)" if cfg.decode_only else getattr(infer_fn, "name", cfg.backend),
                   "ground_truth": str(gt_file) if gt else None},
        "model": model_info,
        "output_frames": display.written if display is not None else 0,
        "warnings": warnings,
    }
