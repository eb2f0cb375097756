"""labkit.annotate: light on import, records in-process, and agrees with what nsys records."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from labkit import annotate, env


def test_import_is_light():
    code = "import sys, labkit.annotate; print('pandas' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_records_nesting_threads_batches_and_items():
    annotate.reset()

    @annotate.ranged("work")
    def work():
        time.sleep(0.002)

    def worker():
        for i in range(3):
            with annotate.range("batch", batch=i, items=4):
                work()

    t = threading.Thread(target=worker, name="stage-thread")
    t.start()
    t.join()
    recs = annotate.records()
    assert [r.name for r in recs] == ["work", "batch"] * 3
    assert {r.thread_name for r in recs} == {"stage-thread"}
    batches = [r for r in recs if r.name == "batch"]
    assert [r.batch for r in batches] == [0, 1, 2] and all(r.items == 4 for r in batches)
    for outer, inner in zip(batches, [r for r in recs if r.name == "work"]):
        assert outer.start_ns <= inner.start_ns <= inner.end_ns <= outer.end_ns
    s = annotate.stage_summary(skip_batches=1)
    assert s["batch"]["count"] == 2 and s["batch"]["items"] == 8
    assert s["work"]["count"] == 3  # no batch index: never treated as warm-up
    assert s["batch"]["ms_per_item"] == pytest.approx(s["batch"]["total_ms"] / 8)
    annotate.reset()
    assert annotate.records() == []


def test_exceptions_still_close_the_range():
    annotate.reset()
    with pytest.raises(KeyError):
        with annotate.range("fails"):
            raise KeyError("x")
    assert [r.name for r in annotate.records()] == ["fails"]


PROGRAM = textwrap.dedent("""
    import json, sys, threading, time
    from labkit import annotate
    def stage(name, i, ms):
        with annotate.range(name, batch=i, items=2):
            time.sleep(ms / 1000)
    def decoder():
        for i in range(6):
            stage("decode", i, 15)
    t = threading.Thread(target=decoder, name="decoder"); t.start()
    for i in range(6):
        stage("infer", i, 25)
    t.join()
    json.dump([[r.name, r.start_ns, r.end_ns, r.batch, r.items, r.thread_name] for r in annotate.records()],
              open(sys.argv[1], "w"))
""")


@pytest.mark.nsys
def nsys_profile(out, *args) -> subprocess.CompletedProcess:
    """``nsys profile -t nvtx`` of this Python with ``args``, exported to SQLite; started again on
    nsys 2022.4's start-up race under load, as labkit does (``labkit.record.nsys.start_race``)."""
    from labkit.record.nsys import START_TRIES, start_race

    for _ in range(START_TRIES):
        proc = subprocess.run([env.find_nsys(), "profile", "-t", "nvtx", "--sample=none", "--cpuctxsw=none",
                               "--export=sqlite", "--force-overwrite=true", "-o", str(out), sys.executable, *args],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode == 0 or not start_race(proc.stdout + proc.stderr):
            break
    return proc


def test_in_process_times_agree_with_nsys(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    rec_path = tmp_path / "records.json"
    out = tmp_path / "prog"
    proc = nsys_profile(out, str(script), str(rec_path))
    assert proc.returncode == 0, proc.stderr
    mine = json.loads(rec_path.read_text())
    con = sqlite3.connect(f"{out}.sqlite")
    # nsys 2022.4 stores registered-looking strings in StringIds, referenced by textId.
    named = ("SELECT COALESCE(e.text, s.value) AS name, e.start, e.end, e.int64Value AS payload "
             "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId")
    rows = con.execute(f"SELECT * FROM ({named}) WHERE end IS NOT NULL AND end > start ORDER BY start").fetchall()
    marks = con.execute(f"SELECT COUNT(*), MIN(payload), MAX(payload) FROM ({named}) "
                        "WHERE name = 'items' AND (end IS NULL OR end = start)").fetchone()
    con.close()
    assert len(rows) == len(mine) == 12
    assert marks == (12, 2, 2)
    for name in ("decode", "infer"):
        theirs = sorted((r[3], r[2] - r[1]) for r in rows if r[0] == name)
        ours = sorted((m[3], m[2] - m[1]) for m in mine if m[0] == name)
        assert [b for b, _ in theirs] == [b for b, _ in ours] == list(range(6))
        total_theirs = sum(d for _, d in theirs)
        total_ours = sum(d for _, d in ours)
        assert total_ours == pytest.approx(total_theirs, rel=0.03)


PAYLOADS = textwrap.dedent("""
    from labkit import annotate
    with annotate.range("step", batch=5, items=3):
        pass
    with annotate.range("step"):  # the reused attributes must not carry batch 5 over
        pass
    with annotate.range("step", batch=6):
        pass
""")


@pytest.mark.nsys
def test_reused_attributes_carry_no_stale_payload(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PAYLOADS)
    out = tmp_path / "prog"
    proc = nsys_profile(out, str(script))
    assert proc.returncode == 0, proc.stderr
    con = sqlite3.connect(f"{out}.sqlite")
    rows = con.execute("SELECT COALESCE(e.text, s.value), e.int64Value, e.end IS NULL OR e.end = e.start "
                       "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId ORDER BY e.start").fetchall()
    con.close()
    ranges = [(name, payload) for name, payload, is_mark in rows if not is_mark]
    marks = [(name, payload) for name, payload, is_mark in rows if is_mark and name]  # not nsys's own events
    assert ranges == [("step", 5), ("step", None), ("step", 6)]
    assert marks == [("items", 3)]


def test_results_round_trip_and_validation(tmp_path):
    path = tmp_path / "r.json"
    doc = {"status": "ok", "frames": 4, "timed_frames": 2, "warmup_frames": 2, "seconds": 0.5, "fps": 4.0,
           "stages": {}, "stage_detail": {}, "latency_ms": {"p50": 1.0, "p99": 2.0}, "accuracy": {}, "config": {},
           "model": None, "output_frames": 0, "warnings": []}
    annotate.write_results(path, doc)
    back = annotate.read_results(path)
    assert back == {**doc, "schema": annotate.RESULTS_SCHEMA, "schema_version": annotate.RESULTS_SCHEMA_VERSION}
    assert annotate.is_results_file(path) and [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp left
    annotate.write_results(path, {**doc, "fps": "fast"})
    with pytest.raises(annotate.ResultsError, match=rf"^{path}: field 'fps' should be int or float or null, not str$"):
        annotate.read_results(path)
    annotate.write_results(path, {k: v for k, v in doc.items() if k != "frames"})
    with pytest.raises(annotate.ResultsError, match=r"field 'frames' is missing"):
        annotate.read_results(path)
    path.write_text('{"fps": 3}')
    with pytest.raises(annotate.ResultsError, match="not a results file"):
        annotate.read_results(path)
    assert not annotate.is_results_file(path)
    annotate.write_results(path, {"status": "failed", "error": "bad input", "config": {}})
    assert annotate.read_results(path)["error"] == "bad input"


def test_range_records_stay_bounded_over_many_ranges_and_the_summary_still_counts_every_one():
    """A long run opens several ranges a frame: memory must not grow with them (it grew by about
    120 bytes a range, gigabytes an hour), while stage_summary still counts every range and leaves
    the warm-up batches out exactly."""
    import tracemalloc

    annotate.reset()
    n = annotate.MAX_RECORDS + 20_000

    def ranges(k0, k1):
        for k in range(k0, k1):
            with annotate.range("bounded", batch=k // 4, items=2):
                pass

    tracemalloc.start()  # before the ring fills: the records it later drops are traced too
    ranges(0, n)  # the ring is full from here on
    before = tracemalloc.take_snapshot()
    ranges(n, 2 * n)
    grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert grown < 1 << 20, grown  # another 120,000 ranges: under 1 MiB more (was ~14 MB)
    assert len(annotate.records()) == annotate.MAX_RECORDS
    assert annotate.records()[-1].batch == (2 * n - 1) // 4  # the latest are the ones kept
    s = annotate.stage_summary()["bounded"]
    assert s["count"] == 2 * n and s["items"] == 4 * n
    assert annotate.stage_summary(skip_batches=10)["bounded"]["count"] == 2 * n - 40  # 10 batches of 4
    annotate.reset()
    assert annotate.stage_summary() == {} and annotate.records() == []
