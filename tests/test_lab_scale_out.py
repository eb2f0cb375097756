"""Notebook 08's steps as data (labbook.steps.scale_out): built on a recorded step, kind, launch, threads."""
from __future__ import annotations

import importlib
import os

import pytest

from labbook.steps import SCALE_OUT, recorded_options, scale_out
from labkit.bench.ledger import Ledger, not_run

OPTIONS = {"inputs": ["clip.mp4"], "frames": 24, "queues": True, "osd": True, "output": "v.mp4", "batch_size": 4}


def test_scale_out_builds_on_the_start_step():
    steps = scale_out("interval3", OPTIONS, n=2)
    procs, ranks = steps["processes2"], steps["ranks2"]
    share = max(1, (os.cpu_count() or 1) // 2)
    assert dict(procs.flags) == {**{k: v for k, v in OPTIONS.items() if k != "output"}, "threads": share}
    assert dict(ranks.flags) == {**OPTIONS, "threads": share, "streams": 2}  # one stream per rank; rank 0's video
    assert (procs.builds_on, procs.kind, dict(procs.launch)) == ("interval3", "alternative", {"processes": 2})
    assert (ranks.builds_on, ranks.kind, dict(ranks.launch)) == ("interval3", "alternative",
                                                                 {"launcher": "torchrun", "nproc": 2})
    labels = procs.labels()
    assert {k: labels[k] for k in ("kind", "builds_on")} == {"kind": "alternative", "builds_on": "interval3"}
    # every lab row carries a prediction: n copies can gain at most n times the one process
    assert labels["predicted_speedup"] == 2.0 and labels["finding"].startswith("2 copies of the work")
    # a start step with its own streams and threads keeps them: each rank runs the whole start step
    assert dict(scale_out("streams2", {**OPTIONS, "streams": 2, "threads": 1}, n=SCALE_OUT)["ranks2"].flags)[
        "streams"] == 2 * SCALE_OUT


def test_recorded_options_are_the_latest_ok_row(tmp_path, monkeypatch):
    settings = importlib.import_module("labbook.settings")  # the module; labbook.settings is its function
    monkeypatch.setattr(settings, "LEDGER", tmp_path / "ledger.jsonl")
    led = Ledger(tmp_path / "ledger.jsonl")
    with pytest.raises(ValueError, match="'batch4' has no ok row"):
        recorded_options("batch4")
    led.append({"step": "batch4", "status": "ok", "config": {"batch_size": 4}, "metrics": {"fps": 1.0}})
    led.append(not_run("batch4", status="failed", reason="x", config={"batch_size": 8}))
    assert recorded_options("batch4") == {"batch_size": 4}


def test_notebook_08_records_steps_that_cannot_run_and_goes_on(tmp_path, monkeypatch):
    """08's processes and ranks (``lab.run_scaled``, as its cells call it) on runs that really fail
    here (their input is missing): no exception, a failed ledger row each with a reason
    (bench.error_line's: for torchrun, its last line), and the outcome says so."""
    import json
    from pathlib import Path

    runs = importlib.import_module("labbook.runs")
    monkeypatch.setattr(runs, "LEDGER", tmp_path / "ledger.jsonl")
    monkeypatch.setattr(runs, "RESULTS", tmp_path / "results")
    monkeypatch.delenv("LABKIT_STRICT", raising=False)
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "08_Scaling_Out.ipynb").read_text())
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "lab.run_scaled(PROCS, guess=MY_GUESS_PROCESSES)" in code and "lab.run_scaled(RANKS, guess=MY_GUESS_RANKS)" in code
    steps = scale_out("baseline", {"inputs": [str(tmp_path / "missing.mp4")], "frames": 4, "device": "cpu",
                                   "osd": False}, n=2)
    outs = [runs.run_scaled(steps[name], mode="small", guess=1.7) for name in ("processes2", "ranks2")]
    assert [(o.step, o.status, o.result) for o in outs] == [("processes2", "failed", None), ("ranks2", "failed", None)]
    assert all(o.reason and "\n" not in o.reason for o in outs), [o.reason for o in outs]
    rows = Ledger(tmp_path / "ledger.jsonl").rows()
    assert [(r["step"], r["status"], r["guess"]) for r in rows] == [("processes2", "failed", 1.7), ("ranks2", "failed", 1.7)]
    assert rows[-1]["reason"] and rows[-1]["config"]["streams"] == 2 and rows[-1]["builds_on"] == "baseline"
