"""The pipeline half of the GPU stream design (issue 18, items 5, 11, 12; source_code/GPU_STREAMS.md).

Real short runs: a generated clip, the shipped detector weights, the pipeline's own stages
(``pipeline._stages``) and backend (``pipeline._detector``) composed by the real runners. On
CPU the same code runs with no streams; the GPU tier (``-m gpu``) runs it on CUDA:

    python -m pytest -q tests/test_gpu_streams.py          # on a GPU machine: every test runs
"""
from __future__ import annotations

import json

import pytest
import torch

from labkit import annotate
from source_code import backends, checks, pipeline, runner
from source_code.detect_video import main
from source_code.options import PipelineConfig
from source_code.scenes import CLASS_NAMES, SceneConfig, make_video
from source_code.sources import Muxer, VideoSource
from source_code.stages import STAGES, Display, GpuWork, stage_cuda_ms

HW = (96, 160)
N = 8
NCHW = (3 * HW[0] * HW[1], HW[0] * HW[1], HW[1], 1)  # contiguous strides of a float (N, 3, H, W) batch
NHWC = (3 * HW[0] * HW[1], 1, HW[1] * 3, 3)  # channels_last strides of the same shape
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    video, _ = make_video(d / "clip.mp4", seconds=N / 10, config=SceneConfig(seed=5, width=320, height=192, fps=10))
    return video


CACHE = ""  # the application's cache folder, set per test: runs pass it as --cache-dir (it reads no variable)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setitem(globals(), "CACHE", str(tmp_path_factory.getbasetemp() / "backend_cache"))


def short_run(clip, *, device="cpu", queues=False, spy=None, before=None, wrap=None, **flags):
    """Run the pipeline's stages over the clip (batch 2 unless given); returns (finished batches, stages).
    ``spy(b)`` runs as an extra stage between preprocess and infer; ``before(stages)`` before the
    run; the runner calls ``wrap(name, stage)`` instead of each stage when given."""
    cfg = PipelineConfig(inputs=(str(clip),), device=device, queues=queues, input_hw=HW, cache_dir=CACHE,
                         **{"batch_size": 2, **flags})
    dev = checks.resolve_device(device)
    _, backend = pipeline._detector(cfg, dev, HW, 1)
    stages = pipeline._stages(cfg, dev, HW, backend, Display(osd=False, output=None, fps=10, class_names=CLASS_NAMES), 1)
    if spy is not None:
        stages.insert(1, ("spy", lambda b: (spy(b), b)[1]))
    if before is not None:
        before(stages)
    src = VideoSource(str(clip), index=0, max_frames=N)
    muxer = Muxer([src], batch_size=cfg.batch_size, interval=cfg.interval, threaded=queues, queue_size=2)
    called = [(name, wrap(name, fn)) for name, fn in stages] if wrap is not None else stages
    done: list = []
    try:
        if queues:
            runner.run_queued(muxer, called, done.append, queue_size=2, device=dev)
        else:
            runner.run_sync(muxer, called, done.append, device=dev)
    finally:
        muxer.close()
        src.close()
    return done, stages


# --------------------------------------------------------------------------- ordering


@pytest.mark.parametrize("queues", [False, True], ids=["sync", "queued"])
def test_runner_calls_the_stages_in_order_and_the_batch_carries_the_events(clip, queues):
    calls: list = []

    def wrap(name, fn):
        return lambda b: (calls.append((b.index, name, b.ready, b.done)), fn(b))[1]

    done, stages = short_run(clip, queues=queues, wrap=wrap)
    assert [b.index for b in done] == list(range(N // 2))
    for i in range(N // 2):
        assert [n for j, n, _, _ in calls if j == i] == list(STAGES[1:])
    # on CPU there are no streams: no event is made, carried or waited on
    assert all(r is None and d is None for _, _, r, d in calls)
    assert all(b.ready is None and b.done is None for b in done)
    assert all(fn.work.stream is None for _, fn in stages if hasattr(fn, "work"))
    assert stage_cuda_ms(stages) == {}
    assert all(len(b.dets) == 2 and b.tracks for b in done)  # the stages did their work


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("queues", [False, True], ids=["sync", "queued"])
def test_gpu_stages_hand_events_downstream(clip, device, queues):
    seen: list = []
    done, stages = short_run(clip, device=device, queues=queues, gpu_preprocess=device == "cuda",
                             spy=lambda b: seen.append(b.ready))
    cuda = device == "cuda"
    assert len(done) == N // 2
    assert all(isinstance(ev, torch.cuda.Event) if cuda else ev is None for ev in seen)
    assert all((b.done is not None) == cuda for b in done)
    times = stage_cuda_ms(stages)
    if cuda:
        assert set(times) == {"preprocess", "infer", "postprocess"} and all(ms > 0 for ms in times.values())
        # each GPU stage works on a stream of its own, and infer on the backend's
        streams = [fn.work.stream for name, fn in stages if isinstance(getattr(fn, "work", None), GpuWork)]
        assert len({s.cuda_stream for s in streams}) == 3 and torch.cuda.default_stream() not in streams
        assert dict(stages)["infer"].work.stream is dict(stages)["infer"].backend.stream
    else:
        assert times == {}


# --------------------------------------------------------------------------- layouts through the pipeline


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gpu_preprocess", [False, True], ids=["cpu_pre", "torch_pre"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_detector_receives_the_layout_the_flags_ask_for(clip, device, gpu_preprocess, channels_last):
    """Per flag combination, a real run: what preprocessing handed the backend, and what the network
    saw. ``preprocess_frames_torch`` (the --gpu-preprocess path, run on CPU tensors here) gives
    NHWC exactly when --channels-last asks for it; the network always runs the backend's layout."""
    handed: list = []
    net: list = []

    def before(stages):
        dict(stages)["infer"].backend.model.register_forward_pre_hook(lambda _m, a: net.append(a[0].stride()))

    done, _ = short_run(clip, device=device, gpu_preprocess=gpu_preprocess, channels_last=channels_last,
                        spy=lambda b: handed.append((b.tensor.stride(), b.tensor.dtype, b.tensor.device.type)),
                        before=before)
    assert len(done) == len(handed) == len(net) == N // 2
    assert set(handed) == {(NHWC if gpu_preprocess and channels_last else NCHW, torch.float32, device)}
    assert set(net) == {NHWC if channels_last else NCHW}


# --------------------------------------------------------------------------- results, TF32, batch sizes


def run_main(clip, tmp_path, *flags):
    res = tmp_path / "r.json"
    rc = main(["--input", str(clip), "--input-hw", "96x160", "--warmup", "2", "--no-osd", *flags, "--results", str(res),
               "--cache-dir", CACHE])
    return rc, json.loads(res.read_text())


def test_tf32_is_recorded_and_applied(clip, tmp_path):
    from source_code.backends import tf32_state

    precisions = lambda: (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision)  # noqa: E731
    before, state = precisions(), tf32_state()
    try:
        rc, doc = run_main(clip, tmp_path, "--device", "cpu")
        assert rc == 0 and doc["config"]["tf32"] is None
        assert tf32_state() == state  # unset: untouched
        rc, doc = run_main(clip, tmp_path, "--device", "cpu", "--tf32", "off")
        assert rc == 0 and doc["config"]["tf32"] == "off"
        assert tf32_state() == (False, False)
        rc, doc = run_main(clip, tmp_path, "--device", "cpu", "--tf32", "on")
        assert doc["config"]["tf32"] == "on" and tf32_state() == (True, True)
    finally:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = before


@pytest.mark.parametrize("flags", [["--batch-size", "4", "--interval", "3"],
                                   ["--batch-size", "3", "--interval", "2", "--streams", "2", "--queues"]])
def test_backend_is_prepared_for_the_batch_sizes_the_run_uses(clip, tmp_path, monkeypatch, flags):
    """make_backend is told the detector batch sizes that --interval and --streams produce, and
    every batch of the run but the clip's last is one of them (nothing padded, nothing unprepared)."""
    asked: list = []
    real = backends.make_backend
    monkeypatch.setattr(backends, "make_backend", lambda *a, **kw: (asked.append(kw["batch_sizes"]), real(*a, **kw))[1])
    rc, doc = run_main(clip, tmp_path, "--device", "cpu", "--warmup", "0", *flags)
    assert rc == 0
    b, k = int(flags[1]), int(flags[3])
    s = int(flags[flags.index("--streams") + 1]) if "--streams" in flags else 1
    assert asked == [backends.expected_batch_sizes(b, interval=k, streams=s)]
    infer = sorted((r.batch, r.items) for r in annotate.records() if r.name == "infer")
    assert {n for _, n in infer[:-1]} <= set(asked[0])
    assert doc["stage_detail"]["infer"]["items"] == s * -(-N // k)


def test_cpu_results_have_no_cuda_ms(clip, tmp_path):
    rc, doc = run_main(clip, tmp_path, "--device", "cpu")
    assert rc == 0 and all(v["cuda_ms"] is None for v in doc["stage_detail"].values())


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [[], ["--queues"]], ids=["sync", "queued"])
def test_gpu_run_times_stages_by_events_without_device_syncs(clip, tmp_path, monkeypatch, mode):
    """On CUDA: no torch.cuda.synchronize in the frame loop; cuda_ms beside the host times for the
    three stages that launch GPU work, and for no other."""
    syncs: list = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **kw: (syncs.append(a), real(*a, **kw))[1])
    rc, doc = run_main(clip, tmp_path, "--device", "cuda:0", "--gpu-preprocess", "--batch-size", "2", *mode)
    assert rc == 0 and doc["status"] == "ok"
    assert syncs == []
    detail = doc["stage_detail"]
    assert {k for k, v in detail.items() if v.get("cuda_ms") is not None} == {"preprocess", "infer", "postprocess"}
    assert all(detail[k]["cuda_ms"] > 0 for k in ("preprocess", "infer", "postprocess"))
    assert doc["config"]["device_resolved"] == "cuda:0"


@pytest.mark.gpu
def test_stage_threads_run_on_the_runs_device(clip):
    """``cuda:N``: every stage thread's current device is N, and its stream is on N (the last GPU here)."""
    n = torch.cuda.device_count() - 1
    if n == 0:
        pytest.skip("one GPU: cuda:0 is every thread's device anyway; needs two to show anything")
    current: list = []
    done, stages = short_run(clip, device=f"cuda:{n}", queues=True, gpu_preprocess=True,
                             spy=lambda b: current.append(torch.cuda.current_device()))
    assert current and set(current) == {n}
    assert {fn.work.stream.device.index for _, fn in stages if isinstance(getattr(fn, "work", None), GpuWork)} == {n}
    assert all(b.done is not None for b in done)


def test_use_device_leaves_cpu_runs_alone():
    assert runner.use_device(None) is None
    assert runner.use_device(torch.device("cpu")) == torch.device("cpu")  # no CUDA call: there may be no GPU


@pytest.mark.gpu
def test_use_device_resolves_a_bare_cuda_in_the_calling_thread():
    assert runner.use_device(torch.device("cuda")) == torch.device("cuda", torch.cuda.current_device())
