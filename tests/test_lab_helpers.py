"""notebooks/lab.py, the lab's helper module: settings, command lines, steps, ledger look-ups."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import labkit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
import lab  # noqa: E402

from labkit import Ledger  # noqa: E402

ENV = {"cpu": "Test CPU", "host": "test"}  # a fixed machine, so no fingerprint is computed


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    """An empty ledger in a temp folder, and no reference results."""
    monkeypatch.setattr(lab, "LEDGER", tmp_path / "ledger.jsonl")
    monkeypatch.setattr(lab, "REFERENCE", tmp_path / "reference" / "h100")
    return Ledger(tmp_path / "ledger.jsonl")


def add(led: Ledger, step: str, fps: float, **more) -> None:
    config = more.pop("config", {})
    led.append({"step": step, "status": "ok", "env": more.pop("env", ENV), "config": config,
                "metrics": {"fps": fps, "latency_p50_ms": 1000 / fps, "repeats": 1, **more},
                "paths": {"profile": more.pop("profile", None)}})


# ----------------------------------------------------------------------------- settings
@pytest.mark.parametrize("key", sorted(lab.SETTINGS))
def test_settings_are_consistent(key):
    s = lab.SETTINGS[key]
    assert s.frames > s.warmup >= 1 and s.repeats >= 1
    assert s.batch not in s.batch_sizes and 1 not in s.batch_sizes
    assert s.interval not in s.intervals and 1 not in s.intervals
    assert 1 not in s.streams
    if s.input_hw:
        h, w = (int(v) for v in s.input_hw.split("x"))
        assert h % 32 == 0 and w % 32 == 0


def test_settings_per_mode():
    assert lab.settings("small") is lab.SETTINGS["small"]
    assert lab.settings("small", gpu=True) is lab.SETTINGS["small"]
    assert lab.settings("full", gpu=False) is lab.SETTINGS["full-cpu"]
    assert lab.settings("full", gpu=True) is lab.SETTINGS["full-gpu"]


# ----------------------------------------------------------------------------- command lines
def test_app_command_turns_flags_into_options():
    cmd = lab.app_command(video=Path("clip.mp4"), mode="small", batch_size=4, queues=True, osd=False,
                          compile=False, precision=None, backend="onnxruntime")
    s = lab.settings("small")
    assert cmd[:4] == [sys.executable, str(lab.APP), "--input", "clip.mp4"]
    rest = cmd[4:]
    assert rest == ["--frames", str(s.frames), "--input-hw", s.input_hw, "--batch-size", "4", "--queues",
                    "--no-osd", "--backend", "onnxruntime"]
    assert "--warmup" not in cmd and "--results" not in cmd  # labkit.bench adds those


def test_app_command_keeps_an_explicit_input_size():
    cmd = lab.app_command(video=Path("clip.mp4"), mode="small", input_hw="96x160")
    assert cmd.count("--input-hw") == 1 and cmd[cmd.index("--input-hw") + 1] == "96x160"


# ----------------------------------------------------------------------------- steps
@pytest.mark.parametrize("gpu", [False, True])
def test_steps_build_on_each_other(gpu):
    s = lab.settings("full", gpu=gpu)
    steps = lab.steps("full", gpu=gpu)
    names = list(steps)
    assert names[:3] == ["baseline", "queues", "no_osd"] and steps["baseline"] == {}
    batched = steps[f"batch{s.batch}"]
    assert batched == {"queues": True, "osd": False, "batch_size": s.batch}
    for name in names[names.index("no_osd"):]:
        assert steps[name]["queues"] is True and steps[name]["osd"] is False, name
    for name in ("channels_last", "compile", "fp16", "tensorrt_fp16", "ort_int8", "tensorrt_int8"):
        assert steps[name]["batch_size"] == s.batch, name
    assert steps["ort_int8"] == {**batched, "device": "cpu", "backend": "onnxruntime", "precision": "int8"}
    on_gpu = steps["gpu_preprocess"]
    assert on_gpu == {**batched, "device": "cuda", "gpu_preprocess": True}
    for name in ("fp16", "fp16_cuda_graphs", "tensorrt_fp16", "tensorrt_int8"):
        assert {**steps[name], **on_gpu} == steps[name], name  # every GPU step keeps GPU preprocessing
    assert lab.unavailable(**steps["gpu_preprocess"]) == ("" if gpu and lab.gpu_available() else
                                                        "it needs a CUDA GPU and this machine has none")


def test_only_tensorrt_steps_are_profiled_from_the_first_frame():
    steps = lab.steps("full", gpu=True)
    assert lab.capture_range(steps["tensorrt_fp16"]) == lab.capture_range(steps["tensorrt_int8"]) == "cudaProfilerApi"
    for name in ("baseline", "compile", "fp16", "fp16_cuda_graphs", "ort_int8"):
        assert lab.capture_range(steps[name]) is None, name  # set-up such as torch_compile stays visible
    assert lab.capture_range({"backend": "tensorrt", "device": "cpu"}) is None  # no CUDA: no cudaProfilerStart


def test_flags_returns_a_copy():
    f = lab.flags("no_osd", mode="small")
    f["batch_size"] = 99
    assert "batch_size" not in lab.flags("no_osd", mode="small")


# ----------------------------------------------------------------------------- availability
ROWS = (
    {"backend": "torch", "precision": "fp32", "device": "cpu", "variant": "", "available": True, "reason": ""},
    {"backend": "torch", "precision": "fp32", "device": "cpu", "variant": "channels_last", "available": True,
     "reason": ""},
    {"backend": "torch", "precision": "fp32", "device": "cpu", "variant": "compile", "available": False,
     "reason": "torch.compile on CPU needs a C++ compiler: apt-get install g++"},
    {"backend": "onnxruntime", "precision": "int8", "device": "cpu", "variant": "", "available": True, "reason": ""},
)


@pytest.fixture
def cpu_only(monkeypatch):
    monkeypatch.setattr(lab, "gpu_available", lambda: False)
    monkeypatch.setattr(lab, "_backends", lambda: ROWS)


@pytest.mark.parametrize("flags, reason", [
    ({}, ""),
    ({"channels_last": True, "batch_size": 4}, ""),
    ({"backend": "onnxruntime", "precision": "int8", "device": "cpu"}, ""),
    ({"device": "cuda", "precision": "fp16"}, "needs a CUDA GPU"),
    ({"compile": True}, "needs a C++ compiler"),
    ({"gpu_preprocess": True}, "--gpu-preprocess needs a CUDA GPU"),
    ({"backend": "tensorrt", "precision": "int8"}, "tensorrt int8 is not offered on cpu"),
])
def test_unavailable_says_why(cpu_only, flags, reason):
    got = lab.unavailable(**flags)
    assert (reason in got) if reason else got == ""


def test_run_step_skips_what_cannot_run_without_running_it(cpu_only, ledger):
    r = lab.run_step("fp16", device="cuda", precision="fp16")
    assert isinstance(r, lab.Skipped) and not r.ok and math.isnan(r.fps) and r.profile is None
    assert str(r) == "Step 'fp16' was not run here: it needs a CUDA GPU and this machine has none."
    assert r._repr_markdown_().startswith("**Not run here.**")
    assert not ledger.path.exists()
    assert lab.report(r) is None
    assert str(lab.kernels(r)).startswith("No profile")
    assert isinstance(lab.sweep({"device": "cuda"}, "batch_size", [2], step="b{value}"), lab.Skipped)


def test_device_of(cpu_only):
    assert lab.device_of({}) == "cpu"
    assert lab.device_of({"device": "cuda"}) == "cuda"


# ----------------------------------------------------------------------------- small analyses
def test_window_covers_count_periods_after_the_warmup():
    infer = [("infer", 100 * i + 10, 100 * i + 60, i) for i in range(6)]
    rep = _nvtx(infer + [("decode", 0, 10, 0)])
    assert lab.window(rep, warmup=2, count=3) == (160, 460)
    assert lab.window(rep, count=1) == (-40, 60)
    one = _nvtx([("infer", 10, 60, 0)])
    assert lab.window(one) == (10, 60)
    with pytest.raises(ValueError, match="no 'infer' ranges"):
        lab.window(rep, warmup=9)


def test_compare_gives_ratio_and_noise():
    old = SimpleNamespace(step="a", fps=10.0, spread=0.0, ok=True, metrics={"repeats": 1})
    new = SimpleNamespace(step="b", fps=25.0, spread=0.04, ok=True, metrics={"repeats": 3})
    text = lab.compare(new, old)
    assert text == ("'b': 25.00 frames/s against 10.00 for 'a': 2.50x (150% faster); "
                    "run-to-run spread of 'b' 4% over 3 runs.")
    assert "slower" in lab.compare(old, new) and "no spread" in lab.compare(old, new)
    same = SimpleNamespace(step="c", fps=10.02, spread=0.0, ok=True, metrics={"repeats": 1})
    assert "1.00x (the same)" in lab.compare(same, old)
    assert lab.compare(lab.Skipped("c", "no GPU"), old).startswith("No comparison: Step 'c' was not run")


def test_best_picks_the_highest_metric():
    f = pd.DataFrame({"batch_size": [1, 2, 4], "fps": [3.0, 5.0, float("nan")]})
    assert lab.best(f, "batch_size") == 2
    with pytest.raises(ValueError):
        lab.best(f.iloc[2:], "batch_size")


def test_warmup_batches_counts_batches_not_frames(ledger):
    s = lab.settings()
    assert lab.warmup_batches(SimpleNamespace(config={"batch_size": 4})) == math.ceil(s.warmup / 4)
    assert lab.warmup_batches(SimpleNamespace(config={})) == s.warmup
    add(ledger, "b2", 5.0, config={"batch_size": 2})
    assert lab.warmup_batches("b2") == math.ceil(s.warmup / 2)
    assert lab.warmup_batches("never_ran") == s.warmup


# ----------------------------------------------------------------------------- ledger and tables
def test_ledger_speedup_and_fastest(ledger):
    add(ledger, "baseline", 2.0, map50=0.8)
    add(ledger, "queues", 3.0, map50=0.8)
    add(ledger, "int8", 8.0, map50=0.5)
    add(ledger, "queues", 4.0, map50=0.8)  # a re-run: the latest row counts
    rows = lab.ledger(["queues", "baseline"])
    assert list(rows["step"]) == ["queues", "baseline"] and list(rows["fps"]) == [4.0, 2.0]
    table = lab.speedup()
    assert table.speedup.iloc[:, 0].to_dict() == {"baseline": 1.0, "queues": 2.0, "int8": 4.0}
    assert list(lab.speedup(["baseline", "int8"]).speedup.index) == ["baseline", "int8"]
    assert lab.fastest(["baseline", "queues", "int8"]) == "int8"
    assert lab.fastest(["baseline", "queues", "int8"], accuracy_floor=0.7) == "queues"
    with pytest.raises(ValueError, match="run those steps first"):
        lab.fastest(["nothing"])
    assert "'queues': 4.00 frames/s against 2.00 for 'baseline': 2.00x" in lab.compare("queues", "baseline")
    assert "no row" in lab.compare("never_ran", "baseline")


def test_report_of_a_step_without_profile_says_so(ledger):
    add(ledger, "baseline", 2.0)
    with pytest.raises(ValueError, match="no profiled 'baseline' row"):
        lab.report("baseline")


def test_reference_absent_then_present(ledger, tmp_path):
    note = lab.reference_table()
    assert isinstance(note, lab.Note) and note.startswith("No reference results yet")
    assert lab.reference_rows(["baseline"]) == note
    assert "reference_configurations" not in note
    assert lab.reference_configurations().startswith("No reference configurations")
    configs = Ledger(lab.REFERENCE / "pipeline_table.jsonl")
    add(configs, "baseline", 50.0, env={"gpu": "NVIDIA H100"})
    add(configs, "all_s1", 500.0, env={"gpu": "NVIDIA H100"})
    assert lab.reference_configurations().speedup.loc["all_s1", "NVIDIA H100"] == 10.0
    assert "`lab.reference_configurations()`" in lab.reference_table()
    add(ledger, "baseline", 2.0)
    add(ledger, "queues", 3.0)
    ref = Ledger(lab.REFERENCE / "ledger.jsonl")
    add(ref, "baseline", 100.0, env={"gpu": "NVIDIA H100"})
    add(ref, "fp16", 400.0, env={"gpu": "NVIDIA H100"})
    assert "all_s1" not in lab.reference_table().speedup.index  # the configurations stay apart
    assert lab.reference_table().speedup.loc["fp16", "NVIDIA H100"] == 4.0
    assert list(lab.reference_rows(["fp16"])["fps"]) == [400.0]
    both = lab.speedup(reference=True)
    assert both.machines == ["CPU (Test CPU)", "NVIDIA H100"]
    assert lab.speedup().machines == ["CPU (Test CPU)"]
    assert "see the reference results below" in str(lab.Skipped("fp16", "no GPU"))


def test_table_columns_keeps_what_exists():
    f = pd.DataFrame({"step": ["a"], "fps": [1.0], "mota": [0.5], "other": [0], "interval": [2]})
    assert list(lab.table_columns(f, "interval")) == ["step", "interval", "fps", "mota"]
    swept = pd.DataFrame({"step": ["b2", "b64"], "fps": [3.0, math.nan], "error": [None, "out of memory"]})
    assert list(lab.table_columns(swept)) == ["step", "fps", "error"]
    assert list(lab.table_columns(swept.iloc[:1])) == ["step", "fps"]


# ----------------------------------------------------------------------------- video and figures
def test_sample_video_is_made_once_with_ground_truth(tmp_path):
    video = lab.sample_video("small", folder=tmp_path)
    s = lab.settings("small")
    info = lab.video_info(video)
    assert video.name == "sample_small.mp4" and (tmp_path / "sample_small.gt.csv").exists()
    assert (info["width"], info["height"]) == s.video_size
    assert info["frames"] == round(s.video_seconds * info["fps"])
    mtime = video.stat().st_mtime_ns
    assert lab.sample_video("small", folder=tmp_path) == video and video.stat().st_mtime_ns == mtime
    gt = lab.ground_truth(video)
    assert gt and all(a.shape[1] == 6 for a in gt.values())
    fig = lab.show_frame(video, min(gt))
    assert len(fig.axes[0].patches) == len(gt[min(gt)])
    with pytest.raises(ValueError, match="has no frame"):
        lab.show_frame(video, 10_000)


def test_plot_tradeoff_labels_each_point():
    f = pd.DataFrame({"fps": [1.0, 2.0], "latency_p50_ms": [10.0, 30.0], "batch_size": [1, 4]})
    fig = lab.plot_tradeoff(f, label="batch_size")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["batch_size 1", "batch_size 4"]
    assert fig.axes[0].get_xlabel() == "throughput (frames/s)"


def test_note_renders_as_markdown():
    n = lab.Note("**bold**")
    assert n == "**bold**" and n._repr_markdown_() == "**bold**"


# ----------------------------------------------------------------------------- overlap
def _nvtx(rows):
    """A hand-built Report.nvtx-like frame: (name, start, end, payload) push/pop ranges."""
    df = pd.DataFrame(rows, columns=["name", "start_ns", "end_ns", "payload"])
    return SimpleNamespace(nvtx=df.assign(kind="push_pop", payload=df["payload"].astype("Int64")))


def test_overlap_of_sequential_stages_is_none():
    rep = _nvtx([("decode", 0, 10, 0), ("infer", 10, 40, 0), ("track", 40, 50, 0), ("decode", 60, 70, 1)])
    o = lab.overlap(rep)
    assert o == {"busy_ms": 60e-6, "stage_ms": 60e-6, "concurrency": 1.0, "overlap_frac": 0.0}


def test_overlap_counts_time_with_two_stages_running():
    # infer 0-100 on one thread; decode 20-40 and 60-80 on another; 'items' and non-stage ranges ignored
    rep = _nvtx([("infer", 0, 100, 1), ("decode", 20, 40, 2), ("decode", 60, 80, 2),
                 ("torch_compile", 0, 500, pd.NA), ("decode", 500, 900, 0)])
    o = lab.overlap(rep, warmup=1)
    assert o["busy_ms"] == pytest.approx(100e-6) and o["stage_ms"] == pytest.approx(140e-6)
    assert o["concurrency"] == pytest.approx(1.4) and o["overlap_frac"] == pytest.approx(0.4)
    assert math.isnan(lab.overlap(_nvtx([("other", 0, 1, 0)]))["concurrency"])


def test_both_machines_needs_the_reference(ledger):
    add(ledger, "baseline", 2.0)
    assert lab.both_machines().startswith("No reference results yet")


# ----------------------------------------------------------------------------- real reports
FIXTURES = ROOT / "tests" / "fixtures"


def test_reading_a_real_cpu_report():
    run = SimpleNamespace(profile=FIXTURES / "annotated.nsys2022.4.sqlite")
    rep = lab.report(run)
    r = lab.ranges(run, ["infer", "decode", "nonexistent"])
    assert sorted(r["name"]) == ["decode", "infer"] and list(r["instances"]) == [6, 6]
    assert lab.kernels(run) == "No GPU kernels in this profile: the run used the CPU only."
    o = lab.overlap(rep)
    assert o["concurrency"] > 1.0 and 0 < o["overlap_frac"] < 1  # decoder and worker threads overlap
    start, end = lab.window(rep, warmup=1, count=2)
    infer = rep.nvtx[rep.nvtx["name"] == "infer"]
    assert infer["start_ns"].min() < start < end < infer["end_ns"].max()


def test_reading_a_real_gpu_report():
    run = SimpleNamespace(profile=FIXTURES / "gputest.nsys2025.3.sqlite")
    k = lab.kernels(run, n=3)
    assert len(k) <= 3 and k["total_ns"].is_monotonic_decreasing and (k["instances"] > 0).all()


def test_copies_of_a_real_gpu_pipeline_after_warmup():
    """The H100 export of the queued pipeline with --gpu-preprocess (640x360 clip, batch 4, 4
    warm-up frames, 6 batches): the weights' pageable uploads at start-up are left out, and the
    warm-up batch too, although the queued preprocess thread uploaded it before infer started."""
    run = SimpleNamespace(profile=FIXTURES / "pipeline.nsys2025.3.sqlite", config={"batch_size": 4})
    rep = lab.report(run)
    m = rep.memcpy
    assert (m["pageable"] & (m["kind"] == "Host-to-Device")).sum() > 100  # the model upload
    c = lab.copies(run, mode="small").set_index(["kind", "host"])
    assert list(c.index) == [("Host-to-Device", "Pinned"), ("Device-to-Host", "Pageable")]
    up = c.loc[("Host-to-Device", "Pinned")]
    assert up["copies"] == 5 and up["kb_per_copy"] == pytest.approx(4 * 360 * 640 * 3 / 1e3)  # 4 uint8 frames
    assert c.loc[("Device-to-Host", "Pageable"), "copies"] == 5  # detections back to the host
    every = labkit.copy_table(rep).set_index(["kind", "host"])
    assert every.loc[("Host-to-Device", "Pinned"), "copies"] == 6
    assert every["ms"].sum() == pytest.approx(m.loc[m["bytes"].isin([2764800, 9600]), "duration_ns"].sum() / 1e6)
    cpu = SimpleNamespace(profile=FIXTURES / "annotated.nsys2022.4.sqlite", config={"batch_size": 1})
    assert lab.copies(cpu).startswith("No host-device copies")
    assert list(labkit.copy_table(lab.report(cpu)).columns) == ["kind", "host", "copies", "mb", "kb_per_copy", "ms"]
    assert lab.copies(lab.Skipped("gpu_preprocess", "no GPU")).startswith("No profile")


def test_app_env_sets_passive_openmp_and_the_reports_folder():
    env = lab.app_env()
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "LABKIT_REPORTS": str(lab.REPORTS)}


# ----------------------------------------------------------------------------- failed steps
def test_a_failing_step_is_reported_and_the_notebook_goes_on(ledger, tmp_path, monkeypatch):
    """A real run that fails (the application rejects --batch-size 0): a Failed, no ledger row;
    under LABKIT_STRICT the error is raised. run_lab finds the failure in a cell's output."""
    from labkit.bench import BenchError

    monkeypatch.setattr(lab, "RESULTS", tmp_path / "results")
    monkeypatch.delenv("LABKIT_STRICT", raising=False)
    r = lab.run_step("broken", profile=False, mode="small", batch_size=0, device="cpu")
    assert isinstance(r, lab.Failed) and not r.ok and r.profile is None
    assert r.reason == "detect_video: error: --batch-size must be at least 1 (got 0)"
    assert str(r) == "Step 'broken' failed here: detect_video: error: --batch-size must be at least 1 (got 0)"
    assert lab.compare(r, "baseline").startswith("No comparison: Step 'broken' failed here")
    assert len(lab.ledger()) == 0
    with pytest.raises(ValueError, match="Step 'broken' failed here: .* no profile to analyse"):
        lab.report(r)  # a cell that needs the profile stops, naming the failed step
    assert lab.kernels(r).startswith("No profile: Step 'broken' failed here")
    assert lab.copies(r).startswith("No profile") and lab.ranges(r, ["infer"]).startswith("No profile")
    monkeypatch.setenv("LABKIT_STRICT", "1")
    with pytest.raises(BenchError, match="exited with status 2"):
        lab.run_step("broken", profile=False, mode="small", batch_size=0, device="cpu")

    sys.path.insert(0, str(ROOT / "scripts"))
    from run_lab import failures

    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "text": [str(r) + "\n"]}]},
                    {"cell_type": "code", "outputs": [{"output_type": "execute_result",
                                                       "data": {"text/markdown": r._repr_markdown_()}}]},
                    {"cell_type": "markdown"}]}
    assert failures(nb) == {"broken": "detect_video: error: --batch-size must be at least 1 (got 0)"}
    assert failures({"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "text": "ok"}]}]}) == {}
    note = lab.compare(r, "baseline")  # the plain-text repr of a Note quotes it
    plain = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "execute_result",
                                                          "data": {"text/plain": repr(str(note))}}]}]}
    assert failures(plain) == {"broken": "detect_video: error: --batch-size must be at least 1 (got 0)"}
