"""A lever's factor on the detector stage alone (source_code/stage_alone.py, the application's own
module, run as a child with the trained weights), its cache (labbook.stage_factor) and its replay in
a pipeline's profile (labkit.what_if, on the lab's own batch-4 CPU profile in tests/fixtures/lab).

The measurements are real and tiny (a 64x96 input, a few pairs of short timings): what they assert
holds whatever this machine's speed (the interval holds the factor; both sides ran the backends they
name); the replay's invariants hold on any profile (factor 1 is no change, factor 0 is the stage
costing nothing, a slower stage never speeds the run up)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import labkit
import labbook.stage_factor as sf
from labkit.judge.graph import run_graph
from labkit.judge.replay import Lever, replay

ROOT = Path(__file__).resolve().parents[1]
BATCH4 = ROOT / "tests" / "fixtures" / "lab" / "batch4.cpu-2core.r5.nsys2022.4.sqlite"
TINY = {"batch_size": 2, "input_hw": "64x96", "threads": 1}


def alone(base: dict, lever: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "source_code.stage_alone", "--base", json.dumps(base),
                           "--lever", json.dumps(lever), *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_a_layout_change_is_measured_on_the_stage_alone_in_pairs(tmp_path):
    done = alone({**TINY, "cache_dir": str(tmp_path)}, {**TINY, "cache_dir": str(tmp_path), "channels_last": True},
                 "--pairs", "3", "--seconds", "0.05")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["backends"] == ["torch-fp32", "torch-fp32-channels_last"] and doc["devices"] == ["cpu", "cpu"]
    assert doc["pairs"] == 3 and doc["batch_size"] == 2 and doc["input_hw"] == [64, 96]
    assert 0 < doc["low"] <= doc["factor"] <= doc["high"]
    assert doc["base_ms"] > 0 and doc["lever_ms"] > 0


@pytest.mark.parametrize("base, lever, extra, code, says", [
    (TINY, {**TINY, "backend": "tensorrt"}, (), 3, "tensorrt"),  # not installable here: one line naming it
    (TINY, {**TINY, "batch_size": 4}, (), 2, "batch size"),
    (TINY, TINY, ("--pairs", "0"), 2, "--pairs"),
])
def test_what_cannot_be_measured_is_one_line(base, lever, extra, code, says):
    done = alone(base, lever, *extra)
    assert done.returncode == code and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stage_alone: error:") and says in lines[0].lower(), done.stderr


def test_options_are_json_data_never_code(tmp_path):
    done = subprocess.run([sys.executable, "-m", "source_code.stage_alone", "--base", "{'batch_size': 2}",
                           "--lever", "__import__('os').system('touch x')"], cwd=tmp_path, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 2 and "JSON" in done.stderr and not (tmp_path / "x").exists()


def test_the_cache_is_input_an_entry_that_is_no_measurement_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setattr(sf, "RESULTS", tmp_path)
    base, lever = {**TINY, "cache_dir": str(tmp_path / "c")}, {**TINY, "cache_dir": str(tmp_path / "c"),
                                                                  "channels_last": True}
    path = tmp_path / "stage_alone" / f"{sf._key(base, lever)}.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"factor": 0.5, "low": 0.6, "high": 0.7, "pairs": 3}))  # factor outside its interval
    doc, why = sf.measure(base, lever, pairs=2)
    assert why == "" and doc["backends"] == ["torch-fp32", "torch-fp32-channels_last"]
    assert json.loads(path.read_text()) == doc  # the measurement replaced what was not one
    again, _ = sf.measure(base, lever, pairs=2)
    assert again == doc  # read back, not measured again (a new measurement would differ in its timings)
    none, why = sf.measure(base, {**lever, "backend": "tensorrt", "channels_last": False})
    assert none is None and "tensorrt" in why.lower()


def test_only_a_change_of_how_the_detector_computes_is_measured_alone():
    assert sf.applies({"channels_last": True}) and sf.applies({"backend": "onnxruntime", "precision": "int8"})
    assert not sf.applies({}) and not sf.applies({"batch_size": 8}) and not sf.applies({"compile": True, "queues": True})


@pytest.fixture(scope="module")
def batch4():
    rep = labkit.load_report(BATCH4)
    return rep, labkit.advise(rep, warmup=8).attrs["window"]


def test_what_if_is_the_replay_with_the_stage_scaled(batch4):
    rep, w = batch4
    g = run_graph(rep, w)
    assert labkit.what_if(rep, "infer", 1.0, window=w).speedup == pytest.approx(1.0)
    free = labkit.what_if(rep, ("infer",), 0.0, window=w)
    assert free.speedup == pytest.approx(replay(g) / replay(g, Lever(stages=("infer",), factor=0.0)))
    figures = [labkit.what_if(rep, ("infer",), f, window=w).speedup for f in (0.0, 0.5, 0.9, 1.0, 1.5)]
    assert figures == sorted(figures, reverse=True) and figures[-1] < 1.0  # a slower stage never speeds the run
    ranged = labkit.what_if(rep, ("infer",), 0.5, factor_range=(0.4, 0.7), window=w)
    at = [labkit.what_if(rep, ("infer",), f, window=w).speedup for f in (0.7, 0.4)]
    assert ranged.low <= at[0] + 1e-9 and ranged.high >= at[1] - 1e-9 and ranged.low <= ranged.speedup <= ranged.high


@pytest.mark.parametrize("stages, factor, says", [((), 0.5, "stage names"), (("infer",), -1, "factor"),
                                                  (("no_such_stage",), 0.5, "its stages")])
def test_what_if_refuses_what_it_cannot_replay(batch4, stages, factor, says):
    rep, w = batch4
    with pytest.raises(ValueError, match=says):
        labkit.what_if(rep, stages, factor, window=w)
