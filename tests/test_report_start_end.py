"""NVTX start/end ranges (``nvtx.start_range``/``end_range``) take part in the analyses as they do in
nsys's own reports: start_end.nsys2022.4.sqlite (a real recording of tests/fixtures/start_end.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import labkit

FIX = Path(__file__).parent / "fixtures"
REP = labkit.load_report(FIX / "start_end.nsys2022.4.sqlite")


def test_nvtx_summary_equals_nsys_stats():
    ours = labkit.nvtx_summary(REP)
    theirs = pd.read_csv(FIX / "start_end.nsys2022.4.nvtxsum.csv")
    assert list(ours["name"]) == list(theirs["Range"]) and list(ours["style"]) == list(theirs["Style"])
    assert list(ours["instances"]) == list(theirs["Instances"])
    assert list(ours["total_ns"]) == list(theirs["Total Time (ns)"])


def test_stage_table_and_batches_count_start_end_ranges():
    st = labkit.stage_table(REP).set_index("stage")  # was: only 'setup' (the one push/pop range)
    assert st.loc[["load", "decode", "infer"], "instances"].tolist() == [4, 4, 4]
    assert np.isclose(st.loc["infer", "cpu_ms"], 24.437414)
    b = labkit.batches(REP, warmup=1)
    assert b["batch"].tolist() == [1, 2, 3] and {"decode_ms", "infer_ms", "load_ms"} <= set(b.columns)


def test_bottleneck_and_windows_see_start_end_ranges():
    bn = labkit.bottleneck(REP)  # was: "Only waiting ranges were found"
    assert bn.stage == "infer" and bn.tid == int(REP.nvtx.loc[REP.nvtx["name"] == "infer", "tid"].iloc[0])
    start, end = labkit.steady_window(REP, stage="infer", warmup=1, count=2)
    infer = REP.nvtx[REP.nvtx["name"] == "infer"]
    assert start < infer["start_ns"].iloc[1] < end
    assert labkit.stage_overlap(REP, ["decode", "infer"])["overlap_frac"] == 0.0
