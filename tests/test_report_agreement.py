"""labkit's summaries against nsys's own ``stats`` output for the same real exports.

Each CSV beside a fixture was written by ``nsys stats --format csv`` (commands in
tests/fixtures/README.md). Instance counts must match exactly, times within 0.01 %.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labkit
from labkit.report.load import load_report

FIX = Path(__file__).parent / "fixtures"
REL = 1e-4  # 0.01 %
ABS = 0.11  # nsys rounds averages and deviations to 0.1 ns


def _load(name: str):
    return load_report(FIX / name)


def _close(ours, theirs) -> bool:
    ours, theirs = float(ours), float(theirs)
    return abs(ours - theirs) <= max(ABS, REL * abs(theirs))


# (export, nsys stats nvtx CSV, how the CSV names ranges)
NVTX_CASES = [
    ("cpu_threads.nsys2022.4.sqlite", "cpu_threads.nsys2022.4.nvtxsum.csv", "2022"),
    ("cpu_threads.rec.nsys2022.4.sqlite", "cpu_threads.rec.nsys2022.4.nvtxsum.csv", "2022"),
    ("annotated.nsys2022.4.sqlite", "annotated.nsys2022.4.nvtxsum.csv", "2022"),
    ("gputest.nvtx-only.nsys2022.4.sqlite", "gputest.nvtx-only.nsys2022.4.nvtxsum.csv", "2022"),
    ("gputest.nsys2025.3.sqlite", "gputest.nsys2025.3.nvtx_sum.csv", "2025"),
    ("gputest.nsys2025.3.sqlite", "gputest.nsys2025.3.stats2022.4.nvtxsum.csv", "2022"),
    # a named domain: its NvtxDomainCreate row once broke load_report under pandas 3
    ("domains.nsys2022.4.sqlite", "domains.nsys2022.4.nvtxsum.csv", "2022"),
    # the lab's own application (detect_video.py, queued, CPU) under Debian's nsys
    ("pipeline.nsys2022.4.sqlite", "pipeline.nsys2022.4.nvtxsum.csv", "2022"),
]


def _range_label(domain: str, name: str, naming: str) -> str:
    # 2022.4 prints the message alone in the default domain; 2025.3 always prefixes "domain:"
    if naming == "2025" or domain:
        return f"{domain}:{name}"
    return name


@pytest.mark.parametrize("export,csv,naming", NVTX_CASES, ids=[c[1] for c in NVTX_CASES])
def test_nvtx_summary_matches_nsys(export, csv, naming):
    ours = labkit.nvtx_summary(_load(export))
    theirs = pd.read_csv(FIX / csv)
    assert list(ours.columns[:3]) == ["name", "domain", "style"]
    labels = [_range_label(d, n, naming) for d, n in zip(ours["domain"], ours["name"])]
    assert labels == list(theirs["Range"]), "same ranges in the same order (by total time)"
    assert list(ours["style"]) == list(theirs["Style"])
    assert list(ours["instances"]) == list(theirs["Instances"])
    for col, ref in [("total_ns", "Total Time (ns)"), ("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"),
                     ("min_ns", "Min (ns)"), ("max_ns", "Max (ns)"), ("stddev_ns", "StdDev (ns)")]:
        bad = [(a, b) for a, b in zip(ours[col], theirs[ref]) if not _close(a, b)]
        assert not bad, f"{col}: {bad}"
    assert np.allclose(ours["time_pct"].round(1), theirs["Time (%)"], atol=0.051)


def _xyz(s: str) -> tuple[int, ...]:
    return tuple(int(v) for v in str(s).split())


def test_kernel_summary_by_launch_matches_gpukernsum():
    ours = labkit.kernel_summary(_load("gputest.nsys2025.3.sqlite"), by_launch=True)
    theirs = pd.read_csv(FIX / "gputest.nsys2025.3.stats2022.4.gpukernsum.csv")
    assert len(ours) == len(theirs) == 7
    key_o = [(n, _xyz(g), _xyz(b)) for n, g, b in zip(ours["name"], ours["grid"], ours["block"])]
    key_t = [(n, _xyz(g), _xyz(b)) for n, g, b in zip(theirs["Name"], theirs["GridXYZ"], theirs["BlockXYZ"])]
    assert sorted(key_o) == sorted(key_t)
    o = ours.assign(k=key_o).set_index("k")
    t = theirs.assign(k=key_t).set_index("k")
    for k in t.index:
        assert o.loc[[k], "instances"].iloc[0] == t.loc[[k], "Instances"].iloc[0]
        for col, ref in [("total_ns", "Total Time (ns)"), ("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"),
                         ("min_ns", "Min (ns)"), ("max_ns", "Max (ns)"), ("stddev_ns", "StdDev (ns)")]:
            assert _close(o.loc[[k], col].iloc[0], t.loc[[k], ref].iloc[0]), (k, col)


def test_kernel_summary_by_name_aggregates_nsys_rows():
    rep = _load("gputest.nsys2025.3.sqlite")
    ours = labkit.kernel_summary(rep).set_index("name")
    theirs = pd.read_csv(FIX / "gputest.nsys2025.3.stats2022.4.gpukernsum.csv").groupby("Name").agg(
        inst=("Instances", "sum"), total=("Total Time (ns)", "sum"), mn=("Min (ns)", "min"), mx=("Max (ns)", "max"))
    assert sorted(ours.index) == sorted(theirs.index)
    assert (ours.loc[theirs.index, "instances"] == theirs["inst"]).all()
    assert (ours.loc[theirs.index, "total_ns"] == theirs["total"]).all()
    assert (ours.loc[theirs.index, "min_ns"] == theirs["mn"]).all()
    assert (ours.loc[theirs.index, "max_ns"] == theirs["mx"]).all()
    assert ours["instances"].sum() == 352 == len(rep.kernels)
    # the fast path (ids grouped in numpy) and the frame path agree
    rep.kernels  # noqa: B018 - loads the full frame, so the next call takes the frame path
    again = labkit.kernel_summary(rep).set_index("name")
    pd.testing.assert_frame_equal(ours.sort_index(), again.sort_index())


_NSYS2022_COPY = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device",
                  "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer"}


def test_memcpy_summary_matches_gpumemtimesum():
    ours = labkit.memcpy_summary(_load("gputest.nsys2025.3.sqlite"))
    theirs = pd.read_csv(FIX / "gputest.nsys2025.3.stats2022.4.gpumemtimesum.csv")

    def modern(op: str) -> str:  # 2022.4 says "[CUDA memcpy DtoH]", 2025.3 "[CUDA memcpy Device-to-Host]"
        for old, new in _NSYS2022_COPY.items():
            op = op.replace(f"memcpy {old}]", f"memcpy {new}]")
        return op

    assert list(ours["name"]) == [modern(o) for o in theirs["Operation"]]
    assert list(ours["instances"]) == list(theirs["Count"])
    for col, ref in [("total_ns", "Total Time (ns)"), ("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"),
                     ("min_ns", "Min (ns)"), ("max_ns", "Max (ns)"), ("stddev_ns", "StdDev (ns)")]:
        assert all(_close(a, b) for a, b in zip(ours[col], theirs[ref])), col


def test_gpu_projection_matches_nvtxgpuproj_row_for_row():
    ours = labkit.gpu_projection(_load("gputest.nsys2025.3.sqlite"))
    theirs = pd.read_csv(FIX / "gputest.nsys2025.3.stats2022.4.nvtxgpuproj.csv")
    assert len(ours) == len(theirs) == 40  # batch, infer, torch_infer, d2h x 10 ('sync' launches nothing)
    o = ours.sort_values(["proj_start_ns", "start_ns"], kind="stable", ignore_index=True)
    t = theirs.sort_values(["Projected Start (ns)", "Orig Start (ns)"], kind="stable", ignore_index=True)
    assert list(o["name"]) == list(t["Name"])
    assert list(o["proj_start_ns"]) == list(t["Projected Start (ns)"])
    assert list(o["proj_duration_ns"]) == list(t["Projected Duration (ns)"])
    assert list(o["start_ns"]) == list(t["Orig Start (ns)"])
    assert list(o["duration_ns"]) == list(t["Orig Duration (ns)"])
    assert list(o["num_gpu_ops"]) == list(t["NumGPUOps"])
    assert list(o["depth"]) == list(t["Lvl"])
    assert list(o["tid"]) == list(t["TID"])


def test_gpu_projection_summary_is_consistent_with_trace():
    rep = _load("gputest.nsys2025.3.sqlite")
    trace = labkit.gpu_projection(rep)
    summ = labkit.gpu_projection_summary(rep).set_index("name")
    assert set(summ.index) == {"batch", "infer", "torch_infer", "d2h"}
    for name, g in trace.groupby("name"):
        assert summ.loc[name, "instances"] == len(g) == 10
        assert summ.loc[name, "total_ns"] == g["proj_duration_ns"].sum()
        assert summ.loc[name, "gpu_ops"] == g["num_gpu_ops"].sum()
    assert summ.loc["d2h", "gpu_ops"] == 10  # one device-to-host copy per batch


@pytest.mark.parametrize("stem", ["pipeline.nsys2022.4", "pipeline.nsys2025.3"])
def test_in_process_stage_times_agree_with_the_report(stem):
    """The application's own results (labkit.annotate's in-process times, warm-up batch left out)
    against the same ranges read from its nsys report (payload 0, the warm-up batch, left out),
    for the CPU run under nsys 2022.4 and the H100 run under nsys 2025.3."""
    rep = _load(f"{stem}.sqlite")
    doc = json.loads((FIX / f"{stem}.results.json").read_text())
    nv = rep.nvtx[(rep.nvtx["kind"] == "push_pop") & (rep.nvtx["payload"].astype("float64") >= 1)]
    for stage in ("preprocess", "infer", "postprocess", "track"):
        ours = nv.loc[nv["name"] == stage, "duration_ns"].sum() / 1e6
        theirs = doc["stage_detail"][stage]["total_ms"]
        assert ours == pytest.approx(theirs, rel=0.03, abs=0.2), stage
    table = labkit.stage_table(rep)
    assert {"preprocess", "infer", "postprocess"} <= set(table["stage"] if "stage" in table else table.index)
