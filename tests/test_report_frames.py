"""Frames and analyses of real exports: exact facts about the programs that made them."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labkit
from labkit.report.reader import (CUDA_API_COLUMNS, KERNEL_COLUMNS, MEMCPY_COLUMNS, MEMSET_COLUMNS, NVTX_COLUMNS,
                                  SUMMARY_COLUMNS, SYNC_COLUMNS)
from labkit.report.load import Report, load_report
from labkit.cli import cli_summary
from labkit.report.nvtx import _nest


FIX = Path(__file__).parent / "fixtures"


def _load(name: str) -> Report:
    return load_report(FIX / name)


@pytest.fixture(scope="module")
def gpu() -> Report:
    return _load("gputest.nsys2025.3.sqlite")


@pytest.fixture(scope="module")
def ann() -> Report:
    return _load("annotated.nsys2022.4.sqlite")


@pytest.fixture(scope="module")
def cpu() -> Report:
    return _load("cpu_threads.nsys2022.4.sqlite")


@pytest.mark.parametrize("name,version,schema", [
    ("cpu_threads.nsys2022.4.sqlite", "2022.4.2.1", "3.0.0"),  # EXPORT_META_DATA
    ("gputest.nsys2025.3.sqlite", "2025.3.2.0", "3.20.3"),  # META_DATA_EXPORT
])
def test_meta_reads_each_schema(name, version, schema):
    rep = _load(name)
    assert rep.nsys_version == version
    assert rep.meta["schema_version"] == schema
    assert rep.meta["capture_time_utc"].startswith("2026-11-22")
    assert rep.meta["duration_ns"] > 0


@pytest.mark.parametrize("name", ["cpu_threads.nsys2022.4.sqlite", "gputest.nsys2025.3.sqlite",
                                  "gputest.nvtx-only.nsys2022.4.sqlite", "annotated.nsys2022.4.sqlite"])
def test_every_frame_has_its_columns(name):
    rep = _load(name)
    for frame, cols in [("nvtx", NVTX_COLUMNS), ("kernels", KERNEL_COLUMNS), ("memcpy", MEMCPY_COLUMNS),
                        ("memset", MEMSET_COLUMNS), ("cuda_api", CUDA_API_COLUMNS), ("sync", SYNC_COLUMNS)]:
        df = getattr(rep, frame)
        assert set(cols) <= set(df.columns), frame
        for c in ("start_ns", "end_ns", "duration_ns"):
            if c in df:
                assert df[c].dtype == np.int64, (frame, c)
    for fn in ("nvtx_summary", "kernel_summary", "memcpy_summary", "gpu_projection_summary"):
        assert set(SUMMARY_COLUMNS[1:]) <= set(getattr(labkit, fn)(rep).columns)


def test_gpu_fixture_frames(gpu):
    k = gpu.kernels
    assert len(k) == 352 and len(gpu.memcpy) == 22 and len(gpu.memset) == 67 and len(gpu.cuda_api) == 2249
    assert (k["name"] == "elementwise_kernel").sum() > 0  # short names
    assert k["demangled"].astype(str).str.startswith("void at::native::elementwise_kernel").sum() > 0
    assert (k["duration_ns"] == k["end_ns"] - k["start_ns"]).all()
    assert set(gpu.memcpy["name"]) == {"[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Host]"}
    assert set(gpu.memcpy["src_kind"]) <= {"Pageable", "Pinned", "Device"}
    assert gpu.gpu.loc[0, "name"] == "NVIDIA H100 80GB HBM3" and gpu.gpu.loc[0, "sm_count"] == 132
    assert "cudaLaunchKernel" in set(gpu.cuda_api["name"])  # ABI suffix (_v7000) stripped
    assert set(gpu.sync["kind"]) <= {"Event sync", "Stream wait sync", "Stream sync", "Context sync", "Unknown"}


def test_gpu_fixture_nesting_and_payloads(gpu):
    nv = gpu.nvtx
    assert nv["kind"].eq("push_pop").all() and len(nv) == 50
    batch = nv[nv["name"] == "batch"]
    assert list(batch["payload"]) == list(range(10)) and (batch["depth"] == 0).all()
    ti = nv[nv["name"] == "torch_infer"]
    assert (ti["depth"] == 2).all()
    assert (nv.loc[ti["parent"], "name"] == "infer").all()  # torch.cuda.nvtx inside nvtx.annotate
    for child in ("infer", "sync", "d2h"):
        rows = nv[nv["name"] == child]
        assert (nv.loc[rows["parent"], "name"] == "batch").all()
    assert set(nv["thread_name"]) == {"python3"} and nv["tid"].nunique() == 1
    assert (nv["domain"] == "").all()


def test_cpu_threads_fixture(cpu):
    nv = cpu.nvtx
    assert nv["tid"].nunique() == 2
    dec = nv[nv["name"] == "decode"]
    assert list(dec["payload"]) == list(range(12)) and dec["tid"].nunique() == 1
    marks = nv[nv["kind"] == "mark"]
    assert list(marks["name"].unique()) == ["frame_done"] and len(marks) == 12
    assert (marks["parent"] == -1).all()  # marked after the batch range was popped
    pre = nv[nv["name"] == "preprocess"]
    assert (nv.loc[pre["parent"], "name"] == "batch").all() and (pre["depth"] == 1).all()
    assert dec["color"].iloc[0] == "#008000"  # nvtx "green"


def test_annotated_items_and_batches(ann):
    nv = ann.nvtx
    items = nv[(nv["kind"] == "mark") & (nv["name"] == "items")]
    assert len(items) == 6 * 4  # decode, batch, preprocess, infer per batch
    assert set(nv.loc[items["parent"], "name"]) == {"decode", "batch", "preprocess", "infer"}
    st = labkit.stage_table(ann).set_index("stage")
    assert st.loc["infer", "instances"] == 6 and st.loc["infer", "items"] == 24
    # 'wait' carries no items and says it waits: blocked time, not a stage, in the default table;
    # asked for by name it is there
    assert "wait" not in st.index
    w = labkit.stage_table(ann, ["wait"]).set_index("stage")
    assert w.loc["wait", "items"] == 0 and np.isnan(w.loc["wait", "cpu_ms_per_item"])
    assert st.loc["infer", "cpu_ms_per_item"] == pytest.approx(st.loc["infer", "cpu_ms"] / 24)
    assert 4.9 < st.loc["infer", "cpu_ms_per_instance"] < 7  # time.sleep(0.005)
    sub = labkit.stage_table(ann, ["decode", "infer"])
    assert list(sub["stage"]) == ["decode", "infer"]
    b = labkit.batches(ann, warmup=2)
    assert list(b["batch"]) == [2, 3, 4, 5] and (b["items"] == 4).all()
    assert {"decode_ms", "batch_ms", "preprocess_ms", "infer_ms"} <= set(b.columns)
    assert (b["ms_per_item"] == b["wall_ms"] / 4).all()
    assert len(labkit.batches(ann)) == 6
    assert labkit.stage_table(ann, warmup=2).set_index("stage").loc["infer", "instances"] == 4


def test_bottleneck_names_worker_infer(ann):
    b = labkit.bottleneck(ann)
    assert b.stage == "infer"
    worker = ann.nvtx.loc[ann.nvtx["name"] == "infer", "tid"].iloc[0]
    assert b.tid == worker
    assert "'infer'" in str(b) and "bound throughput" in str(b)
    assert 0.5 < b.thread_busy_frac <= 1.0


def test_gpu_utilization_and_gaps(gpu):
    u = labkit.gpu_utilization(gpu, bin_ms=50)
    assert ((u["busy_frac"] >= 0) & (u["busy_frac"] <= 1)).all()
    ops = gpu.gpu_ops()
    # SM busy is the union of kernels (and graphs); copy busy, kept apart, that of copies and memsets
    for col, kinds in (("busy_ns", ["kernel", "graph"]), ("copy_busy_ns", ["memcpy", "memset"])):
        sel = ops[ops["category"].isin(kinds)]
        s, e = sel["start_ns"].to_numpy(), sel["end_ns"].to_numpy()
        t = np.unique(np.concatenate([s, e]))
        mid = (t[:-1] + t[1:]) / 2
        covered = np.zeros(len(mid), dtype=bool)
        for a, b in zip(s, e):
            covered |= (mid > a) & (mid < b)
        assert u[col].sum() == int(np.diff(t)[covered].sum())
    gaps = labkit.gpu_idle_gaps(gpu, min_gap_ms=1.0)
    assert (gaps["duration_ns"] >= 1_000_000).all() and len(gaps) > 0
    assert gaps["duration_ns"].is_monotonic_decreasing


def test_pageable_copies(gpu):
    p = labkit.pageable_copies(gpu)
    assert len(p) > 0
    assert p["api"].str.contains("Async").all()
    assert ((p["src_kind"] == "Pageable") | (p["dst_kind"] == "Pageable")).all()


def test_no_cuda_report_has_empty_gpu_frames(cpu):
    assert len(cpu.kernels) == 0 and list(labkit.kernel_summary(cpu).columns) == SUMMARY_COLUMNS
    assert len(labkit.gpu_projection(cpu)) == 0 and len(labkit.pageable_copies(cpu)) == 0
    assert any("no CUDA tables" in w for w in cpu.notes)


@pytest.mark.parametrize("rows,depth,parent", [
    # (start, end, kind) on one thread -> depth, parent (row index after sorting by start)
    ([(0, 10, "push_pop"), (1, 4, "push_pop"), (4, 9, "push_pop")], [0, 1, 1], [-1, 0, 0]),  # adjacent siblings
    ([(0, 10, "push_pop"), (0, 5, "push_pop"), (0, 2, "push_pop")], [0, 1, 2], [-1, 0, 1]),  # same start
    ([(0, 10, "push_pop"), (3, 3, "mark"), (12, 20, "push_pop"), (15, 15, "mark")], [0, 1, 0, 1], [-1, 0, -1, 2]),
    ([(0, 5, "push_pop"), (6, 6, "mark")], [0, 0], [-1, -1]),  # mark after the range
])
def test_nest_on_hand_built_frames(rows, depth, parent):
    df = pd.DataFrame(rows, columns=["start_ns", "end_ns", "kind"]).assign(global_tid=7)
    df = df.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable", ignore_index=True)
    _nest(df)
    assert list(df["depth"]) == depth and list(df["parent"]) == parent


def test_cli_summary_csv(capsys):
    assert cli_summary([str(FIX / "cpu_threads.nsys2022.4.sqlite"), "--what", "nvtx", "--csv"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].startswith("name,domain,style,instances")
    assert "decode" in out.out and "no CUDA tables" in out.err
    assert cli_summary([str(FIX / "gputest.nsys2025.3.sqlite"), "--what", "projection"]) == 0
    assert "torch_infer" in capsys.readouterr().out


def test_cli_summary_missing_file(capsys):
    assert cli_summary(["/nonexistent/x.sqlite"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report not found" in err and "Traceback" not in err


def test_warmup_drops_nested_ranges_of_warmup_batches(gpu):
    st = labkit.stage_table(gpu, warmup=2).set_index("stage")
    # children of batches 0 and 1 carry no payload of their own but go with their batch
    assert st["instances"].to_dict() == {"batch": 8, "d2h": 8, "sync": 8, "infer": 8, "torch_infer": 8}
    assert st.loc["d2h", "gpu_ms"] > 0 and st.loc["sync", "gpu_ms"] == 0
    assert labkit.bottleneck(gpu, warmup=2).stage == "d2h"


def test_column_reads_survive_rowid_gaps_and_chunking(gpu, tmp_path, monkeypatch):
    import shutil
    import sqlite3

    from labkit.report import reader as R

    sparse = tmp_path / "sparse.sqlite"
    shutil.copyfile(FIX / "gputest.nsys2025.3.sqlite", sparse)
    sparse.chmod(0o644)
    con = sqlite3.connect(sparse)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = rowid + 4000000000000 WHERE rowid > 200")
    con.commit()
    con.close()
    pd.testing.assert_frame_equal(labkit.kernel_summary(_load(str(sparse))), labkit.kernel_summary(gpu))
    monkeypatch.setattr(R._Db, "_CHUNK", 50)  # many group_concat chunks per column
    small = _load("gputest.nsys2025.3.sqlite")
    pd.testing.assert_frame_equal(small.nvtx, gpu.nvtx)
    pd.testing.assert_frame_equal(labkit.gpu_projection(small), labkit.gpu_projection(gpu))
    pd.testing.assert_frame_equal(small.kernels, gpu.kernels)


@pytest.mark.parametrize("name", sorted(p.name for p in FIX.glob("*.sqlite")))
def test_fast_summaries_equal_the_frame_path(name, monkeypatch):
    """nvtx_summary / kernel_summary read straight from SQLite (one grouped query, one packed column)
    give the same rows as the same summaries over the loaded frames; the packed column read in
    rowid ranges on several threads (as on a large table) gives the same rows as one read."""
    def fast_summaries():
        fast = load_report(FIX / name)
        got = {"nvtx": labkit.nvtx_summary(fast), "kernels": labkit.kernel_summary(fast),
               "short": labkit.kernel_summary(fast, names="short"), "api": labkit.cuda_api_summary(fast)}
        assert "nvtx" not in fast._frames  # the fast paths loaded no frame
        assert "kernels" not in fast._frames or "CUPTI_ACTIVITY_KIND_KERNEL" not in fast._db.tables
        return got
    from labkit.report import reader as R

    got = fast_summaries()
    monkeypatch.setattr(R._Db, "PARTS_FROM", 1)  # every table of 2 rows or more in parts
    monkeypatch.setattr(os, "cpu_count", lambda: 3)  # three ranges, whatever this machine has
    in_parts = fast_summaries()
    for k in got:
        pd.testing.assert_frame_equal(in_parts[k], got[k])
    got.pop("api")
    full = load_report(FIX / name).load_all()
    want = {"nvtx": labkit.nvtx_summary(full), "kernels": labkit.kernel_summary(full),
            "short": labkit.kernel_summary(full, names="short")}
    for k in got:
        a, b = (x.sort_values(list(x.columns[:3]), ignore_index=True) for x in (got[k], want[k]))
        pd.testing.assert_frame_equal(a, b, check_dtype=False, check_categorical=False, rtol=1e-9)


def test_queries_read_at_once_fall_back_to_one_connection(tmp_path, monkeypatch):
    """Names that are not UTF-8 (a Windows capture) read on the threads of the one-pass NVTX read
    are read again on the report's own connection, as Latin-1, with the same summary as the
    grouped queries; a query that fails on a thread fails as a one-line ReportError naming its table."""
    import shutil
    import sqlite3

    from labkit.report import nvtx as reader_nvtx
    from labkit.report.reader import ReportError, _Db

    path = tmp_path / "latin.sqlite"
    shutil.copyfile(FIX / "real" / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite", path)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(x'63616688e9' AS TEXT) WHERE rowid IN "
                "(SELECT rowid FROM NVTX_EVENTS WHERE text IS NOT NULL LIMIT 3)")
    con.commit()
    con.close()
    want = labkit.nvtx_summary(load_report(path))
    assert "caf\x88\xe9" in set(want["name"])
    monkeypatch.setattr(reader_nvtx, "COLUMNS_FROM", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    got = labkit.nvtx_summary(load_report(path))
    key = ["domain", "name", "style"]
    pd.testing.assert_frame_equal(got.sort_values(key, ignore_index=True), want.sort_values(key, ignore_index=True))
    with pytest.raises(ReportError, match=r"reading NVTX_EVENTS failed .*no such column") as err:
        _Db(path).at_once(["SELECT count(*) FROM NVTX_EVENTS", "SELECT nosuch FROM NVTX_EVENTS"], "NVTX_EVENTS")
    assert "\n" not in str(err.value)


def test_queries_read_at_once_run_one_after_the_other_where_no_thread_starts(monkeypatch):
    """A process at its thread limit (a container's pids.max): Python cannot start the threads of a
    read at once (RuntimeError), and the queries run on the report's own connection instead."""
    from labkit.report import reader
    from labkit.report.reader import _Db

    class NoThreads:
        def __init__(self, *a, **k):
            raise RuntimeError("can't start new thread")

    path = FIX / "real" / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite"
    sqls = ["SELECT count(*) FROM NVTX_EVENTS", "SELECT min(start), max(end) FROM NVTX_EVENTS"]
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    want = [_Db(path).scalar_rows(q, "NVTX_EVENTS") for q in sqls]
    monkeypatch.setattr(reader, "ThreadPoolExecutor", NoThreads)
    assert _Db(path).at_once(sqls, "NVTX_EVENTS") == want and want[0][0][0] > 0
