"""The run graph (labkit.judge.graph) and its replay (labkit.judge.replay) on real recorded profiles:
with no change the replay lasts what the run lasted; removing work or adding cores never lengthens
it; waits follow the thread that released them; and on every recorded known answer whose fix was
measured, the replay of the fix's finding lands within 25 % of what the fix measured."""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.judge.graph import GPU, PEER, run_graph
from labkit.judge.replay import Lever, lever_for, predict, replay

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"


def _bench():
    spec = importlib.util.spec_from_file_location("replay_vs_formula", ROOT / "benchmarks" / "replay_vs_formula.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()
KA = BENCH.ka

EVERY_FIXTURE = sorted(str(p.relative_to(FIX)) for p in FIX.rglob("*.sqlite"))
"""Every recorded export here (about 50, nsys 2020.5 to 2026.1): queues, pools, polling loops on a loaded
machine, GPU syncs, copies and tiny launches, ONNX Runtime's worker pool, the lab's pipeline on CPU
and GPU, ranks, and other people's reports."""


def _span(rep) -> tuple[int, int]:
    frames = [f for f in (rep.nvtx, rep.cuda_api, rep.osrt) if len(f)]
    return min(int(f["start_ns"].min()) for f in frames), max(int(f["end_ns"].max()) for f in frames)


@lru_cache(maxsize=None)
def _advised(rel: str):
    rep = labkit.load_report(FIX / rel)
    return rep, labkit.advise(rep)


def _graph(rel: str):
    rep, adv = _advised(rel)
    return run_graph(rep, adv.attrs["window"])


@pytest.mark.parametrize("rel", EVERY_FIXTURE)
def test_the_replay_with_no_change_lasts_what_the_recorded_run_lasted(rel):
    """Every segment at its recorded length, every wait released by its recorded releaser, the cores
    shared as in the recording: over the whole trace, the replayed run ends where the recorded one did
    (within 0.1 %)."""
    rep = labkit.load_report(FIX / rel)
    g = run_graph(rep, _span(rep))
    assert len(g.kind) > 0 and g.length_ns > 0
    assert replay(g) == pytest.approx(g.length_ns, rel=1e-3)


def test_the_graph_is_built_once_per_report_and_window():
    """run_graph keeps its graph in the report's memo: the same report and window give the same
    object, another window another graph."""
    rep, adv = _advised("known_switches/timed_wait.nsys2022.4.sqlite")
    w = adv.attrs["window"]
    assert run_graph(rep, w) is run_graph(rep, w)
    half = (w[0], w[0] + (w[1] - w[0]) // 2)
    assert run_graph(rep, half) is not run_graph(rep, w) and run_graph(rep, half).length_ns < run_graph(rep, w).length_ns


INVARIANT_RUNS = ["known_switches/timed_wait.nsys2022.4.sqlite", "known_paths/fed_pool.ci.nsys2022.4.sqlite",
                  "known_loaded/poll_consumer_gil.nsys2022.4.sqlite", "known_gpu/gpu_sync.h200.sqlite",
                  "lab/ort_fp32.cpu-2core.nsys2022.4.sqlite", "pipeline.nsys2022.4.sqlite"]


@pytest.mark.parametrize("rel", INVARIANT_RUNS)
def test_removing_or_halving_a_stages_work_never_lengthens_the_run(rel):
    """For every stage of the run, its own time (or its latency) removed or halved: with cores
    enough for every thread the replay is a max-plus system, and the run is no longer than recorded,
    removal no longer than halving. With the recorded cores shared, work that now starts earlier can
    take a core from the thread that sets the pace (as the OS would let it): the run then grows by no
    more than 0.1 % (ort_fp32's 'decode' latency halved: 0.12 ms in 28.9 s)."""
    g = _graph(rel)
    for cores, slack in ((1e9, 1e-9), (None, 1e-3)):
        base = replay(g, Lever(cores=cores))
        stages = sorted({s for s in g.stage[g.kind != GPU] if s})
        assert stages
        for st in stages:
            for kinds in (("work", "cuda"), ("latency",)):
                half = replay(g, Lever(stages=(st,), factor=0.5, kinds=kinds, cores=cores))
                gone = replay(g, Lever(stages=(st,), factor=0.0, kinds=kinds, cores=cores))
                assert half <= base * (1 + slack), (st, kinds, cores, half, base)
                assert gone <= half * (1 + slack), (st, kinds, cores, gone, half)


@pytest.mark.parametrize("rel", INVARIANT_RUNS)
def test_more_cores_never_lengthen_the_run_and_fewer_never_shorten_it(rel):
    """The recorded cores doubled, or without limit, leave the run no longer; one core no shorter."""
    g = _graph(rel)
    base = replay(g)
    cores = g.cores or 2.0
    assert replay(g, Lever(cores=2 * cores)) <= base * (1 + 1e-6)
    assert replay(g, Lever(cores=1e9)) <= base * (1 + 1e-6)
    assert replay(g, Lever(cores=1.0)) >= base * (1 - 1e-6)


def test_a_pools_waits_follow_their_feeder_not_a_busy_bystander():
    """fed_pool (tests/fixtures/README.md, known_paths/): four workers wait for the feeder's items
    while the others end their 'work' inside those waits. Each worker's waits of a millisecond or more
    are released by the feeder's thread (the one that runs 'produce'), at the end of a 'produce'."""
    g = _graph("known_paths/fed_pool.ci.nsys2022.4.sqlite")
    d = g.segments()
    feeder = int(d.loc[d["stage"] == "produce", "lane"].mode()[0])
    waits = d[(d["kind"] == "peer") & (d["lane"] != feeder) & (d["end_ns"] - d["start_ns"] >= 1_000_000)]
    assert len(waits) >= 30  # 38: about one an item, 48 items
    src = waits["src"][waits["src"] >= 0]
    assert len(src) >= 0.9 * len(waits)
    assert (d.loc[src, "lane"] == feeder).mean() >= 0.9
    assert (d.loc[src, "stage"] == "produce").mean() >= 0.9


@pytest.mark.parametrize("case", ["gil", "split"])
def test_a_polling_loop_is_one_wait_that_the_producer_ends(case):
    """poll_consumer on a loaded machine (known_loaded/): the consumer naps 1 ms at a time until the
    producer's item is there. Its naps and the checks between them are one wait, released by the
    producer; what stays without a releaser is under a tenth of its waiting."""
    g = _graph(f"known_loaded/poll_consumer_{case}.nsys2022.4.sqlite")
    d = g.segments()
    consumer = int(d.loc[d["stage"] == "consume", "lane"].mode()[0])
    waits = d[(d["lane"] == consumer) & (d["kind"] == "peer")]
    dur = waits["end_ns"] - waits["start_ns"]
    assert dur[waits["src"] < 0].sum() < 0.1 * dur.sum()
    assert (d.loc[waits["src"][waits["src"] >= 0], "stage"] == "produce").all()


def test_removing_a_sync_leaves_the_gpu_its_work():
    """gpu_sync (known_gpu/): with its syncs removed the thread no longer waits on the GPU, but the GPU
    lane still runs every kernel after its launch: the run is no shorter than the GPU's busy time."""
    g = _graph("known_gpu/gpu_sync.h200.sqlite")
    gpu = g.kind == GPU
    busy = float((g.end_ns[gpu] - g.start_ns[gpu]).sum())
    after = replay(g, Lever(remove_sync=True))
    assert busy > 0 and after >= busy
    assert after < replay(g)
    waits = (g.kind == PEER) & (g.src >= 0)
    assert (g.kind[g.src[waits]] == GPU).any()  # the syncs wait for the GPU's last operation


def _recorded():
    return BENCH.recorded()


@pytest.mark.parametrize("rec", _recorded(), ids=lambda r: "-".join([r["program"]] + [a.strip("-") for a in r["args"]]))
def test_the_replay_lands_within_25_percent_of_each_measured_fix(rec):
    """Each recorded known answer whose fix was measured (benchmarks/replay_vs_formula.py): the replay
    of the fix's finding (its lever as a change to the graph) predicts the measured speed-up within
    25 % (widened by the measurement's noise, as the known-answer verdict widens it), with a range
    that holds the prediction; a finding with no replay lever (batching launches) makes no number."""
    r = BENCH.row(KA, rec)
    assert r["formula_x"] is not None, r
    if r["lever"] == "batch":
        assert r["replay_x"] is None, r
        return
    assert r["replay_x"] is not None, r
    assert r["replay_low"] <= r["replay_x"] <= r["replay_high"], r
    assert abs(r["replay_x"] / r["measured_x"] - 1) <= KA.TOLERANCE + r["noise"], r
    assert r["replayed_ms"] < r["recorded_ms"]


def test_the_range_comes_from_the_runs_own_variation():
    """fed_pool's workers took 9 to 12 items each: runs drawn from this one (each segment's length from
    those of its stage) move the pool's last worker, so the prediction has a range around it; the same
    seed draws the same range."""
    rep, adv = _advised("known_paths/fed_pool.ci.nsys2022.4.sqlite")
    g = run_graph(rep, adv.attrs["window"])
    lever = lever_for(rep, g, {"lever": "cheaper_stage", "stage": "produce"})
    p = predict(g, lever)
    assert p.low < p.speedup or p.speedup < p.high
    assert p.high - p.low > 0.05
    q = predict(g, lever)
    assert (q.low, q.high) == (p.low, p.high)
    assert lever_for(rep, g, {"lever": "no_such_lever"}) is None
    assert np.isfinite(p.speedup) and p.speedup > 1
