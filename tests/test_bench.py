"""bench.run / sweep / run_parallel mechanics on a tiny real program written into tmp_path.

The program is a real subprocess (no mocks): it parses the flags the lab application takes,
takes its fps from a per-test sequence (one value per invocation, via a counter file), and
writes a results JSON like the application's.
"""
from __future__ import annotations

import json
import math
import sys
import textwrap

import pytest

from labkit import bench
from labkit.bench.results import BenchError, BenchWarning
from labkit.bench.ledger import Ledger

FAKE_APP = textwrap.dedent('''
    import argparse, json, os, sys, time
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--frames", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--fps-seq", default="10")          # fps of the 1st, 2nd, ... invocation
    p.add_argument("--counter", required=True)
    p.add_argument("--status", default="ok")
    p.add_argument("--fail", action="store_true")
    p.add_argument("--fail-from", type=int, default=0)  # the invocation that fails first
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--no-osd", action="store_true")
    a = p.parse_args()
    if a.fail:
        print("loading model...", file=sys.stderr)
        print("RuntimeError: CUDA out of memory (pretend)", file=sys.stderr)
        sys.exit(3)
    # O_APPEND counter: one byte per invocation, safe when several run at once
    fd = os.open(a.counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, b"x"); os.close(fd)
    n = os.path.getsize(a.counter)
    if a.fail_from and n >= a.fail_from:
        print("RuntimeError: out of memory on run", n, file=sys.stderr)
        sys.exit(3)
    seq = [float(v) for v in a.fps_seq.split(",")]
    fps = seq[(n - 1) % len(seq)] * a.batch_size
    time.sleep(a.sleep)
    from labkit.annotate import write_results  # the results schema every labkit-run program writes
    write_results(a.results, {
        "status": a.status, "fps": fps, "frames": a.frames, "warmup": a.warmup,
        "timed_frames": a.frames, "warmup_frames": a.warmup, "seconds": a.frames / fps,
        "latency_ms": {"p50": 1000.0 / fps, "p99": 2000.0 / fps},
        "stages": {"decode": 1.0, "infer": 1000.0 / fps - 1.0}, "stage_detail": {},
        "accuracy": {"map50": 0.5, "mota": 0.4}, "config": {}, "model": None,
        "output_frames": 0, "warnings": []})
''')


@pytest.fixture
def app(tmp_path):
    path = tmp_path / "fake_app.py"
    path.write_text(FAKE_APP)
    return [sys.executable, str(path), "--counter", str(tmp_path / "counter"), "--frames", "20"]


def test_run_medians_spread_and_files(app, tmp_path):
    r = bench.run(app + ["--fps-seq", "10,12,11"], step="baseline", repeats=3, warmup=4,
                  results_dir=tmp_path / "res", name="base", progress=False)
    assert r.repeats["fps"].tolist() == [10.0, 12.0, 11.0]
    assert r.fps == 11.0
    assert r.spread == pytest.approx((12 - 10) / 11)
    assert r.latency_p50_ms == pytest.approx(1000 / 11)
    assert r.latency_p99_ms == pytest.approx(2000 / 11)
    assert r.metrics["spread_latency_p50_ms"] == pytest.approx((100 - 1000 / 12) / (1000 / 11))
    assert r.metrics["stage_ms.decode"] == 1.0 and r.metrics["map50"] == 0.5
    assert r.metrics["repeats"] == 3 and r.ok and r.profile is None
    assert [p.name for p in r.results_paths] == ["base.r1.json", "base.r2.json", "base.r3.json"]
    # bench passed --warmup and one --results per run; every file is kept
    assert all(json.loads(p.read_text())["warmup"] == 4 for p in r.results_paths)
    assert all((tmp_path / "res" / f"base.r{i}.log").exists() for i in (1, 2, 3))
    assert r.config == {"counter": str(tmp_path / "counter"), "frames": 20, "fps_seq": "10,12,11", "warmup": 4}
    assert "11.0 frames/s" in str(r)
    # the run's own noise as the figures have it: its interval where it has one, else its spread; never
    # "spread 0.0 %" for one run (issue 31)
    ci = "fps_ci_low" in r.metrics and math.isfinite(r.metrics["fps_ci_low"])
    assert ("95 % interval" if ci else "spread 18.2%") in str(r), str(r)


def test_run_keeps_a_warmup_flag_already_given(app, tmp_path):
    r = bench.run(app + ["--warmup", "7"], step="s", repeats=1, warmup=4, results_dir=tmp_path, progress=False)
    assert json.loads(r.results_paths[0].read_text())["warmup"] == 7
    assert "spread 0.0%" not in str(r), str(r)


def test_failed_run_raises_with_stderr_tail(app, tmp_path):
    with pytest.raises(BenchError) as info:
        bench.run(app + ["--fail"], step="broken", repeats=2, results_dir=tmp_path, name="b", progress=False)
    msg = str(info.value)
    assert "benchmark 'broken', run 1 of 2: the application exited with status 3" in msg
    assert "RuntimeError: CUDA out of memory (pretend)" in msg
    assert str(tmp_path / "b.r1.log") in msg


def test_timeout_is_a_clear_error(app, tmp_path):
    with pytest.raises(BenchError, match="still running after timeout=0.5 s"):
        bench.run(app + ["--sleep", "5"], step="slow", repeats=1, timeout=0.5, results_dir=tmp_path, progress=False)


def test_non_ok_status_is_flagged_and_recorded(app, tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    with pytest.warns(BenchWarning, match="status 'degraded'"):
        r = bench.run(app + ["--status", "degraded"], step="s", repeats=2, results_dir=tmp_path,
                      ledger=led, progress=False)
    assert not r.ok and len(r.flags) == 2
    row = led.rows()[0]
    assert row["status"] == "flagged" and "degraded" in row["flags"][0]


def test_results_flag_in_command_is_refused(app, tmp_path):
    with pytest.raises(BenchError, match="already has --results"):
        bench.run(app + ["--results", "x.json"], step="s", results_dir=tmp_path, progress=False)


def test_record_goes_to_the_ledger(app, tmp_path):
    led = tmp_path / "ledger.jsonl"
    r = bench.run(app + ["--fps-seq", "20,30,25"], step="batching", repeats=3, results_dir=tmp_path,
                  ledger=led, progress=False)
    rec = r.record()
    assert rec["step"] == "batching" and rec["status"] == "ok"
    assert rec["metrics"]["fps"] == 25.0 and rec["metrics"]["spread"] == pytest.approx(10 / 25)
    assert rec["metrics"]["stage_ms"] == {"decode": 1.0, "infer": pytest.approx(39.0)}
    assert rec["paths"]["results"] == [str(p) for p in r.results_paths]
    df = Ledger(led).read()
    assert df.loc[0, "fps"] == 25.0 and df.loc[0, "stage_ms.decode"] == 1.0
    assert df.loc[0, "config.frames"] == 20 and df.loc[0, "step"] == "batching"
    assert {"env.host", "env.cpu", "paths.profile"} <= set(df.columns)


def test_each_repeat_is_in_the_ledger_as_it_completes_so_a_failure_keeps_them(app, tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    with pytest.raises(BenchError, match="run 3 of 3: the application exited with status 3"):
        bench.run(app + ["--fps-seq", "20,30", "--fail-from", "3"], step="s", repeats=3, results_dir=tmp_path,
                  ledger=led, progress=False, name="keep", labels={"kind": "sweep"})
    kept = led.read(repeats=True)
    assert list(kept["status"]) == ["repeat", "repeat"] and list(kept["repeat"]) == [1, 2]
    assert list(kept["fps"]) == [20.0, 30.0] and list(kept["latency_p50_ms"]) == [50.0, pytest.approx(100 / 3)]
    assert list(kept["paths.results"]) == [str(tmp_path / f"keep.r{i}.json") for i in (1, 2)]
    assert (kept["kind"] == "sweep").all() and (kept["step"] == "s").all()
    assert led.read().empty  # a step's figures come from its own row only: tables never see repeats
    led2 = Ledger(tmp_path / "ok.jsonl")
    bench.run(app + ["--fps-seq", "10"], step="t", repeats=2, results_dir=tmp_path, ledger=led2, progress=False)
    assert list(led2.read(repeats=True)["status"]) == ["repeat", "repeat", "ok"] and len(led2.read()) == 1


def test_sweep_over_batch_size(app, tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    df = bench.sweep(app + ["--fps-seq", "10", "--batch-size", "1"], "--batch-size", [1, 2, 4], step="batch{value}",
                     repeats=2, results_dir=tmp_path, ledger=led, progress=False, name="sw")
    assert df["batch_size"].tolist() == [1, 2, 4]
    assert df["fps"].tolist() == [10.0, 20.0, 40.0]
    assert df["step"].tolist() == ["batch1", "batch2", "batch4"]
    assert df["name"].tolist() == ["sw-batch_size1", "sw-batch_size2", "sw-batch_size4"]
    assert led.read()["config.batch_size"].tolist() == [1, 2, 4]


def test_each_sweep_value_carries_its_own_prediction(app, tmp_path):
    """labels as a function of the value, called when the value's turn comes (06 checked K=4 against
    the K=3 estimate; every interval of a sweep carried the first value's)."""
    led = Ledger(tmp_path / "ledger.jsonl")
    seen = []

    def labels(v):
        seen.append(len(led.read()))  # the rows already written when this value's prediction is made
        return {"kind": "sweep", "predicted_speedup": float(v)}

    bench.sweep(app + ["--fps-seq", "10"], "--batch-size", [2, 4], step="batch{value}", results_dir=tmp_path,
                ledger=led, progress=False, labels=labels)
    assert led.read()["predicted_speedup"].tolist() == [2.0, 4.0] and seen == [0, 1]


def test_run_parallel_aggregates_throughput(app, tmp_path):
    r = bench.run_parallel(app + ["--fps-seq", "10", "--sleep", "0.5"], processes=3, step="np3",
                           results_dir=tmp_path, progress=False)
    assert len(r.repeats) == 3
    assert r.fps == 30.0  # sum of per-process fps
    assert r.metrics["frames"] == 60.0
    # all three ran at once: the wall time is far below 3 x 0.5 s of sleeping
    assert r.metrics["wall_s"] < 1.4
    assert r.metrics["fps_wall"] == pytest.approx(60.0 / r.metrics["wall_s"])
    assert r.config["processes"] == 3 and r.spread == 0.0  # three processes at the same rate
    assert "30.0 frames/s summed over 3 processes" in str(r)


def test_run_parallel_failure_names_the_process(app, tmp_path):
    with pytest.raises(BenchError, match=r"process \d of 2: the application exited with status 3"):
        bench.run_parallel(app + ["--fail"], processes=2, step="np2", results_dir=tmp_path, progress=False)


@pytest.mark.parametrize("values, expected", [
    ([10, 12, 11], 2 / 11), ([5], math.nan), ([], math.nan), ([0, 0], math.nan), ([1, float("nan"), 3], 1.0)])
def test_spread(values, expected):
    got = bench.spread(values)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


@pytest.mark.parametrize("command, flag, value, expected", [
    (["app", "--batch-size", "1", "--x"], "--batch-size", 8, ["app", "--x", "--batch-size", "8"]),
    (["app", "--batch-size=1"], "--batch-size", 2, ["app", "--batch-size", "2"]),
    (["app", "--fp16", "--x", "1"], "--fp16", False, ["app", "--x", "1"]),
    (["app"], "--no-osd", True, ["app", "--no-osd"]),
])
def test_with_flag(command, flag, value, expected):
    assert bench.with_flag(command, flag, value) == expected


def test_config_of():
    assert bench.config_of(["python", "app.py", "--input", "c.mp4", "--batch-size", "4", "--no-osd",
                            "--scale=0.5", "--results", "r.json", "--device", "cpu"]) == {
        "input": "c.mp4", "batch_size": 4, "no_osd": True, "scale": 0.5, "device": "cpu"}


@pytest.mark.nsys
def test_profiled_run_is_kept_but_left_out_of_medians(app, tmp_path):
    r = bench.run(app + ["--fps-seq", "5,10,20"], step="p", repeats=2, profile=True, results_dir=tmp_path / "res",
                  profile_dir=tmp_path / "prof", name="pp", progress=False)
    assert r.repeats["profiled"].tolist() == [True, False, False]
    assert r.repeats["fps"].tolist() == [5.0, 10.0, 20.0]
    assert r.fps == 15.0 and r.metrics["repeats"] == 2  # the traced run (5 fps) is not in the median
    assert r.profile == tmp_path / "prof" / "pp.nsys-rep" and r.profile.stat().st_size > 0
    assert r.record()["paths"]["profile"] == str(r.profile)


@pytest.mark.nsys
def test_profiled_run_failure_shows_the_app_output(app, tmp_path):
    with pytest.raises(BenchError, match=r"(?s)benchmark 'p', profiled run: .*CUDA out of memory \(pretend\)"):
        bench.run(app + ["--fail"], step="p", repeats=1, profile=True, results_dir=tmp_path,
                  profile_dir=tmp_path, progress=False)


def test_a_result_names_its_interval_not_a_spread_of_one_run():
    """One measured run with its interval over batches (small mode): the line quotes the interval,
    never "spread 0.0%" beside it (issue 31); without one it says there is no spread."""
    import pandas as pd

    metrics = {"fps": 98.0, "spread": 0.0, "repeats": 1, "fps_ci_low": 76.035, "fps_ci_high": 124.7636,
               "fps_ci_over": "batches"}
    r = bench.Result(step="interval4", name="n", command=("app",), config={}, repeats=pd.DataFrame({"fps": [98.0]}),
                     metrics=metrics, profile=None, flags=(), labels={})
    assert "98.0 frames/s one measured run, 95 % interval over its batches 76.0-124.8 frames/s," in str(r)
    assert "spread" not in str(r) and "median" not in str(r)
    alone = bench.Result(step="s", name="n", command=("app",), config={}, repeats=pd.DataFrame({"fps": [98.0]}),
                         metrics={"fps": 98.0, "spread": 0.0, "repeats": 1}, profile=None, flags=(), labels={})
    assert "one measured run: no spread" in str(alone), str(alone)
