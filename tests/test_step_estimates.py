"""Estimates with each step's own parameters (issue 30/31): the interval's K reaches the skip-work
estimate (06 checked a K=4 step against the K=3 estimate), and a larger batch is estimated from
the cost of a call fitted over the runs at other batch sizes (03's batch step had no estimate).

Profiles: the lab's CPU queued run (reports/reference/cpu-2core, nsys 2022.4, full mode)."""
from __future__ import annotations

import labkit
import pytest

import labbook as lab
import labbook.display
import labbook.predict
import labbook.reference
import labbook.runs
from labbook.predict import call_cost, prediction
from labkit import Ledger

from test_predict import REF, add


@pytest.fixture
def led(tmp_path, monkeypatch):
    for mod in (labbook.runs, labbook.reference, labbook.display):
        monkeypatch.setattr(mod, "LEDGER", tmp_path / "ledger.jsonl")
    labbook.predict._advise.cache_clear()
    return Ledger(tmp_path / "ledger.jsonl")


def sweep_row(led, step, batch, infer_ms):
    led.append({"kind": "sweep", "builds_on": "no_osd", "step": step, "status": "ok",
                "config": {**lab.flags("no_osd", "full"), "batch_size": batch},
                "metrics": {"fps": 10.0, "stage_ms": {"infer": infer_ms, "preprocess": 1.0}}})


def test_the_interval_estimate_takes_the_steps_own_k(led):
    add(led, "batch4", profile="queues.sqlite")
    base = lab.flags("batch4", "full")
    by_k = {k: prediction(f"interval{k}", "full", builds_on="batch4", flags={**base, "interval": k}) for k in (2, 4, 8)}
    assert all(p["lever"] == "skip_work" and "K=%d" % k in p["assumptions"] for k, p in by_k.items())
    figures = [by_k[k]["predicted_speedup"] for k in (2, 4, 8)]
    assert figures[0] < figures[1] < figures[2], figures  # a larger K skips more: a larger estimate


def test_a_calls_fixed_cost_is_fitted_over_the_other_batch_sizes(led):
    """A frame's infer time at batch b is fixed / b + per item: 12 ms a call and 20 ms a frame by
    construction, at batch 1 (no_osd) and 2; the batch being predicted (4) is left out of its own fit."""
    led.append({"kind": "cumulative", "builds_on": "queues", "step": "no_osd", "status": "ok",
                "config": lab.flags("no_osd", "full"), "metrics": {"fps": 10.0, "stage_ms": {"infer": 32.0}},
                "paths": {"profile": str(REF / "queues.sqlite")}})
    assert call_cost("no_osd", 4, "full") == ({}, "a call's fixed cost needs runs at two batch sizes other than 4 "
                                                  "(run the sweep first)")
    sweep_row(led, "batch2", 2, 26.0)
    sweep_row(led, "batch4", 4, 5.0)  # the step being predicted: never part of its own fit
    cost, said = call_cost("no_osd", 4, "full")
    assert cost["infer"] == pytest.approx(12.0) and said == "batch sizes 1, 2"
    p = prediction("batch4", "full")
    assert p["finding"] == "Calls of 'infer' in batches of 4" and p["basis"] == "estimate" and p["predicted_speedup"] > 1


def test_the_fitted_batch_rule_removes_the_fixed_part_of_the_calls_it_makes_unnecessary():
    """On a real queued run (128 calls of one frame): the saving is the fixed cost of the calls that
    batches of B make unnecessary, never above the stage's own time, and the prediction within its
    own Amdahl limit."""
    rep = labkit.load_report(REF / "queues.sqlite")
    a = labkit.advise(rep, warmup=16, min_gain=1.0, call_cost={"infer": 10.0}, batch_to=4)
    r = a[a["rule"] == "fitted_batch"].iloc[0]
    assert r["lever"] == "batch" and r["stage"] == "infer" and "calls of 4" in r["evidence"]
    assert 1.0 < r["predicted_speedup"] <= r["window_ms"] / (r["window_ms"] - r["saves_ms"]) + 1e-9
    none = labkit.advise(rep, warmup=16, min_gain=1.0)
    assert "fitted_batch" not in set(none["rule"])  # no fit given, no such finding
