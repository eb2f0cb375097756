"""labkit's judgement on programs whose limiter is known by construction (tests/known_answers.py):
each slow variant is profiled under the real nsys (cuda,nvtx,osrt), its fix is timed against it as
plain subprocesses, and the top finding must name the right lever and stage, predict the measured
speed-up within 25 %, never be a bound the fix exceeds, and no finding may predict more than its
own window / (window - saves). The table with every figure: benchmarks/known_answers.py."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import known_answers as ka
import numpy as np
import labkit
from labkit.judge.accounting import account
import pytest


def _check(name, tmp_path):
    return ka.check(name, tmp_path, repeats=3)


_ROWS: dict[str, dict] = {}
"""Each CPU program's verdict row, as this session judged it, for the pass rate below."""
PASS_RATE = 0.9
"""At least this share of the CPU known answers must pass (issue 60): one profile is one sample of a
program's run, and on a shared 2-core machine a program's fix may measure far from its quiet figure."""


@pytest.mark.nsys
@pytest.mark.slow
@pytest.mark.parametrize("name", ka.CPU_PROGRAMS)
def test_known_answer_cpu(name, tmp_path):
    """What must hold on every program: a verdict is made and no finding predicts past its own
    Amdahl limit. Whether the verdict is right (lever, stage, within 25 %, no bound exceeded, no
    promise past 1.3x the fix) counts toward the pass rate, asserted below; a miss is said here."""
    row, judged = _check(name, tmp_path)
    _ROWS[name] = row
    assert not ka.amdahl_violations(judged["advice"]), row
    if not row["passed"]:
        import warnings

        warnings.warn(f"known answer {name} missed: {row['why']} (row: {row})", stacklevel=1)


@pytest.mark.nsys
@pytest.mark.slow
def test_at_least_90_percent_of_the_known_answers_pass(tmp_path):
    """The pass rule over the whole class of CPU programs; programs not judged above in this session
    (a -k selection) are judged here."""
    for name in ka.CPU_PROGRAMS:
        if name not in _ROWS:
            (tmp_path / name).mkdir()
            _ROWS[name] = _check(name, tmp_path / name)[0]
    failed = {n: _ROWS[n]["why"] for n in ka.CPU_PROGRAMS if not _ROWS[n]["passed"]}
    passed = len(ka.CPU_PROGRAMS) - len(failed)
    assert passed >= PASS_RATE * len(ka.CPU_PROGRAMS), f"{passed} of {len(ka.CPU_PROGRAMS)} passed; missed: {failed}"


@pytest.mark.nsys
@pytest.mark.gpu
@pytest.mark.parametrize("name", ka.GPU_PROGRAMS)
def test_known_answer_gpu(name, tmp_path):
    row, _ = _check(name, tmp_path)
    assert row["passed"], f"{name}: {row['why']} (row: {row})"


def test_every_expected_lever_is_labkits():
    from labkit.judge.evidence import LEVERS

    for prog in ka.PROGRAMS.values():
        assert set(prog.levers) <= set(LEVERS), prog.name
        assert (ka.KNOWN / prog.script).is_file(), prog.script


def test_amdahl_limit_reads_saves_and_window():
    import pandas as pd

    ok = {"lever": "batch", "stage": "infer", "predicted_speedup": 2.0, "saves_ms": 500.0, "window_ms": 1000.0}
    over = dict(ok, predicted_speedup=2.5)
    assert ka.amdahl_limit(ok) == 2.0
    assert ka.amdahl_violations(pd.DataFrame([ok])) == []
    assert len(ka.amdahl_violations(pd.DataFrame([ok, over]))) == 1
    assert ka.amdahl_violations(pd.DataFrame([{"lever": "batch", "predicted_speedup": 9.0}])) == []


def test_the_verdict_of_several_profiles_is_the_median_predictions():
    """A program profiled three times (its first verdict failed) is judged on the profile whose fix's
    prediction is the median: one loaded profile's low bound decides nothing, and two that fail do."""
    def tr(x, passed):
        return {"predicted_x": x, "passed": passed}, {"x": x}

    row, judged = ka.typical([tr(3.70, False), tr(3.99, True), tr(4.03, True)])
    assert row["passed"] and judged == {"x": 3.99} and row["profiles"] == [3.70, 3.99, 4.03]
    row, _ = ka.typical([tr(3.70, False), tr(3.65, False), tr(4.03, True)])
    assert not row["passed"] and row["predicted_x"] == 3.70
    row, _ = ka.typical([tr(None, False), tr(2.0, True), tr(None, False)])  # no fix finding: lowest
    assert not row["passed"]
    row, _ = ka.typical([tr(3.99, True)])
    assert row["passed"] and row["profiles"] == [3.99]


def _judged_one(prog, x: float, basis: str = "estimate") -> dict:
    import pandas as pd

    r = {"finding": f"Stage '{prog.stage}' limits", "evidence": "", "lever": prog.levers[0], "lever_text": "",
         "predicted_speedup": x, "basis": basis, "assumptions": "", "rule": "dominant_stage", "stage": prog.stage,
         "saves_ms": 1000 - 1000 / x, "window_ms": 1000.0}
    return {"advice": pd.DataFrame([r]), "top": r, "bottleneck": None, "errors": []}


def test_noise_widens_the_tolerance_by_ten_points_at_most_and_no_fix_is_promised_past_1_3x():
    """The pass rule's two limits: a noise of 0.34 widens 25 % to 35 %, not 59 % (1.45x against a
    measured 1.0x fails); within the widened tolerance, a finding promising over 1.3x what its fix
    measured fails (1.34x against 1.0x); 1.2x against 1.0x with a noise of 0.05 passes."""
    prog = ka.PROGRAMS["slow_stage"]
    row = ka.verdict(prog, _judged_one(prog, 1.45), {"speedup": 1.0, "noise": 0.34})
    assert not row["passed"] and "more than 35 %" in row["why"], row["why"]
    row = ka.verdict(prog, _judged_one(prog, 1.34), {"speedup": 1.0, "noise": 0.34})
    assert not row["passed"] and "over 1.3x the measured 1.00x" in row["why"], row["why"]
    row = ka.verdict(prog, _judged_one(prog, 0.7), {"speedup": 1.0, "noise": 0.34})  # low: 30 % off, within 35 %
    assert row["passed"], row["why"]
    assert ka.verdict(prog, _judged_one(prog, 1.2), {"speedup": 1.0, "noise": 0.05})["passed"]


@pytest.mark.nsys
def test_a_profile_that_hangs_at_exit_is_stopped_and_taken_again(tmp_path):
    """nsys 2022.4 now and then never returns from a program that has done its work (CI run N: 19
    minutes). The harness stops a profile past its limit and takes it once more; a program that
    hangs at exit on its first run only (a thread nobody ends) gives the second run's report."""
    script = tmp_path / "hangs_once.py"
    mark = tmp_path / "hung"
    script.write_text("import pathlib, threading\nfrom labkit import annotate\n"
                      "with annotate.range('work'):\n    sum(range(10**5))\n"
                      f"mark = pathlib.Path({str(mark)!r})\n"
                      "if not mark.exists():\n    mark.touch()\n"
                      "    threading.Thread(target=threading.Event().wait).start()\n")
    prog = ka.Program(name="hangs_once", script=str(script), levers=(), stage=None, expected_x=1.0)
    rep = ka.profile(prog, tmp_path / "out", timeout_s=20)  # a profile takes 2-3 s here
    assert mark.exists()  # the first profile hung and was stopped
    assert rep.meta["profile_wall_s"] < 20  # the report is the second run's, which ended by itself
    assert list(rep.nvtx["name"]) == ["work"]


@pytest.mark.nsys
def test_a_range_nested_in_a_stages_call_is_that_stages_work(tmp_path):
    """batched_every_item's ``detect`` calls each hold a nested ``setup`` range (24 of the 48 ms of
    the call, by construction), which is no stage of its own: the what-if model counts its time as
    detect's, so detect is 48 of the 64 ms a batch of its thread (it read 24 of 64 when the nested
    range's time was no stage's, and no skip-work finding was made)."""
    from labkit.judge.whatif import WhatIf

    rep = ka.profile("batched_every_item", tmp_path)
    a = labkit.advise(rep, skip_every=4)
    m = WhatIf(rep, a.attrs["window"], a.attrs["stages"])
    st = m.stages.set_index("stage")
    assert set(st.index) == {"detect", "track"}
    share = st.loc["detect", "own_ms"] / m.threads["own_ms"].max()
    assert 0.65 < share < 0.85, share  # 48/64 = 0.75 by construction
    assert st.loc["detect", "instances"] <= 8  # its calls (8 batches), not its calls and their nested ranges
    top = a.iloc[0]
    assert top["rule"] == "skip_work", top
    fixed = re.search(r"of 8 items, ([0-9.]+) ms each \(its nested set-up ranges\)", top["assumptions"])
    assert fixed and 22 < float(fixed.group(1)) < 28, top["assumptions"]  # 24 ms by construction, as measured


@pytest.mark.nsys
def test_the_critical_path_follows_a_handoff_and_tiles_the_window(tmp_path):
    """handoff: the main thread prepares (10 ms) and waits while a worker infers (30 ms), item after
    item. The critical path walks back through both threads (the worker's 'infer' is 3/4 of it) and its
    segments tile the window, one after another, with no gap or overlap; the model's length is the
    window, not the busiest thread's own time (3/4 of it)."""
    from labkit.judge.whatif import WhatIf

    rep = ka.profile("handoff", tmp_path)
    a = labkit.advise(rep)
    m = WhatIf(rep, a.attrs["window"], a.attrs["stages"])
    path = m.critical()
    w0, w1 = m.window
    assert path["start_ns"].iloc[0] == w0 and path["end_ns"].iloc[-1] == w1
    assert (path["start_ns"].iloc[1:].to_numpy() == path["end_ns"].iloc[:-1].to_numpy()).all()
    on = m.path_stages().set_index("stage")["path_ms"]
    span = (w1 - w0) / 1e6
    assert 0.65 < on["infer"] / span < 0.85, on  # 30 of 40 ms by construction
    assert 0.15 < on["prepare"] / span < 0.35, on
    assert m.threads["own_ms"].max() < 0.85 * span  # the busiest thread alone misses a quarter of the run
    top = a.iloc[0]
    assert top["stage"] == "infer" and top["basis"] == "bound" and top["predicted_speedup"] > 3.5, top


def _profile_inline(prog, tmp_path, trace):
    """Profile a program written by a test (beside the known-answer programs' ``_known`` helpers)."""
    env = ka._env()
    env["PYTHONPATH"] = os.pathsep.join([str(ka.KNOWN), env["PYTHONPATH"]])
    return labkit.profile([sys.executable, str(prog)], name=prog.stem, outdir=str(tmp_path), trace=trace, env=env)


@pytest.mark.nsys
def test_without_os_calls_a_threads_time_after_its_last_range_is_not_work(tmp_path):
    """A hand-off traced without OS runtime calls (cuda,nvtx): the main thread prepares (10 ms) and
    hands items to a worker that infers (30 ms each), then waits for the last one and leaves a mark.
    Its time after its last range is no more its work than the time between its ranges: up to the
    mark the critical path runs through the worker's 'infer' ranges, not through the waiting main
    thread."""
    from labkit.judge.whatif import WhatIf

    prog = tmp_path / "handoff_mark.py"
    prog.write_text(
        "from concurrent.futures import ThreadPoolExecutor\nfrom labkit import annotate\nfrom _known import cpu\n"
        "def infer(i):\n    with annotate.range('infer', batch=i, items=1):\n        cpu(30)\n"
        "with ThreadPoolExecutor(1) as pool:\n"
        "    for i in range(6):\n"
        "        with annotate.range('prepare', batch=i, items=1):\n            cpu(10)\n"
        "        f = pool.submit(infer, i)\n"
        "    f.result()\n"
        "annotate.mark('done')\n")
    rep = _profile_inline(prog, tmp_path, ("cuda", "nvtx"))
    assert len(rep.osrt) == 0
    nv = rep.nvtx
    done = int(nv.loc[nv["name"] == "done", "end_ns"].max())
    infer = nv[nv["name"] == "infer"]
    window = (int(nv.loc[nv["name"] == "prepare", "start_ns"].min()), done + 1000)  # the mark inside it
    m = WhatIf(rep, window, None)
    path = m.critical()
    last = infer[infer["start_ns"] == infer["start_ns"].max()].iloc[0]
    inside = path[(path["end_ns"] > int(last["start_ns"])) & (path["start_ns"] < int(last["end_ns"]))]
    assert set(inside["tid"]) == {int(last["global_tid"])}, path.tail()  # the worker's last infer is on the path
    on = m.path_stages().set_index("stage")["path_ms"]
    assert on["infer"] > 0.9 * infer["duration_ns"].sum() / 1e6, on


@pytest.mark.nsys
def test_a_polling_loop_a_peer_ends_waits_on_that_peer_and_one_on_a_timer_stays_latency(tmp_path):
    """Two polling loops, both naps of clock_nanosleep to nsys: the main thread polls a queue that a
    producer fills after each 'produce' (20 ms), and a watcher thread polls the clock for deadlines 13
    ms apart, which no thread sets. The main thread's loops end in the nap during which the producer
    ended a range, nearly all of them: waits on that peer. The watcher's end there only as often as
    chance puts a peer's act in a 2 ms nap: its naps stay latency, its own time."""
    from labkit.stats.blocked import blocked_intervals
    from labkit.stats.peers import peer_polls

    prog = tmp_path / "two_polls.py"
    prog.write_text(
        "import queue, threading, time\nfrom labkit import annotate\nfrom _known import cpu, produce\n"
        "q = queue.Queue()\n"
        "def watch():\n    t = time.perf_counter()\n    for k in range(1, 39):\n"
        "        while time.perf_counter() < t + 0.013 * k:\n            time.sleep(0.002)\n"
        "threading.Thread(target=produce, args=(q, 25, 20), name='producer').start()\n"
        "threading.Thread(target=watch, name='watcher').start()\n"
        "for _ in range(25):\n    while True:\n        try:\n            i = q.get_nowait()\n            break\n"
        "        except queue.Empty:\n            time.sleep(0.001)\n"
        "    with annotate.range('consume', batch=i, items=1):\n        cpu(3)\n")
    rep = _profile_inline(prog, tmp_path, ("cuda", "nvtx", "osrt"))
    o = rep.osrt
    naps = o[o["name"].astype(str).str.contains("sleep")]
    by = naps.groupby("global_tid")["duration_ns"].agg(["count", "median"])
    main = int(by.index[(by["median"] < 1.5e6) & (by["count"] > 100)][0])  # 1 ms naps, hundreds of them
    watcher = int(by.index[(by["median"] > 1.5e6) & (by["count"] > 100)][0])  # 2 ms naps
    peer = set(peer_polls(rep))
    mine, theirs = naps[naps["global_tid"] == main], naps[naps["global_tid"] == watcher]
    held = mine["duration_ns"].where(mine.index.isin(peer), 0).sum() / mine["duration_ns"].sum()
    assert held > 0.8, held  # of the nap time (a count of naps read 0.80-0.9: the first naps come and go)
    assert not theirs.index.isin(peer).any()
    lat = blocked_intervals(rep, kind="latency")
    watcher_lat = int((lat[watcher][1] - lat[watcher][0]).sum())
    assert watcher_lat >= 0.95 * theirs["duration_ns"].sum()
    main_lat = int((lat[main][1] - lat[main][0]).sum()) if main in lat else 0
    assert main_lat < 0.2 * mine["duration_ns"].sum(), (main_lat, mine["duration_ns"].sum())


@pytest.mark.parametrize("case,loop_ms", [("gil", 14), ("split", 9.6)])
def test_a_loaded_machines_polling_loops_still_wait_on_the_producer(case, loop_ms):
    """poll_consumer profiled on the 2-core VM under load (tests/fixtures/README.md, known_loaded/). In
    'gil' the check after a loop's last nap waited 2.5 ms for the GIL while the producer ended its
    range; in 'split' a check descheduled for 0.8 ms cut a 17 ms loop in two, and only the second half
    ended at the producer's act. Each time one loop (14 ms, 9.6 ms) had read as the consumer's latency,
    its own time. Every loop of the consumer waits on the producer: its naps are peer waits, all but
    those outside any loop (single naps: tens of us, and in 'gil' one of 1 ms after a consume range
    stretched to 15 ms)."""
    from labkit.stats.calls import SLEEP_OSRT
    from labkit.stats.peers import peer_polls

    rep = labkit.load_report(Path(__file__).resolve().parent / "fixtures" / "known_loaded" /
                             f"poll_consumer_{case}.nsys2022.4.sqlite")
    o = rep.osrt
    naps = o[o["name"].astype(str).str.match(SLEEP_OSRT)]
    mine = naps[naps["global_tid"] == naps["global_tid"].value_counts().index[0]]
    left = mine.loc[~mine.index.isin(peer_polls(rep)), "duration_ns"]
    assert left.sum() < 0.15 * loop_ms * 1e6, left.sort_values().tail(3)  # 1.1 and 0.07 ms (15.2 and 9.7)


def test_one_loop_a_peer_happened_to_end_tells_nothing():
    """The polling test's watcher once read as a peer wait on a fresh clone's CI run: its naps were one
    loop (nothing it did split them), and a producer's range happened to end in its last nap; one of
    one is 'most', and over a chance of 0.3. A thread's waits are its peers' only where chance cannot
    explain how many a peer ended (labkit.stats.peers.POLL_P)."""
    import numpy as np

    from labkit.stats.peers import _ended_by_peers

    acts = np.arange(0, 1_000_000_000, 20_000_000, dtype=np.int64)  # a peer acting every 20 ms for 1 s
    one = _ended_by_peers(acts, np.array([499_000_000]), np.array([501_000_000]), (0, 1_000_000_000))
    assert not one.any()  # 1 of 1 ended: chance (a 2 ms window, 10 %) explains it
    lo = acts[5:30] - 1_000_000  # 25 loops, each ending within 1 ms of an act: no chance does that
    assert _ended_by_peers(acts, lo, lo + 2_000_000, (0, 1_000_000_000)).all()


def test_a_wait_no_call_names_is_seen_in_the_context_switches(tmp_path):
    """timed_wait, recorded with context switches (tests/fixtures/README.md): its consumer takes items
    with queue.get(timeout=0.05), which blocks in sem_clockwait, a call the OS runtime trace of nsys
    2022.4 does not record. Off its CPU between its ranges in no traced call, the consumer waited
    (untraced_waits): the producer limits, and a cheaper 'produce' is a bound the fix (12 -> 4 ms) did
    not exceed. The same export without its context switches (SCHED_EVENTS dropped): the wait is an
    untraced gap between the consumer's ranges, and the producer's hand-over ends nearly every one
    (peer_gaps): the same verdict, read from the gaps instead of the switches."""
    import shutil
    import sqlite3

    from labkit.stats.blocked import untraced_waits
    from labkit.stats.peers import peer_gaps

    rec = json.loads((ka.SWITCHES_RECORDED / "known_answers.jsonl").read_text().splitlines()[0])
    prog = ka.PROGRAMS[rec["program"]]
    path = ka.SWITCHES_RECORDED / rec["profile"]
    rep = labkit.load_report(path)
    off = rep.offcpu
    assert len(off) and (off["end_ns"] > off["start_ns"]).all()
    for _, d in off.groupby("global_tid"):  # one thread is off its CPU once at a time
        d = d.sort_values("start_ns")
        assert (d["start_ns"].to_numpy()[1:] >= d["end_ns"].to_numpy()[:-1]).all()
    judged = ka.judge(prog, rep)
    row = ka.verdict(prog, judged, {"speedup": rec["measured_x"], "noise": rec["noise"]})
    assert row["passed"] and row["fix_rank"] == 1 and row["basis"] == "bound", row
    assert not ka.amdahl_violations(judged["advice"])
    main = int(rep.nvtx.loc[rep.nvtx["name"] == "consume", "global_tid"].iloc[0])
    waited = untraced_waits(rep)[main]
    assert (waited[1] - waited[0]).sum() / 1e6 > 200  # of ~290 ms off its CPU between its 'consume's
    bare = tmp_path / "timed_wait.noswitches.sqlite"
    shutil.copy(path, bare)
    with sqlite3.connect(bare) as db:
        db.execute("DROP TABLE SCHED_EVENTS")
    plain = labkit.load_report(bare)
    assert len(plain.offcpu) == 0
    gaps = peer_gaps(plain)
    assert set(gaps) == {main}  # the producer's gaps end on its own clock (its ranges start after a put)
    assert (gaps[main][1] - gaps[main][0]).sum() / 1e6 > 200
    assert set(untraced_waits(plain)) == {main} and (untraced_waits(plain)[main][0] == gaps[main][0]).all()
    judged = ka.judge(prog, plain)
    row = ka.verdict(prog, judged, {"speedup": rec["measured_x"], "noise": rec["noise"]})
    assert row["passed"] and row["fix_rank"] == 1 and row["basis"] == "bound", row
    assert not ka.amdahl_violations(judged["advice"])


@pytest.mark.nsys
def test_untraced_work_between_ranges_stays_a_threads_own_time(tmp_path):
    """The untraced gaps of a thread that computes between its ranges end on its own clock: the main
    thread computes 7 ms unannotated and then 'consume's 4 ms, while a producer ends a 'produce' range
    every 12 ms and hands each item over (which no one waits for). The main thread's gaps end within
    1 ms of a producer's act only as often as chance does (their periods differ by 1 ms), so none is
    a wait (peer_gaps): the 7 ms stay the main thread's own time."""
    from labkit.judge.whatif import WhatIf
    from labkit.stats.peers import peer_gaps

    prog = tmp_path / "own_clock.py"
    prog.write_text(
        "import queue, threading\nfrom labkit import annotate\nfrom _known import cpu, produce\n"
        "q = queue.Queue()\n"
        "threading.Thread(target=produce, args=(q, 36, 12), name='producer').start()\n"
        "for i in range(40):\n    cpu(7)\n"
        "    with annotate.range('consume', batch=i, items=1):\n        cpu(4)\n")
    rep = _profile_inline(prog, tmp_path, ("cuda", "nvtx", "osrt"))
    nv = rep.nvtx
    main = int(nv.loc[nv["name"] == "consume", "global_tid"].iloc[0])
    assert main not in peer_gaps(rep)
    model = WhatIf(rep, (int(nv["start_ns"].min()), int(nv["end_ns"].max())), None)
    own = model.threads.set_index("tid")["own_ms"]
    assert own[main] > 1.5 * nv.loc[nv["name"] == "consume", "duration_ns"].sum() / 1e6, own  # 11 ms a step, not 4


@pytest.mark.nsys
def test_time_outside_the_ranges_is_named_though_the_window_holds_no_os_call(tmp_path):
    """unannotated_work computes 20 ms outside any range per item, making almost no OS runtime call there
    (hashing releases the GIL, and nsys keeps a pthread_cond_signal of it only when one took over its 1 us
    threshold: 9 to 20 of 39 windows held one in four runs here, more on a busy machine): a window
    between two 'consume' ranges with no OS runtime row, yet the run was traced with osrt, so
    that time is the thread's own (the window's rows decided it, and the steady window of a run whose
    loop makes no call read 'balanced, nothing to find'); advise names it and so does the bottleneck
    sentence. A report traced without osrt gets no such finding: its untraced time may be any wait."""
    from labkit.judge.whatif import WhatIf
    from labkit.report.window import restrict
    from labkit.stats.calls import osrt_traced

    rep = ka.profile("unannotated_work", tmp_path)
    c = rep.nvtx[rep.nvtx["name"] == "consume"].sort_values("start_ns")
    calls = np.sort(rep.osrt["start_ns"].to_numpy())
    # two consecutive items, from one 'consume' range's start to the next one's end, with no call in them
    pairs = [(int(s), int(e)) for s, e in zip(c["start_ns"].iloc[:-1], c["end_ns"].iloc[1:])
             if np.searchsorted(calls, e) == np.searchsorted(calls, s)]
    assert pairs, "every window between two items held an OS runtime call"
    w = pairs[len(pairs) // 2]
    two = restrict(rep, window=w)
    assert len(two.osrt) == 0 and osrt_traced(two)
    main = int(c["global_tid"].iloc[0])
    own = WhatIf(two, w, ("consume",)).threads.set_index("tid")["own_ms"]
    assert own[main] > 0.9 * (w[1] - w[0]) / 1e6, own  # 30 ms: the 20 ms between the ranges too, not 10
    top = labkit.advise(rep).iloc[0]
    assert top["rule"] == "outside_ranges" and top["stage"] is None and top["basis"] == "bound", top
    b = str(labkit.bottleneck(rep))
    assert "between its ranges" in b and "traced no range" in b, b
    bare = labkit.load_report(Path(__file__).resolve().parent / "fixtures" / "cpu_threads.nsys2022.4.sqlite")
    assert not osrt_traced(bare) and "outside_ranges" not in set(labkit.advise(bare)["rule"])


def test_a_pools_workers_asleep_in_their_work_release_no_one():
    """fed_pool as profiled in a CI run (tests/fixtures/README.md, known_paths/): the critical path,
    walked back, went from each worker's wait for an item to another worker asleep in its 'work', and
    held the workers for most of the window, so a cheaper 'produce' read as a 1.22x bound that the fix
    exceeded (1.954x measured there). A thread in the middle of a sleep released no one: the path runs
    through the feeder's 'produce', and the bound holds."""
    from labkit.judge.whatif import WhatIf

    rep = labkit.load_report(Path(__file__).resolve().parent / "fixtures" / "known_paths" / "fed_pool.ci.nsys2022.4.sqlite")
    a = labkit.advise(rep)
    on = WhatIf(rep, a.attrs["window"], a.attrs["stages"]).path_stages().set_index("stage")["path_ms"]
    produce = rep.nvtx[rep.nvtx["name"] == "produce"]
    inside = produce[(produce["start_ns"] >= a.attrs["window"][0]) & (produce["end_ns"] <= a.attrs["window"][1])]
    assert on["produce"] > 0.8 * inside["duration_ns"].sum() / 1e6, on  # 383 of 402 ms (79 before)
    top = a.iloc[0]
    assert top["stage"] == "produce" and top["basis"] == "bound" and top["predicted_speedup"] * ka.BOUND_SLACK >= 1.954


@pytest.mark.nsys
def test_a_thread_busy_under_half_the_window_is_not_called_the_bound(tmp_path):
    """The main thread prepares (10 ms, a range) and then waits for a child process that has no ranges
    (it sleeps 150 ms): no thread with ranges was busy most of the window, and the bottleneck sentence
    says so instead of naming 'prepare' as what bound throughput."""
    prog = tmp_path / "waits_on_child.py"
    prog.write_text(
        "import subprocess, sys\nfrom labkit import annotate\nfrom _known import cpu\n"
        "for i in range(4):\n"
        "    with annotate.range('prepare', batch=i, items=1):\n        cpu(10)\n"
        "    subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.15)'], check=True)\n")
    rep = _profile_inline(prog, tmp_path, ("cuda", "nvtx", "osrt"))
    b = labkit.bottleneck(rep)
    assert b.thread_busy_frac < 0.5, b
    assert "bound throughput" not in str(b) and "No thread or engine was busy most" in str(b), str(b)


@pytest.mark.nsys
@pytest.mark.slow
def test_a_process_per_item_is_a_chain_and_the_tracings_markers_are_no_thread(tmp_path):
    """child_per_item (a child process per item, waited for): nsys marks the start and end of its OS
    runtime tracing in each child on the child's thread 0, which runs nothing; read as a thread, each
    was busy for the child's whole life, a rival 'limiting thread'. They are not threads of the model,
    and no finding is about a thread that lives for one item: the chain is."""
    from labkit.judge.evidence import Evidence
    from labkit.report.window import restrict

    rep = ka.profile("child_per_item", tmp_path)
    o = rep.osrt
    markers = o[o["event_class"] != 27]
    assert markers["pid"].nunique() > 4 and (markers["tid"] == 0).all()
    a = labkit.advise(rep)
    assert a["rule"].iloc[0] == "chain" and a["lever"].iloc[0] == "in_flight", a
    # beside it, at most the main thread's own stages: 'prepare' (10 ms of each item's ~100 ms) on a
    # thread of its own overlaps the children, 1.05x to 1.08x by how fast interpreters start here, so
    # it is a finding in some runs and under the threshold in others; and the children's 'compute'
    # (40 ms an item, about a third of the critical path, under a quarter where interpreters start
    # slowly) taking no time, a bound over all of them (on_path), not a finding about one child
    assert set(a["rule"].iloc[1:]) <= {"serial_stages", "on_path"}, a
    assert set(a["stage"].iloc[1:].dropna()) <= {"run_child", "prepare", "compute"}, a
    assert set(a.loc[a["rule"] == "on_path", "stage"]) <= {"compute"}, a
    ev = Evidence(restrict(rep, window=a.attrs["window"]), a.attrs["stages"], "", 0, None)
    assert not [g for g in ev.model.threads["tid"] if int(g) & 0xFFFFFF == 0]


@pytest.mark.nsys
def test_the_overlap_estimate_says_what_the_gil_leaves_of_it(tmp_path):
    """Threads of one Python process take turns on its GIL in Python code. serial_stages' two stages
    do nothing but work: if that work held the GIL (it hashes, which releases it), threads would
    gain nothing, and the finding says 1.00x beside its estimate. map_then_reduce's kept stage waits
    on a pool's process for longer than the moved stage works: the moved work fits in that wait, so
    the GIL leaves the whole estimate."""
    def figures(name):
        # the pool's worker not followed (labkit follows forks now, and the worker, traced, is the
        # thread with the most own time: the finding is then made on the main thread, whose stages
        # hold the window; what the GIL leaves of an estimate is what this test holds)
        a = ka.judge(name, ka.profile(name, tmp_path / name, follow_forks=False))["advice"]
        r = a[a["rule"] == "serial_stages"].iloc[0]
        turns = re.search(r"the gain would be ([0-9.]+)x", r["assumptions"])
        assert turns, r["assumptions"]
        return r["predicted_speedup"], float(turns.group(1))

    est, turns = figures("serial_stages")
    assert est > 1.4 and turns == 1.0
    est, turns = figures("map_then_reduce")
    assert est > 1.3 and turns == pytest.approx(est, abs=0.01)


@pytest.mark.nsys
def test_turns_get_the_release_lock_estimate_whether_or_not_a_thread_limits(tmp_path, monkeypatch):
    """lock_over_io's two writers are within 8 % of each other in the steady window (13 and 14 writes):
    near the 10 % at which one of them counts as the limiting thread. The lock's estimate must not
    hang on which side of it they fall; only the cheaper-stage bound of the turns does."""
    from labkit.judge import rules

    rep = ka.profile("lock_over_io", tmp_path)
    before = labkit.advise(rep)
    lock = before[before["lever"] == "release_lock"]
    assert len(lock) == 1 and lock["rule"].iloc[0] == "taking_turns"
    monkeypatch.setattr(rules, "BALANCED", 1.0)  # the busier writer now limits the run
    after = labkit.advise(rep)
    assert not ((after["rule"] == "on_path") & (after["stage"] == "write")).any()
    again = after[after["lever"] == "release_lock"]
    assert len(again) == 1
    assert again["predicted_speedup"].iloc[0] == pytest.approx(lock["predicted_speedup"].iloc[0], rel=1e-9)


RECORDED = Path(__file__).resolve().parent / "fixtures" / "known_gpu"
"""The GPU known answers as recorded on an H200 (tests/fixtures/README.md): the slow variant's
profile and the speed-up its fix measured there, judged again here by today's labkit."""


def _recorded():
    return [json.loads(line) for line in (RECORDED / "known_answers.h200.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("rec", _recorded(), ids=lambda r: "-".join([r["program"]] + [a.strip("-") for a in r["args"]]))
def test_the_gpu_known_answers_recorded_on_an_h200(rec):
    """Pageable copies: pinned, they move at the link's rate (50 GB/s assumed for a Hopper), and the
    estimate lands within 25 % of what the fix measured (it had been no finding: the copies were assumed
    to keep their copy-engine time). A sync per step: removing it saves at most the time waited in it,
    a bound the fix does not exceed. Tiny launches: no finding may call itself a bound below the
    measured speed-up (the launch calls alone once promised a 1.74x 'bound'); the launch model
    (labkit.judge.launches) is within 25 % at 50 adds a step (31x against 29x) and at 500 (314x against
    346x), where it had been 128x while it kept each step's cold edges and the trace's interruptions
    as recorded (tests/fixtures/README.md)."""
    prog = ka.PROGRAMS[rec["program"]]
    rep = labkit.load_report(RECORDED / rec["profile"])
    judged = ka.judge(prog, rep)
    adv, meas = judged["advice"], rec["measured_x"]
    row = ka.verdict(prog, judged, {"speedup": meas, "noise": rec["noise"]})
    assert not judged["errors"] and not ka.amdahl_violations(adv), row
    fix = ka.fix_finding(prog, adv)
    assert fix is not None, row
    levers = adv[adv["lever"].isin(prog.levers)]
    exceeded = levers[levers["basis"].eq("bound") & (levers["predicted_speedup"] * ka.BOUND_SLACK < meas)]
    assert exceeded.empty, row
    if rec["program"] == "gpu_pageable":
        assert row["passed"] and row["fix_rank"] == 1 and fix["basis"] == "estimate", row
        assert "50 GB/s" in fix["assumptions"] and "H200" in fix["assumptions"]
    elif rec["program"] == "gpu_sync":
        assert row["passed"] and fix["basis"] == "bound", row
    else:  # the launch model: a step keeps its work around its launches and pays one launch a kernel and shape
        assert row["fix_rank"] == 1 and fix["lever"] == "batch" and fix["basis"] == "estimate", row
        assert row["passed"], row
        graphs = adv[adv["lever"] == "cuda_graphs"].iloc[0]  # a graph keeps the kernels' times: the SMs' time bounds it
        sm_ms = account(rep, window=adv.attrs["window"]).sm_ms
        assert graphs["predicted_speedup"] == pytest.approx(float(graphs["window_ms"]) / sm_ms, rel=0.01)


@pytest.mark.nsys
def test_a_thread_started_per_item_is_named_where_no_thread_is_busy_most(tmp_path):
    """thread_per_item starts a thread per item that infers (32 ms) and joins it: the main thread, the
    busiest, prepares a third of the time. The stage its short-lived threads run one after another is
    the bound, a cheaper one shortens the path (on_path), and it is no lock the threads take in turn;
    the bottleneck had said the run waited on work its ranges do not show."""
    rep = ka.profile("thread_per_item", tmp_path)
    a = labkit.advise(rep)
    top = a.iloc[0]
    assert (top["rule"], top["stage"], top["basis"]) == ("on_path", "infer", "bound"), top
    assert "taking_turns" not in set(a["rule"])
    b = labkit.bottleneck(rep)
    assert b.stage == "infer" and b.thread is None, b
    assert "one after another, each short-lived" in str(b) and "do not show" not in str(b), b


@pytest.mark.nsys
def test_threads_ready_beyond_the_cores_make_a_cheaper_stage_an_estimate(tmp_path):
    """threads_over_cores starts four threads per batch that infer at once, and joins them. Where the
    profiled machine has fewer cores than the four and the main thread (the 2-core VM), the threads
    wait for a core much of the window, and the main thread's thread starts with them: a cheaper
    'infer' frees the cores too, and its finding is an estimate (2.06x read as a bound where the fix
    measured 2.26x). With a core for every thread it stays a bound."""
    from labkit.judge.accounting import account

    rep = ka.profile("threads_over_cores", tmp_path)
    a = labkit.advise(rep)
    acc = account(rep, window=a.attrs["window"])
    fix = ka.fix_finding(ka.PROGRAMS["threads_over_cores"], a)
    assert fix is not None, a[["rule", "stage", "lever"]]
    if acc.cores < 5:
        # how long more threads were ready than cores moves with the machine's load (16 % to over 20 % of
        # the window on the 2-core VM): the rule needs some, against the change's gain, not a share
        assert acc.oversubscribed_ms > 0, (acc.oversubscribed_ms, acc.window_ms)
        assert fix["basis"] == "estimate" and f"{acc.cores} cores" in fix["assumptions"], fix
    else:
        assert fix["basis"] == "bound", (acc.oversubscribed_ms, fix)


def _with_loader(program: str, stage: str, tmp_path):
    """A program fed by a loader process (``_known.loaded``), profiled: its advice, its what-if model,
    the main thread (the one running ``stage``) and the loader's thread, which works most of the window."""
    from labkit.judge.whatif import WhatIf
    from labkit.report.reader import pid_of

    rep = ka.profile(program, tmp_path)
    a = labkit.advise(rep)
    m = WhatIf(rep, a.attrs["window"], a.attrs["stages"])
    main = int(rep.nvtx.loc[rep.nvtx["name"] == stage, "global_tid"].iloc[0])
    own = m.threads.set_index("tid")["own_ms"]
    span = (m.window[1] - m.window[0]) / 1e6
    loader = [h for h in m.helpers if pid_of(h) != pid_of(main) and own[h] > 0.5 * span]
    assert len(loader) == 1, m.threads
    return a, m, main, loader[0]


@pytest.mark.nsys
def test_a_loader_process_works_on_its_own_not_for_the_stage_it_overlaps(tmp_path):
    """loader_process: a spawned loader without ranges prepares items (20 ms each) while the main
    process runs 'forward' (15 ms) and 'backward' (10 ms). The loader's time inside forward's ranges is
    no work of forward's (it is another process, not a pool inside the call), so a free 'forward'
    leaves the loader its time and predicts what it then limits to (25/20 = 1.25x by construction),
    where counting it with forward had said 2.56x."""
    a, m, main, loader = _with_loader("loader_process", "forward", tmp_path)
    assert loader not in m.helper_ms(main, ["forward"])
    fix = ka.fix_finding(ka.PROGRAMS["loader_process"], a)
    assert fix is not None and 1.05 < fix["predicted_speedup"] < 1.6, a[["rule", "stage", "predicted_speedup"]]


@pytest.mark.nsys
def test_a_repeated_range_without_the_mark_is_a_stage_and_the_window_holds_whole_periods(tmp_path):
    """checkpoint's steps carry labkit's items mark and its checkpoint (every tenth step) does not: the
    checkpoint is a stage too, and the steady window, set by the checkpoints (the most time), runs
    from the end of the first to the end of the last, five whole periods."""
    from labkit.judge.accounting import steady_window_of

    rep = ka.profile("checkpoint", tmp_path)
    stages, how = labkit.choose_stages(rep)
    assert stages == ("step", "checkpoint") and "checkpoint" in how, (stages, how)
    (w0, w1), _ = steady_window_of(rep)
    cp = rep.nvtx[rep.nvtx["name"] == "checkpoint"].sort_values("start_ns")
    assert (w0, w1) == (int(cp["end_ns"].iloc[0]), int(cp["end_ns"].iloc[-1]))
    steps = rep.nvtx[(rep.nvtx["name"] == "step") & (rep.nvtx["start_ns"] >= w0) & (rep.nvtx["end_ns"] <= w1)]
    assert len(steps) == 50


@pytest.mark.nsys
def test_a_lone_stage_is_a_finding_where_other_work_would_then_limit(tmp_path):
    """lone_stage: 'consume' (15 ms) is the main process's only stage, fed by a loader process (10 ms
    an item, no ranges). The loader's time, though it lies inside consume's ranges, is a limit of its
    own (another process, no pool inside the call), and it is what a free 'consume' stops at: 1.5x by
    construction. Before, a lone stage 'dominated nothing' and the run had no finding at all."""
    a, m, _, loader = _with_loader("lone_stage", "consume", tmp_path)
    span = (m.window[1] - m.window[0]) / 1e6
    assert m.independent_ms()[loader] > 0.5 * span, m.independent_ms()  # its own limit, not consume's work
    fix = ka.fix_finding(ka.PROGRAMS["lone_stage"], a)
    assert fix is not None and fix["rule"] == "dominant_stage", a[["rule", "stage", "predicted_speedup"]]
    assert "only stage" in fix["evidence"] and "another process" in fix["evidence"], fix["evidence"]
    assert 1.1 < fix["predicted_speedup"] < 1.8, fix


def test_a_lone_stage_with_nothing_beside_it_is_the_program_not_a_finding():
    """A test report whose one thread runs 'step' ranges inside one 'run' and nothing else: making 'step' cheaper
    is making the program cheaper, and a 'bound' of several hundred x on it is no news, so no stage
    finding is made (rules.LONE_NEXT); the same rule gives lone_stage's loader-fed 'consume' one."""
    rep = labkit.load_report(ka.ROOT / "tests" / "fixtures" / "repeats_10ms_1.nsys2022.4.sqlite")
    a = labkit.advise(rep)
    ranges = rep.nvtx[rep.nvtx["kind"] != "mark"]
    assert set(ranges["name"]) == {"run", "step"} and ranges["global_tid"].nunique() == 1, ranges  # steps in a run
    assert not a["rule"].isin(["dominant_stage", "skip_work"]).any(), a[["rule", "stage", "predicted_speedup"]]


LOCKS = Path(__file__).parent / "fixtures" / "known_locks"


@pytest.mark.parametrize("rec", [json.loads(ln) for ln in (LOCKS / "known_answers.jsonl").read_text().splitlines()],
                         ids=lambda r: r["program"])
def test_a_lock_close_behind_the_limiter_caps_the_finding_as_an_estimate(rec):
    """Threads that fetch (the limiter) and then take one lock for their next stage: a cheaper 'fetch'
    is no bound (it read 3.5x 'bound' against 1.33x measured): the held stage is found from the lock
    waits that end where it begins, the fetch finding is an estimate capped at window / held time and
    says so, and the recorded profile passes against its fix's measured speed-up."""
    from labkit.judge import serialized
    from labkit.judge.evidence import Evidence

    prog = ka.PROGRAMS[rec["program"]]
    rep = labkit.load_report(LOCKS / rec["profile"])
    judged = ka.judge(prog, rep)
    row = ka.verdict(prog, judged, {"speedup": rec["measured_x"], "noise": rec["noise"]})
    assert row["passed"] and row["basis"] == "estimate", row
    adv = judged["advice"]
    fetch = adv[(adv["stage"] == "fetch") & (adv["lever"] == "cheaper_stage")].iloc[0]
    held = "write" if prog.name == "lock_behind_fetch" else "encode"
    assert f"'{held}' runs under a lock" in fetch["assumptions"] and "not a bound" in fetch["assumptions"]
    assert (adv[adv["stage"] == "fetch"]["basis"] == "estimate").all()
    ranges = rep.nvtx[rep.nvtx["name"] == held]
    h = serialized.held_stage(Evidence(rep, ("fetch", held), "", 0, None))
    assert h.stage == held and h.threads == ranges["global_tid"].nunique() and h.waits >= 3
    w0, w1 = adv.attrs["window"]  # the held stage's time in advise's window: no finding outpaces it
    held_ms = float((ranges["end_ns"].clip(w0, w1) - ranges["start_ns"].clip(w0, w1)).sum()) / 1e6
    assert fetch["predicted_speedup"] <= fetch["window_ms"] / held_ms * 1.01
