"""labkit.stats.kernels against nsys's own figures for the same real exports, and against direct
(slow, obvious) computations where nsys has none.

nsys's CSVs: ``gpukernsum``/``cuda_gpu_kern_sum`` (count, total, min, median, max per kernel),
``gpumemtimesum`` and ``gpumemsizesum`` (time and bytes per copy kind: bandwidth), ``kernexecsum``
(API and queue time per launching call and kernel; made by Debian nsys 2022.4.2.1, commands in
tests/fixtures/README.md).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labkit
from labkit.stats import kernels as K
from labkit.stats.idle import busy_intervals

FIX = Path(__file__).parent / "fixtures"
REAL = FIX / "real"
WITH_KERNELS = sorted(p.stem for p in REAL.glob("*.sqlite") if (REAL / f"{p.stem}.gpukernsum.csv").stat().st_size)
WITH_COPIES = sorted(p.stem for p in REAL.glob("*.sqlite") if (REAL / f"{p.stem}.gpumemtimesum.csv").stat().st_size)
_EXEC_REAL = sorted(p.name[:-len(".kernexecsum.csv")] for p in REAL.glob("*.kernexecsum.csv"))
EXEC = [(FIX / "gputest.nsys2025.3.sqlite", FIX / "gputest.nsys2025.3.stats2022.4.kernexecsum.csv"),
        (FIX / "pipeline.nsys2025.3.sqlite", FIX / "pipeline.nsys2025.3.stats2022.4.kernexecsum.csv")] + \
    [(REAL / f"{n}.sqlite", REAL / f"{n}.kernexecsum.csv") for n in _EXEC_REAL]
_COPY_2022 = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device", "HtoH": "Host-to-Host",
              "PtoP": "Peer-to-Peer"}


def _copy_name(op: str) -> str:
    m = re.fullmatch(r"\[CUDA (Unified Memory )?memcpy (\w+)\]", op)
    return f"[CUDA memcpy {'Unified ' if m.group(1) else ''}{_COPY_2022[m.group(2)]}]" if m else op


def _load(path):
    return labkit.load_report(path)


@pytest.mark.parametrize("stem", WITH_KERNELS)
def test_percentiles_equal_gpukernsum(stem):
    ours = labkit.kernel_percentiles(_load(REAL / f"{stem}.sqlite")).set_index("name")
    theirs = pd.read_csv(REAL / f"{stem}.gpukernsum.csv")  # 2022.4 splits a name by grid and block
    g = theirs.groupby("Name")
    want = pd.DataFrame({"count": g["Instances"].sum(), "total_ns": g["Total Time (ns)"].sum(),
                         "min_ns": g["Min (ns)"].min(), "max_ns": g["Max (ns)"].max(), "rows": g.size()})
    assert sorted(ours.index) == sorted(want.index)
    ours = ours.loc[want.index]
    for c in ("count", "total_ns", "min_ns", "max_ns"):
        assert (ours[c].to_numpy() == want[c].to_numpy()).all(), c
    one = want["rows"] == 1  # a name launched with one shape: nsys's median is the name's median
    med = theirs.set_index("Name").loc[want.index[one], "Med (ns)"]
    np.testing.assert_allclose(ours.loc[one, "p50_ns"], med, atol=0.051)
    o = ours[["min_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns"]].to_numpy(float)
    assert (np.diff(o, axis=1) >= 0).all()


def test_percentiles_equal_cuda_gpu_kern_sum_2025():
    ours = labkit.kernel_percentiles(_load(FIX / "pipeline.nsys2025.3.sqlite"))
    theirs = pd.read_csv(FIX / "pipeline.nsys2025.3.cuda_gpu_kern_sum.csv")
    assert list(ours["name"]) == list(theirs["Name"]) or sorted(ours["name"]) == sorted(theirs["Name"])
    t = theirs.set_index("Name").loc[ours["name"]]
    assert (ours["count"].to_numpy() == t["Instances"].to_numpy()).all()
    assert (ours["total_ns"].to_numpy() == t["Total Time (ns)"].to_numpy()).all()
    for ours_c, theirs_c in (("min_ns", "Min (ns)"), ("max_ns", "Max (ns)"), ("p50_ns", "Med (ns)"),
                             ("mean_ns", "Avg (ns)"), ("stddev_ns", "StdDev (ns)")):
        np.testing.assert_allclose(ours[ours_c].to_numpy(float), t[theirs_c].to_numpy(float), atol=0.051)


def test_p90_p99_are_the_percentiles_of_each_names_durations():
    rep = _load(REAL / "hpcgroup_2024.5_pipit_cloverleaf.sqlite")
    ours = labkit.kernel_percentiles(rep).set_index("name")
    g = rep.kernels.assign(n=rep.kernels["demangled"].astype(object)).groupby("n")["duration_ns"]
    for q, col in ((0.9, "p90_ns"), (0.99, "p99_ns")):
        want = g.quantile(q)
        np.testing.assert_allclose(ours.loc[want.index, col], want.to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("report,csv", EXEC, ids=[p[1].name for p in EXEC])
def test_api_and_queue_times_equal_kernexecsum(report, csv):
    ours = labkit.launch_latency(_load(report), by_call=True)
    theirs = pd.read_csv(csv)
    key_o = list(zip(ours["pid"], ours["tid"], ours["device_id"], ours["api"], ours["name"]))
    key_t = list(zip(theirs["PID"], theirs["TID"], theirs["DevId"], theirs["API Name"], theirs["Kernel Name"]))
    assert sorted(key_o) == sorted(key_t) and len(set(key_t)) == len(key_t)
    t = theirs.set_index(pd.MultiIndex.from_tuples(key_t)).loc[key_o]
    assert (ours["launches"].to_numpy() == t["Count"].to_numpy()).all()
    assert (ours["queued"].to_numpy() == t["QCount"].to_numpy()).all()
    for ours_c, theirs_c in (("api_mean_ns", "AAvg (ns)"), ("api_med_ns", "AMed (ns)"), ("api_max_ns", "AMax (ns)"),
                             ("queue_mean_ns", "QAvg (ns)"), ("queue_med_ns", "QMed (ns)"),
                             ("queue_max_ns", "QMax (ns)")):
        q = ours["queued"].to_numpy() > 0
        a, b = ours[ours_c].to_numpy(float), t[theirs_c].to_numpy(float)
        if ours_c.startswith("queue"):
            assert np.isnan(a[~q]).all()
            a, b = a[q], b[q]
        np.testing.assert_allclose(a, b, atol=0.051, rtol=1e-12, err_msg=ours_c)


def test_latency_is_api_start_to_kernel_start_and_depth_counts_the_waiting_kernels():
    rep = _load(FIX / "gputest.nsys2025.3.sqlite")
    ours = labkit.launch_latency(rep, names="short").set_index("name")
    k, api = rep.kernels, rep.cuda_api
    m = k.merge(api[["pid", "correlation_id", "start_ns"]].rename(columns={"start_ns": "call"}),
                on=["pid", "correlation_id"])
    assert ours["launches"].sum() == len(m) == len(k) and ours.attrs["unmatched"] == 0
    lat = (m["start_ns"] - m["call"]).groupby(m["name"].astype(object))
    np.testing.assert_allclose(ours.loc[lat.median().index, "latency_med_ns"], lat.median().to_numpy())
    np.testing.assert_allclose(ours.loc[lat.max().index, "latency_max_ns"], lat.max().to_numpy())
    # depth by brute force: same stream, launched before, not started yet
    call, start = m["call"].to_numpy(), np.maximum(m["start_ns"].to_numpy(), m["call"].to_numpy())
    stream = m["stream_id"].to_numpy()
    depth = np.array([int(((stream == s) & (call < t) & (start >= t)).sum()) for s, t in zip(stream, call)])
    q = labkit.queue_depth(rep)
    assert len(q) == 1 and q["launches"].iloc[0] == len(m)
    assert q["depth_max"].iloc[0] == depth.max() > 10  # this run queued kernels deep behind a slow copy
    assert np.isclose(q["depth_mean"].iloc[0], depth.mean())
    by_name = pd.Series(depth).groupby(m["name"].astype(object).to_numpy()).max()
    assert (ours.loc[by_name.index, "depth_max"].to_numpy() == by_name.to_numpy()).all()


@pytest.mark.parametrize("stem", WITH_KERNELS)
def test_stream_totals_add_up_to_nsys_totals(stem):
    rep = _load(REAL / f"{stem}.sqlite")
    s = labkit.stream_summary(rep)
    kern = pd.read_csv(REAL / f"{stem}.gpukernsum.csv")
    assert s["kernels"].sum() == kern["Instances"].sum() and s["kernel_ns"].sum() == kern["Total Time (ns)"].sum()
    mem = REAL / f"{stem}.gpumemtimesum.csv"
    mem = pd.read_csv(mem) if mem.stat().st_size else pd.DataFrame({"Operation": [], "Count": [], "Total Time (ns)": []})
    cp, ms = mem[mem["Operation"] != "[CUDA memset]"], mem[mem["Operation"] == "[CUDA memset]"]
    assert s["copies"].sum() == cp["Count"].sum() and s["copy_ns"].sum() == cp["Total Time (ns)"].sum()
    assert s["memsets"].sum() == ms["Count"].sum() and s["memset_ns"].sum() == ms["Total Time (ns)"].sum()
    ops = rep.gpu_ops()
    for row in s.itertuples():  # busy time: the union of the stream's operations
        o = ops[(ops["pid"] == row.pid) & (ops["device_id"] == row.device_id) & (ops["stream_id"] == row.stream_id)]
        bs, be = busy_intervals(o["start_ns"].to_numpy(), o["end_ns"].to_numpy())
        assert row.busy_ns == int((be - bs).sum()) <= row.kernel_ns + row.copy_ns + row.memset_ns
        assert (row.first_ns, row.last_ns) == (o["start_ns"].min(), o["end_ns"].max())
    assert s["copy_bytes"].sum() == rep.memcpy["bytes"].sum()


def test_many_streams_are_kept_apart():
    s = labkit.stream_summary(_load(REAL / "extra-p_2022.1_concurrent_s16_windows.sqlite"))
    assert len(s) == 15 and s["stream_id"].is_unique
    assert list(s["busy_ns"]) == sorted(s["busy_ns"], reverse=True)


@pytest.mark.parametrize("stem", WITH_COPIES)
def test_bandwidth_is_nsys_bytes_over_nsys_time(stem):
    ours = labkit.copy_bandwidth(_load(REAL / f"{stem}.sqlite")).set_index("name")
    t = pd.read_csv(REAL / f"{stem}.gpumemtimesum.csv")
    b = pd.read_csv(REAL / f"{stem}.gpumemsizesum.csv")
    t.index, b.index = t["Operation"].map(_copy_name), b["Operation"].map(_copy_name)
    assert sorted(ours.index) == sorted(t.index) == sorted(b.index)
    t, b = t.loc[ours.index], b.loc[ours.index]
    assert (ours["count"].to_numpy() == t["Count"].to_numpy()).all()
    assert (ours["total_ns"].to_numpy() == t["Total Time (ns)"].to_numpy()).all()
    np.testing.assert_allclose(ours["total_bytes"] / 1e6, b["Total (MB)"], atol=0.00051)
    # nsys's figures give the bandwidth to their rounding of the bytes (0.001 MB)
    theirs = b["Total (MB)"].to_numpy() * 1e6 / t["Total Time (ns)"].to_numpy()
    slack = 500 / t["Total Time (ns)"].to_numpy()
    assert (np.abs(ours["gb_per_s"].to_numpy() - theirs) <= slack * 1.0001).all()
    assert (ours["med_gb_per_s"] <= ours["max_gb_per_s"]).all()


def test_bandwidth_by_memory_splits_pageable_from_pinned():
    rep = _load(FIX / "gputest.nsys2025.3.sqlite")
    whole = labkit.copy_bandwidth(rep).set_index("name")
    split = labkit.copy_bandwidth(rep, by_memory=True)
    assert list(split.columns[:3]) == ["name", "src_kind", "dst_kind"]
    assert split.groupby("name")["total_bytes"].sum().loc[whole.index].tolist() == whole["total_bytes"].tolist()
    d2h = split[split["name"] == "[CUDA memcpy Device-to-Host]"].iloc[0]
    assert d2h["dst_kind"] == "Pageable" and 0.1 < d2h["gb_per_s"] < 100


def test_window_and_within_restrict_every_statistic():
    rep = _load(FIX / "gputest.nsys2025.3.sqlite")
    batch = rep.nvtx[rep.nvtx["name"] == "batch"].sort_values("start_ns")
    w = (int(batch["start_ns"].iloc[2]), int(batch["end_ns"].iloc[4]))
    cut = labkit.restrict(rep, window=w)
    for f in (labkit.kernel_percentiles, labkit.launch_latency, labkit.queue_depth, labkit.stream_summary,
              labkit.copy_bandwidth):
        pd.testing.assert_frame_equal(f(rep, window=w), f(cut))
    assert 0 < labkit.kernel_percentiles(rep, window=w)["count"].sum() < len(rep.kernels)
    inside = labkit.kernel_percentiles(rep, within="batch")["count"].sum()
    assert inside == len(labkit.restrict(rep, within="batch").kernels) > 0


def test_a_report_without_gpu_work_gives_empty_typed_tables():
    rep = _load(FIX / "cpu_threads.nsys2022.4.sqlite")
    for f, cols in ((labkit.kernel_percentiles, K.PERCENTILE_COLUMNS), (labkit.launch_latency, K.LATENCY_COLUMNS),
                    (labkit.queue_depth, K.QUEUE_COLUMNS), (labkit.stream_summary, K.STREAM_COLUMNS),
                    (labkit.copy_bandwidth, K.BANDWIDTH_COLUMNS)):
        out = f(rep)
        assert len(out) == 0 and list(out.columns) == cols, f.__name__
    with pytest.raises(labkit.LabkitError, match="names="):
        labkit.kernel_percentiles(rep, names="mangled")
