"""labkit against nsys 2025.3's own ``stats`` of a pipeline run recorded on the H100.

``pipeline.nsys2025.3.sqlite``: ``detect_video.py`` (24 frames, batch 4, queues, GPU preprocess)
under nsys 2025.3.1 on the H100; each CSV beside it is ``nsys stats --format csv`` by the same
nsys (commands in tests/fixtures/README.md). Instance counts exact, times within 0.01 %. The
export also holds an ``NvtxDomainCreate`` row, which once made ``load_report`` fail under pandas 3.
"""
from __future__ import annotations
from pathlib import Path

import pandas as pd
import pytest

import labkit
from labkit.report.load import load_report

FIX = Path(__file__).parent / "fixtures"
STEM = "pipeline.nsys2025.3"
REL, ABS = 1e-4, 0.11
STATS = [("total_ns", "Total Time (ns)"), ("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"), ("min_ns", "Min (ns)"),
         ("max_ns", "Max (ns)"), ("stddev_ns", "StdDev (ns)")]


@pytest.fixture(scope="module")
def rep():
    return load_report(FIX / f"{STEM}.sqlite")


def _csv(report: str) -> pd.DataFrame:
    return pd.read_csv(FIX / f"{STEM}.{report}.csv")


def _close(a, b) -> bool:
    return abs(float(a) - float(b)) <= max(ABS, REL * abs(float(b)))


def test_export_is_from_nsys_2025_with_a_domain_create_row(rep):
    assert rep.nsys_version.startswith("2025.3")
    assert set(rep.nvtx["name"]) >= {"decode", "preprocess", "infer", "postprocess", "track", "display"}
    assert (rep.nvtx["domain"] == "").all()  # the app's ranges are in the default domain


def test_nvtx_summary_matches_nvtx_sum(rep):
    ours, theirs = labkit.nvtx_summary(rep), _csv("nvtx_sum")
    assert [f"{d}:{n}" for d, n in zip(ours["domain"], ours["name"])] == list(theirs["Range"])
    assert list(ours["instances"]) == list(theirs["Instances"])
    for col, ref in STATS:
        assert all(_close(a, b) for a, b in zip(ours[col], theirs[ref])), col


def test_kernel_summary_matches_cuda_gpu_kern_sum(rep):
    ours = labkit.kernel_summary(rep).set_index("name")
    theirs = _csv("cuda_gpu_kern_sum").set_index("Name")
    assert len(ours) == len(theirs) == 45 and set(ours.index) == set(theirs.index)
    assert (ours.loc[theirs.index, "instances"] == theirs["Instances"]).all()
    for col, ref in STATS:
        assert all(_close(a, b) for a, b in zip(ours.loc[theirs.index, col], theirs[ref])), col
    assert ours["instances"].sum() == len(rep.kernels)


def test_memcpy_summary_matches_cuda_gpu_mem_time_sum(rep):
    ours, theirs = labkit.memcpy_summary(rep), _csv("cuda_gpu_mem_time_sum")
    assert list(ours["name"]) == list(theirs["Operation"])  # memsets included, as nsys does
    assert list(ours["instances"]) == list(theirs["Count"])
    for col, ref in STATS:
        assert all(_close(a, b) for a, b in zip(ours[col], theirs[ref])), col


def test_gpu_projection_matches_nvtx_gpu_proj_trace(rep):
    ours = labkit.gpu_projection(rep).sort_values(["proj_start_ns", "start_ns"], kind="stable", ignore_index=True)
    theirs = _csv("nvtx_gpu_proj_trace").sort_values(["Projected Start (ns)", "Orig Start (ns)"], kind="stable",
                                                     ignore_index=True)
    assert len(ours) == len(theirs) == 18  # preprocess, infer, postprocess x 6 batches
    assert [f":{n}" for n in ours["name"]] == list(theirs["Name"])
    for col, ref in [("proj_start_ns", "Projected Start (ns)"), ("proj_duration_ns", "Projected Duration (ns)"),
                     ("start_ns", "Orig Start (ns)"), ("duration_ns", "Orig Duration (ns)"),
                     ("num_gpu_ops", "NumGPUOps"), ("depth", "Lvl"), ("tid", "TID")]:
        assert list(ours[col]) == list(theirs[ref]), col


def test_gpu_projection_summary_matches_nvtx_gpu_proj_sum(rep):
    ours = labkit.gpu_projection_summary(rep).set_index("name")
    theirs = _csv("nvtx_gpu_proj_sum")
    theirs.index = [r.lstrip(":") for r in theirs["Range"]]
    assert set(ours.index) == set(theirs.index) == {"preprocess", "infer", "postprocess"}
    t = theirs.loc[ours.index]
    assert list(ours["instances"]) == list(t["Range Instances"])
    assert list(ours["gpu_ops"]) == list(t["Total GPU Ops"])
    for col, ref in [("total_ns", "Total Proj Time (ns)"), ("range_total_ns", "Total Range Time (ns)"),
                     ("avg_ns", "Proj Avg (ns)"), ("med_ns", "Proj Med (ns)"), ("min_ns", "Proj Min (ns)"),
                     ("max_ns", "Proj Max (ns)"), ("stddev_ns", "Proj StdDev (ns)")]:
        assert all(_close(a, b) for a, b in zip(ours[col], t[ref])), col


def test_cuda_api_calls_match_cuda_api_sum(rep):
    # labkit names calls without the ABI suffix nsys keeps (cudaLaunchKernelExC_v11060 -> cudaLaunchKernelExC)
    theirs = _csv("cuda_api_sum")
    theirs = theirs.assign(Name=theirs["Name"].str.replace(r"_v\d+$", "", regex=True)).groupby("Name")["Num Calls"].sum()
    counts = rep.cuda_api.groupby("name", observed=True).size()
    assert counts.sum() == theirs.sum() == len(rep.cuda_api)
    for name, n in theirs.items():
        assert counts.get(name, 0) == n, name

