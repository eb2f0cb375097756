"""labbook, the lab's helper package: settings, command lines, steps, outcomes, ledger look-ups."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import labbook as lab
import labkit
import labbook.app
import labbook.display
import labbook.outcome
import labbook.reference
import labbook.runs
import labbook.settings
import labbook.video
from labkit import Ledger
from faultkit import mount  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[1]

ENV = {"cpu": "Test CPU", "host": "test"}  # a fixed machine, so no fingerprint is computed


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    """An empty ledger in a temp folder, and no reference results (in every module that reads them)."""
    for mod in (labbook.runs, labbook.reference, labbook.display):
        monkeypatch.setattr(mod, "LEDGER", tmp_path / "ledger.jsonl")
    for mod in (labbook.reference, labbook.outcome):
        monkeypatch.setattr(mod, "REFERENCE", tmp_path / "reference" / "h100")
    monkeypatch.setattr(labbook.runs, "RESULTS", tmp_path / "results")
    return Ledger(tmp_path / "ledger.jsonl")


def add(led: Ledger, step: str, fps: float, **more) -> None:
    config = more.pop("config", {})
    labels = {k: more.pop(k) for k in ("kind", "builds_on") if k in more}
    led.append({**labels, "step": step, "status": "ok", "env": more.pop("env", ENV), "config": config,
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
    # held (labbook.record_plan.held_frames): the batch, the decoder's queue and its frame, two stage queues of
    # 4 batches and the batch in each hand, a batch in each stage past infer: 4 + 17 + 40 + 12 = 73
    held = 4 + (16 + 1) + 4 * 2 * (4 + 1) + 3 * 4
    frames = held * 10 + held + s.warmup  # ten times as many timed as held, plus warm-up and what is held
    assert frames == 811 < s.frames  # small mode sizes a step by its queues
    assert rest == ["--frames", str(frames), "--warmup", str(s.warmup),
                    "--cache-dir", str(labkit.env.cache_dir() / "backends"), "--input-hw", s.input_hw,
                    "--batch-size", "4", "--queues", "--no-osd", "--backend", "onnxruntime"]
    assert "--results" not in cmd and "--output" not in cmd  # bench adds --results; no OSD: no video


def test_app_command_keeps_an_explicit_input_size_and_writes_its_video_under_reports():
    cmd = lab.app_command(video=Path("clip.mp4"), mode="small", input_hw="96x160")
    assert cmd.count("--input-hw") == 1 and cmd[cmd.index("--input-hw") + 1] == "96x160"
    assert cmd[cmd.index("--output") + 1] == str(lab.REPORTS / "videos" / "clip.tracked.mp4")


def test_app_options_are_what_bench_records():
    opts = lab.app_options({"queues": True}, video=Path("clip.mp4"), mode="small")
    s = lab.settings("small")
    assert opts == {"inputs": ["clip.mp4"], "frames": 600, "warmup": s.warmup, "input_hw": s.input_hw,  # few held
                    "cache_dir": str(labkit.env.cache_dir() / "backends"),
                    "output": str(lab.VIDEOS / "clip.tracked.mp4"), "queues": True}
    assert lab.app_argv(opts) == lab.app_command(video=Path("clip.mp4"), mode="small", queues=True)


# ----------------------------------------------------------------------------- steps
def _flags_of(mode, gpu):
    return {name: dict(st.flags) for name, st in lab.catalogue(mode, gpu=gpu).items()}


@pytest.mark.parametrize("gpu", [False, True])
def test_steps_build_on_each_other(gpu):
    s = lab.settings("full", gpu=gpu)
    steps = _flags_of("full", gpu)
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


@pytest.mark.parametrize("gpu", [False, True])
def test_each_step_keeps_the_flags_of_the_step_it_builds_on(gpu):
    """Steps are data: every builds_on names an earlier step whose flags it keeps (one change
    or more on top), and only the baseline builds on nothing."""
    cat = lab.catalogue("full", gpu=gpu)
    names = list(cat)
    for name, st in cat.items():
        assert st.kind in ("cumulative", "alternative", "sweep"), name
        if name == "baseline":
            assert st.builds_on is None and st.kind == "cumulative"
            continue
        base = cat[st.builds_on]
        assert names.index(st.builds_on) < names.index(name), name
        kept = {k: v for k, v in base.flags.items() if k not in ("batch_size", "precision")}
        assert {**st.flags, **kept} == dict(st.flags) and st.flags != base.flags, name
    assert [n for n, st in cat.items() if st.kind == "cumulative"] == ["baseline", "queues", "no_osd",
                                                                       f"batch{lab.settings('full', gpu=gpu).batch}"]
    with pytest.raises(TypeError):
        cat["queues"].flags["osd"] = False  # read-only: lab.flags() hands out copies
    with pytest.raises(ValueError, match="kind 'bonus'"):
        lab.Step("x", {}, None, "bonus")


def test_only_tensorrt_steps_are_profiled_from_the_first_frame():
    steps = _flags_of("full", True)
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
    monkeypatch.setattr(labbook.app, "gpu_available", lambda: False)
    monkeypatch.setattr(labbook.app, "_backends", lambda: ROWS)


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
    r = lab.run_step("fp16", **lab.flags("fp16"))
    assert isinstance(r, lab.Outcome) and r.status == "skipped" and not r.ok and r.profile is None
    assert (r.kind, r.builds_on) == ("alternative", "gpu_preprocess")
    assert str(r) == "Step 'fp16' was not run here: it needs a CUDA GPU and this machine has none."
    assert r._repr_markdown_().startswith("**Not run here.**")
    row = Ledger(ledger.path).rows()[-1]  # a skipped step is a ledger row with its status and reason
    assert {k: row[k] for k in ("step", "status", "reason", "kind", "builds_on")} == {
        "step": "fp16", "status": "skipped", "reason": "it needs a CUDA GPU and this machine has none",
        "kind": "alternative", "builds_on": "gpu_preprocess"}
    assert lab.report(r) is None and lab.report("fp16") is None
    assert lab.kernels(r).data.startswith("No profile")
    assert lab.compare("fp16", "baseline").data.startswith("No comparison: step 'fp16' was not run here: it needs")
    lab.run_step("fp16", predicted_speedup=1.18, finding="infer is 85% of the frame", **lab.flags("fp16"))
    row = Ledger(ledger.path).rows()[-1]  # the prediction a step was run under rides on its row
    assert (row["predicted_speedup"], row["finding"]) == (1.18, "infer is 85% of the frame")
    swept = lab.sweep("gpu_preprocess", "batch_size", [2], step="b{value}")
    assert swept.status == "skipped" and Ledger(ledger.path).rows()[-1]["step"] == "b2"
    assert lab.speedup is not None and "fp16" not in set(lab.ledger().query("status == 'ok'")["step"])


def test_device_of(cpu_only):
    assert lab.device_of({}) == "cpu"
    assert lab.device_of({"device": "cuda"}) == "cuda"


# ----------------------------------------------------------------------------- small analyses
def test_compare_of_outcomes_and_step_names(ledger):
    add(ledger, "a", 10.0)
    add(ledger, "b", 25.0, spread=0.04, repeats=3)
    assert lab.compare("b", "a").data == ("'b': 25.00 frames/s against 10.00 for 'a': 2.50x (150% faster); "
                                          "run-to-run spread of 'b' 4% over 3 runs.")
    skipped = lab.Outcome("c", "skipped", "no GPU")
    assert lab.compare(skipped, "a").data == "No comparison: step 'c' was not run here: no GPU."
    with pytest.raises(ValueError, match="status 'maybe'"):
        lab.Outcome("c", "maybe")


def test_compare_takes_a_bench_result(ledger):
    """Notebook 03's exercise compares run_parallel's Result with a step (it raised TypeError)."""
    from labkit.bench.results import Result

    add(ledger, "streams2", 10.0)
    two = Result("processes2", "processes2-np2", ("python",), {}, pd.DataFrame(), {"fps": 12.0, "repeats": 1})
    assert lab.compare(two, "streams2").data.startswith("'processes2': 12.00 frames/s against 10.00 for 'streams2'")


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
    assert lab.fastest(["baseline", "queues", "int8"], accuracy_floor=0.7, accuracy="map50") == "queues"
    assert lab.fastest(["baseline", "queues", "int8"], accuracy_floor=0.7) == "int8"  # the floor is on MOTA: none here
    with pytest.raises(ValueError, match="run those steps first"):
        lab.fastest(["nothing"])
    assert "'queues': 4.00 frames/s against 2.00 for 'baseline': 2.00x" in lab.compare("queues", "baseline").data
    assert "no row" in lab.compare("never_ran", "baseline").data


def test_report_of_a_step_without_profile_says_so(ledger):
    add(ledger, "baseline", 2.0)
    with pytest.raises(ValueError, match="no profiled 'baseline' row"):
        lab.report("baseline")


def test_reference_absent_then_present(ledger, tmp_path):
    note = lab.reference_table().data
    assert note.startswith("No reference results yet")
    assert lab.reference_rows(["baseline"]).data == note
    assert "reference_configurations" not in note
    assert lab.reference_configurations().data.startswith("No reference configurations")
    configs = Ledger(labbook.reference.REFERENCE / "pipeline_table.jsonl")
    add(configs, "baseline", 50.0, env={"gpu": "NVIDIA H100"})
    add(configs, "all_s1", 500.0, env={"gpu": "NVIDIA H100"})
    assert lab.reference_configurations().speedup.loc["all_s1", "NVIDIA H100"] == 10.0
    assert "`lab.reference_configurations()`" in lab.reference_table().data
    add(ledger, "baseline", 2.0)
    add(ledger, "queues", 3.0)
    ref = Ledger(labbook.reference.REFERENCE / "ledger.jsonl")
    add(ref, "baseline", 100.0, env={"gpu": "NVIDIA H100"})
    add(ref, "fp16", 400.0, env={"gpu": "NVIDIA H100"})
    assert "all_s1" not in lab.reference_table().speedup.index  # the configurations stay apart
    assert lab.reference_table().speedup.loc["fp16", "NVIDIA H100"] == 4.0
    assert list(lab.reference_rows(["fp16"])["fps"]) == [400.0]
    both = lab.speedup(reference=True)
    assert both.machines == ["CPU (Test CPU)", "NVIDIA H100"]
    assert lab.speedup().machines == ["CPU (Test CPU)"]
    assert "see the reference results below" in str(lab.Outcome("fp16", "skipped", "no GPU"))


def test_table_columns_keeps_what_exists():
    f = pd.DataFrame({"step": ["a"], "fps": [1.0], "mota": [0.5], "other": [0], "interval": [2]})
    assert list(lab.table_columns(f, "interval")) == ["step", "interval", "fps", "mota"]
    swept = pd.DataFrame({"step": ["b2", "b64"], "fps": [3.0, math.nan], "error": [None, "out of memory"]})
    assert list(lab.table_columns(swept)) == ["step", "fps", "error"]
    assert list(lab.table_columns(swept.iloc[:1])) == ["step", "fps"]
    skipped = pd.DataFrame({"step": ["a", "b"], "fps": [1.0, math.nan], "status": ["ok", "skipped"],
                            "reason": [None, "no GPU"]})
    assert list(lab.table_columns(skipped)) == ["step", "fps", "status", "reason"]


# ----------------------------------------------------------------------------- video and figures
def test_a_read_only_checkout_keeps_the_clips_in_the_per_user_cache(tmp_path, mount, monkeypatch):
    """Issue 33: a read-only checkout (a shared course folder) with a writable LABKIT_REPORTS died in
    the first run_step writing data/. Its clips go to labkit's per-user cache (the same clip: it is
    made from its seed); a writable checkout keeps them in data/ as before. A real read-only tmpfs."""
    monkeypatch.setattr(labbook.video, "DATA", mount("1m", ro=True) / "data")
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    video = lab.sample_video("small")
    assert video == tmp_path / "cache" / "data" / "sample-640x360-31s-seed11.mp4" and video.exists()
    assert lab.camera_clip(5, "small").parent == video.parent
    monkeypatch.setattr(labbook.video, "DATA", tmp_path / "data")  # writable: data/, made when needed
    assert labbook.video.sample_path("small") == tmp_path / "data" / video.name


def test_sample_video_is_made_once_with_ground_truth(tmp_path):
    video = lab.sample_video("small", folder=tmp_path)
    s = lab.settings("small")
    info = lab.video_info(video)
    assert video.name == "sample-640x360-31s-seed11.mp4" and (tmp_path / "sample-640x360-31s-seed11.gt.csv").exists()
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


def test_say_renders_as_markdown_and_tables_show_numbers_plainly():
    n = lab.say("**bold**")
    assert n.data == "**bold**" and n._repr_markdown_() == "**bold**"
    assert pd.get_option("display.max_colwidth") is None  # doctor's fix text in full
    shown = pd.DataFrame({"total_ns": [12345678.0, 3.0], "share": [0.99326855, 1.5e-6]}).to_string()
    assert "12,345,678" in shown and "0.9933" in shown and "e+" not in shown


def test_both_machines_needs_the_reference(ledger):
    add(ledger, "baseline", 2.0)
    assert lab.both_machines().data.startswith("No reference results yet")


# ----------------------------------------------------------------------------- real reports
FIXTURES = ROOT / "tests" / "fixtures"


def test_reading_a_real_cpu_report():
    run = SimpleNamespace(profile=FIXTURES / "annotated.nsys2022.4.sqlite")
    rep = lab.report(run)
    r = lab.ranges(run, ["infer", "decode", "nonexistent"])
    assert sorted(r["name"]) == ["decode", "infer"] and list(r["instances"]) == [6, 6]
    assert lab.kernels(run).data == "No GPU kernels in this profile: the run used the CPU only."
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
    run = SimpleNamespace(profile=FIXTURES / "pipeline.nsys2025.3.sqlite", config={"batch_size": 4, "warmup": 4})
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
    assert lab.copies(cpu).data.startswith("No host-device copies")
    assert list(labkit.copy_table(lab.report(cpu)).columns) == ["kind", "host", "copies", "mb", "kb_per_copy", "ms"]
    assert lab.copies(lab.Outcome("gpu_preprocess", "skipped", "no GPU")).data.startswith("No profile")


# ----------------------------------------------------------------------------- failed steps
def test_a_failing_step_is_a_ledger_row_and_the_notebook_goes_on(ledger, monkeypatch):
    """A real run that fails (the application rejects --batch-size 0): a failed Outcome and a
    failed ledger row with the application's error line; under LABKIT_STRICT the error is
    raised. run_lab finds the failure in the ledger, not in the cells' text."""
    import pandas as pd

    from labkit.bench.results import BenchError

    sys.path.insert(0, str(ROOT / "scripts"))
    from run_lab import failures

    why = "the application exited with status 2: detect_video: error: --batch-size must be at least 1 (got 0)"
    since = pd.Timestamp.now(tz="UTC")
    monkeypatch.delenv("LABKIT_STRICT", raising=False)
    r = lab.run_step("broken", profile=False, mode="small", batch_size=0, device="cpu")
    assert r.status == "failed" and not r.ok and r.profile is None and r.kind == "exercise"
    assert r.reason == why and str(r) == f"Step 'broken' failed here: {why}"
    row = ledger.rows()[-1]
    assert (row["step"], row["status"], row["reason"], row["config"]["batch_size"]) == ("broken", "failed", why, 0)
    assert lab.compare(r, "baseline").data == f"No comparison: step 'broken' failed here: {why}."
    assert lab.compare("broken", "baseline").data == lab.compare(r, "baseline").data
    with pytest.raises(ValueError, match="Step 'broken' failed here: .* no profile to analyse"):
        lab.report(r)  # a cell that needs the profile stops, naming the failed step
    with pytest.raises(ValueError, match="Step 'broken' failed here"):
        lab.report("broken")
    assert lab.kernels(r).data.startswith("No profile: Step 'broken' failed here")
    assert lab.copies(r).data.startswith("No profile") and lab.ranges(r, ["infer"]).data.startswith("No profile")
    ok, gone = lab.Outcome("ort_fp32", "ok", result=object()), lab.Outcome("tensorrt_int8", "skipped", "no GPU here")
    assert lab.skip_note(ok, what="no stage tables") is None  # every step ran: the cell does its work
    assert lab.skip_note(ok, r, gone, what="no stage tables").data == (
        f"`broken` failed ({why}): no stage tables, so this cell is skipped; fix it and run the step again.")
    assert (lab.skip_note(gone, r, what="x").data
            == "`tensorrt_int8` was not run here (no GPU here): x, so this cell is skipped.")
    assert failures(ledger.path, since) == {"broken": why}
    assert failures(ledger.path, pd.Timestamp.now(tz="UTC")) == {}  # rows of earlier runs are not this run's
    add(ledger, "broken", 3.0)  # fixed and run again: no longer failed
    assert failures(ledger.path, since) == {}
    monkeypatch.setenv("LABKIT_STRICT", "1")
    with pytest.raises(BenchError, match="exited with status 2"):
        lab.run_step("broken", profile=False, mode="small", batch_size=0, device="cpu")


def test_exercise_runs_stay_out_of_the_lab_table(ledger):
    """Steps the catalogue lacks are exercises: in the ledger with kind 'exercise', out of the
    speed-up table unless asked for; the table says what each step builds on."""
    add(ledger, "baseline", 2.0, kind="cumulative")
    add(ledger, "queues", 4.0, kind="cumulative", builds_on="baseline")
    add(ledger, "baseline_omp_active", 0.5, kind="exercise")
    t = lab.speedup()
    assert list(t.speedup.index) == ["baseline", "queues"]
    assert t.steps.loc["queues", "builds_on"] == "baseline" and t.over_builds_on.iloc[:, 0]["queues"] == 2.0
    assert "baseline_omp_active" in lab.speedup(exercises=True).speedup.index
    assert list(lab.jumps(t).index) == ["queues"]


def test_table_columns_show_the_interval_and_a_spread_only_where_repeats_made_one():
    """One measured run (small and full CPU mode) has no spread: the table shows its interval, not a
    column of None; rows with a spread of repeats keep it."""
    one = pd.DataFrame({"step": ["a"], "fps": [10.0], "spread": [None], "fps_ci_low": [9.0], "fps_ci_high": [11.0]})
    assert list(lab.table_columns(one)) == ["step", "fps", "fps_ci_low", "fps_ci_high"]
    three = one.assign(spread=[0.05])
    assert list(lab.table_columns(three)) == ["step", "fps", "fps_ci_low", "fps_ci_high", "spread"]


def test_tied_names_the_values_within_noise_of_the_best():
    """03's sentence: batch 2 on top at 19.0 frames/s (18.0-20.0) is within noise of batch 4 (15.7-20.3),
    not of batch 1 (12.3-13.7); rows without an interval leave only the best."""
    f = pd.DataFrame({"batch_size": [1, 2, 4], "fps": [13.1, 19.0, 18.6],
                      "fps_ci_low": [12.3, 18.0, 15.7], "fps_ci_high": [13.7, 20.0, 20.3]})
    assert lab.best(f, "batch_size") == 2 and lab.tied(f, "batch_size") == [2, 4]
    assert lab.tied(f[["batch_size", "fps"]], "batch_size") == [2]
