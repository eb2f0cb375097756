"""scripts/record_reference.py: the reference recorded in budgeted calls, rehearsed on CPU.

Two calls in a row in small mode, as on the device machine: each in a new work folder (a fresh
machine), the second restoring the first's state from the tarballs it wrote, ending with a
complete reference folder. Real parts only: the lab's steps run the application under nsys.
"""
from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from labkit.bench.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "record_reference.py"


def driver(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=900)


def _ledger(out: Path, tmp: Path, machine: str) -> list[dict]:
    with tarfile.open(out / "reference.tgz") as tar:
        tar.extractall(tmp, filter="data")
    return list(Ledger(tmp / machine / "ledger.jsonl").rows())


@pytest.mark.minutes(5)
@pytest.mark.nsys
@pytest.mark.slow
def test_two_budgeted_calls_resume_and_complete_the_reference(tmp_path):
    state, here = tmp_path / "state", tmp_path / "here"
    assert driver("prepare", "--state-dir", state).returncode == 0
    commit = json.loads((state / "commit.json").read_text())["commit"]
    common = ["--mode", "small", "--model", "cpu", "--machine", "cpu-rehearsal", "--steps", "baseline,queues,fp16",
              "--state-dir", state]

    # Call 1: a budget of 1 s runs exactly one step (alone over any budget: a call of its own), then writes its state.
    first = driver("run", "--budget", 1, "--out", tmp_path / "out1", "--work", tmp_path / "work1", *common)
    assert first.returncode == 0, first.stderr
    log1 = (tmp_path / "out1" / "record.log").read_text()
    assert "baseline: ok" in log1 and "queues:" not in log1.replace("stopping before queues", "")
    assert log1.rstrip().endswith("2 of 3 steps remain: make another call with this state")
    assert (tmp_path / "out1" / "state.tgz").stat().st_size <= 16 * 2**20
    assert (tmp_path / "out1" / "keep.tgz").stat().st_size <= 16 * 2**20
    with tarfile.open(tmp_path / "out1" / "state.tgz") as tar:
        assert not [n for n in tar.getnames() if n.startswith("data")]  # the clip never travels: made from its seed
    fetched = driver("fetch", tmp_path / "out1", "--state-dir", state, "--dest", here, "--gpu-dir", tmp_path / "gpu")
    assert fetched.returncode == 0, fetched.stderr
    # the state travels back; the kept reports stay here, beside it (the machine needs none of them)
    assert (state / "state.tgz").exists() and not (state / "keep.tgz").exists()
    assert (tmp_path / "state-kept" / "keep-1.tgz").exists() and "next call carries" in fetched.stdout
    assert (here / "cpu-rehearsal" / "provenance.json").exists()
    # the state beside the folder, caches left out: what a later session resumes from once the ignored
    # state folder is gone with its machine
    with tarfile.open(here / "cpu-rehearsal" / "record-state.tgz") as tar:
        assert "progress.json" in tar.getnames() and not [n for n in tar.getnames() if n.startswith("cache")]
    later = tmp_path / "later"
    resumed = driver("prepare", "--state-dir", later, "--resume", here / "cpu-rehearsal")
    assert resumed.returncode == 0 and "record-state.tgz" in resumed.stdout, resumed.stderr
    again = driver("prepare", "--state-dir", later, "--resume", here / "cpu-rehearsal")
    assert again.returncode == 1 and "already holds" in again.stderr  # nothing replaced
    common[common.index("--state-dir") + 1] = later

    # Call 2, on a "fresh machine" (a new work folder), in a later session: resumes, never reruns the baseline.
    second = driver("run", "--budget", 600, "--out", tmp_path / "out2", "--work", tmp_path / "work2", *common)
    assert second.returncode == 0, second.stderr
    log2 = (tmp_path / "out2" / "record.log").read_text()
    assert "state restored" in log2 and "baseline:" not in log2
    assert log2.rstrip().endswith("complete: every step has a ledger row")
    # each call reports the plan's model against what it measured (the CPU model: labbook.record_plan.cpu)
    for log in (log1, log2):
        line = next(x for x in log.splitlines() if "min, measured" in x)
        modelled, measured = (float(line.split(k)[1].split()[0]) for k in ("modelled ", "measured "))
        assert modelled > 0 and measured > 0, line
    assert driver("fetch", tmp_path / "out2", "--state-dir", later, "--dest", here,
                  "--gpu-dir", tmp_path / "gpu").returncode == 0
    rows = _ledger(tmp_path / "out2", tmp_path / "ref", "cpu-rehearsal")
    # the machine's decode-only ceiling first (labbook.runs.decode_ceiling, once per machine and mode)
    assert [(r["step"], r.get("status", "ok")) for r in rows] == [("decode_ceiling", "ok"), ("baseline", "ok"),
                                                                   ("queues", "ok"), ("fp16", "skipped")]
    assert rows[0]["ceiling"] == "decode" and all(r["provenance"]["mode"] == "small" for r in rows if "provenance" in r)
    folder = here / "cpu-rehearsal"  # what the two fetches put together here
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["complete"] and prov["commit"] == commit and prov["calls"] == 2 and prov["mode"] == "small"
    assert prov["gpu"] == "cpu"
    assert [c["call"] for c in prov["call_minutes"]] == [1, 2]  # each call's minutes, the last one's too
    assert all(c["measured"] > 0 for c in prov["call_minutes"])
    assert [r["step"] for r in Ledger(folder / "ledger.jsonl").rows()] == [r["step"] for r in rows]
    # the baseline's export and timeline (call 1) and the queued run's (call 2), side by side
    assert {"doctor.txt", "baseline.sqlite", "timeline_baseline.png", "timeline_queues.png"} <= {
        p.name for p in folder.iterdir()}
    with tarfile.open(tmp_path / "state-kept" / "keep-1.tgz") as tar:  # its nsys report, kept here
        assert "baseline-kept.nsys-rep" in tar.getnames()


def test_a_step_that_never_finished_becomes_a_failed_row_and_the_call_goes_on(tmp_path):
    """A step started in two calls (each killed at its limit) is not tried a third time."""
    work = tmp_path / "work"
    (work / "reports").mkdir(parents=True)
    (work / "progress.json").write_text(json.dumps({"done": [], "attempts": {"baseline": 2}, "seconds": {}, "calls": 2}))
    res = driver("run", "--budget", 600, "--out", tmp_path / "out", "--work", work, "--mode", "small", "--model", "cpu",
                 "--machine", "cpu-rehearsal", "--steps", "baseline,fp16", "--state-dir", tmp_path / "none")
    assert res.returncode == 0, res.stderr
    rows = list(Ledger(work / "reports" / "ledger.jsonl").rows())
    assert [(r["step"], r["status"]) for r in rows] == [("baseline", "failed"), ("fp16", "skipped")]
    assert "never finished" in rows[0]["reason"]
    log = (tmp_path / "out" / "record.log").read_text()
    assert log.rstrip().endswith("complete: every step has a ledger row")
    assert (tmp_path / "out" / "state.tgz").exists() and (tmp_path / "out" / "reference.tgz").exists()


def test_unknown_step_and_missing_out_are_one_line(tmp_path):
    res = driver("run", "--budget", 1, "--out", tmp_path, "--work", tmp_path / "w", "--mode", "small", "--steps", "nope",
                 "--state-dir", tmp_path / "s")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "unknown step(s) nope" in res.stderr
    res = driver("fetch", tmp_path / "empty", "--state-dir", tmp_path / "s")
    assert res.returncode == 1 and "no state.tgz" in res.stderr


@pytest.mark.minutes(7)
@pytest.mark.nsys
@pytest.mark.slow
def test_the_plan_goes_on_to_06_and_08_resolving_each_step_when_its_turn_comes(tmp_path):
    """The steps that build on earlier rows (06's interval sweep and ``optimized``, 08's processes
    and ranks) are recorded too, each as its notebook runs it, in one call here (the knee needs three
    points: K=1, 2 and 16)."""
    assert driver("prepare", "--state-dir", tmp_path / "state").returncode == 0
    res = driver("run", "--budget", 600, "--out", tmp_path / "out", "--work", tmp_path / "work", "--mode", "small",
                 "--model", "cpu", "--machine", "cpu-rehearsal",
                 "--steps", "batch4,interval2,interval16,optimized,processes2,ranks2",
                 "--state-dir", tmp_path / "state")
    assert res.returncode == 0, res.stderr
    log = (tmp_path / "out" / "record.log").read_text()
    assert log.rstrip().endswith("complete: every step has a ledger row"), log
    rows = {r["step"]: r for r in _ledger(tmp_path / "out", tmp_path / "ref", "cpu-rehearsal")}
    assert all(rows[s].get("status", "ok") == "ok" for s in ("batch4", "interval16", "optimized", "processes2",
                                                              "ranks2")), {s: r.get("reason") for s, r in rows.items()}
    assert (rows["interval16"]["kind"], rows["interval16"]["builds_on"]) == ("sweep", "batch4")
    assert rows["interval16"]["config"]["interval"] == 16 and rows["optimized"]["kind"] == "cumulative"
    assert rows["optimized"]["builds_on"] in ("batch4", "interval2", "interval16")  # the knee's row
    # under the estimate 06 computes for it (labbook.optimize.estimate), never a finding of its base's profile
    opt = rows["optimized"]
    assert opt.get("basis") == "estimate" or opt["finding"].startswith("none: no lever taken"), opt
    start = rows["processes2"]["builds_on"]
    assert start in ("optimized", "batch4") and rows["ranks2"]["builds_on"] == start
    assert rows["ranks2"]["config"]["ranks"] == 2


def test_a_state_recorded_on_another_gpu_is_refused_in_one_line(tmp_path):
    """One reference folder holds one machine's figures: a call on another kind of machine stops."""
    work = tmp_path / "work"
    (work / "reports").mkdir(parents=True)
    (work / "progress.json").write_text(json.dumps({"done": [], "calls": 1, "gpu": "NVIDIA H200"}))
    res = driver("run", "--budget", 600, "--out", tmp_path / "out", "--work", work, "--mode", "small", "--model", "cpu",
                 "--steps", "baseline", "--state-dir", tmp_path / "none")
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0
    assert "recorded on NVIDIA H200" in res.stderr and "same kind of machine" in res.stderr
    assert not (work / "reports" / "ledger.jsonl").exists()


def test_fetch_fits_the_next_calls_carry_caches_first(tmp_path):
    """The tree, .gpu and .record travel together, at most 64 MiB: the state's caches go first, and a
    carry that still does not fit is one line naming the fix."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import record_reference as rr

    state, gpu = tmp_path / "state", tmp_path / "gpu"
    state.mkdir()
    gpu.mkdir()
    src = tmp_path / "src"
    (src / "cache" / "backends").mkdir(parents=True)
    (src / "progress.json").write_text("{}")
    (src / "cache" / "backends" / "model.onnx").write_bytes(np.random.default_rng(0).bytes(2 * 2**20))
    with tarfile.open(state / "state.tgz", "w:gz") as t:
        t.add(src / "progress.json", "progress.json")
        t.add(src / "cache", "cache")
    tree = rr._tree_bytes()
    assert tree > 10 * 2**20  # the checkout itself: the fixtures, the weights
    assert tree < rr.CARRY, f"the checkout alone is {tree / 2**20:.1f} MiB, over what the device tool sends"
    (gpu / "wheels.bin").write_bytes(b"\0" * (rr.CARRY - tree - 2**20))  # room for 1 MiB of state
    note = rr.fit_carry(state, gpu)
    assert "without its caches" in note
    with tarfile.open(state / "state.tgz") as t:
        assert t.getnames() == ["progress.json"]
    (gpu / "more.bin").write_bytes(b"\0" * 2**20)
    with pytest.raises(SystemExit, match="over the device tool's 64 MiB: carry fewer wheels"):
        rr.fit_carry(state, gpu)


def test_a_later_session_resumes_the_committed_h200_recording(tmp_path):
    """The H200 recording's ignored state was lost with its session: prepare --resume rebuilds it from
    the committed folder (its provenance and ledger), and the state keeps the GPU it was recorded on."""
    committed = ROOT / "reports" / "reference" / "h200"
    prov = json.loads((committed / "provenance.json").read_text())
    bare = tmp_path / "h200"  # the folder as 2026-11-26 left it: no record-state.tgz beside it
    shutil.copytree(committed, bare, ignore=shutil.ignore_patterns("record-state.tgz", "*.sqlite", "*.png"))
    for folder, how in ((committed, "from"), (bare, "rebuilt from")):
        state = tmp_path / f"state-{folder == bare}"
        res = driver("prepare", "--state-dir", state, "--resume", folder)
        assert res.returncode == 0 and f": {how} " in res.stdout, res.stderr
        work = tmp_path / f"work-{folder == bare}"
        with tarfile.open(state / "state.tgz") as tar:
            tar.extractall(work, filter="data")
        progress = json.loads((work / "progress.json").read_text())
        assert progress["done"] == prov["steps_done"] and progress["calls"] == prov["calls"] == 2
        assert progress["gpu"] == "NVIDIA H200"
        assert progress["seconds"]["baseline"] == prov["step_seconds"]["baseline"]
        rows = [r["step"] for r in Ledger(work / "reports" / "ledger.jsonl").rows()]
        assert rows == [r["step"] for r in Ledger(folder / "ledger.jsonl").rows()]
    # on this machine (no GPU) the call stops in one line: the folder holds the H200's figures
    res = driver("run", "--budget", 600, "--out", tmp_path / "out", "--work", tmp_path / "fresh", "--mode", "small",
                 "--model", "cpu", "--steps", "ort_int8", "--state-dir", state)
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0 and "recorded on NVIDIA H200" in res.stderr
    bad = driver("prepare", "--state-dir", tmp_path / "s2", "--resume", tmp_path)
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "holds no recording" in bad.stderr
