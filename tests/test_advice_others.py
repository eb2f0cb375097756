"""labkit's judgement (advise, bottleneck, stage_table, the idle breakdown, copy_table,
steady_window, batches) on real programs that are not the lab's: three reports made by others
(tests/fixtures/others_h2/README.md: a PyTorch CNN with pyprof ranges, OpenACC without NVTX, a
unified-memory kernel on nsys 2026.1), a plain-nvtx program recorded here under nsys 2022.4 (two
domains sharing a range name, a thread), and the domains fixture. Their claims must agree with each
other and with nsys's own cudaapisum."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labkit
from labkit.stats import idle
from labkit.stats import stages
from labkit.judge.advice import ADVICE_COLUMNS, LEVERS, next_lever

FIX = Path(__file__).parent / "fixtures"
OTH = FIX / "others_h2"
OTHERS = ["MohanadOdema_2022.1_dlprof_nsys_profile", "PolPuigPuy_2020.5_openacc_report12", "sdroruganti_2026.1_report2"]
ALL = [str(OTH / f"{n}.sqlite") for n in OTHERS] + [str(OTH / "plain_nvtx.nsys2022.4.sqlite"),
                                                    str(FIX / "domains.nsys2022.4.sqlite")]


@lru_cache(maxsize=None)
def rep(path: str):
    return labkit.load_report(path)


def api_sum(name: str) -> pd.Series:
    """nsys 2022.4's cudaapisum of a report: total ns per API name (version suffixes dropped)."""
    t = pd.read_csv(OTH / f"{name}.nsys_cudaapisum.csv")
    return t.groupby(t["Name"].str.replace(r"_v\d+$", "", regex=True))["Total Time (ns)"].sum()


@pytest.mark.parametrize("path", ALL, ids=lambda p: Path(p).stem)
def test_advise_runs_and_speaks_in_general_words(path):
    a = labkit.advise(rep(path))
    assert list(a.columns) == ADVICE_COLUMNS and a.attrs["note"]
    assert a["lever"].isin(list(LEVERS)).all() and (a["lever_text"] == a["lever"].map(LEVERS)).all()
    assert a["basis"].isin(["bound", "estimate"]).all() and (a["predicted_speedup"] >= 1.05).all()
    text = " ".join(a[["finding", "evidence", "lever_text", "assumptions"]].astype(str).to_numpy().ravel())
    assert "--" not in text
    assert "--" not in next_lever(rep(path))


@pytest.mark.parametrize("path", ALL, ids=lambda p: Path(p).stem)
def test_bottleneck_busy_figures_agree_with_stage_table(path):
    r = rep(path)
    b = labkit.bottleneck(r, steady=False)  # the whole trace, as stage_table reads it
    st = labkit.stage_table(r)
    nv = r.nvtx
    if len(nv) == 0:
        assert b.stage is None and st.empty
        return
    # a stage with nothing nested in it: its self time is its CPU time in stage_table
    parents = set(nv["parent"])
    leaves = nv[(nv["kind"] != "mark") & ~nv.index.isin(parents)]
    lab = stages.stage_labels(leaves)
    nested = set(stages.stage_labels(nv[nv.index.isin(parents)]))
    t = b.table.set_index("stage")["self_ms"].groupby(level=0).sum()
    st_lab = stages.stage_labels(st.rename(columns={"stage": "name"}))
    # bottleneck's self time is the thread's own: the stage's CPU time less the time it waited on a peer
    # (blocked, but not on its input: latency stays the thread's)
    cpu = pd.Series((st["cpu_ms"] - st["blocked_ms"] + st["latency_ms"]).to_numpy(), index=st_lab.to_numpy())
    checked = 0
    for s in set(lab) - nested:
        if s in t.index:
            assert t[s] == pytest.approx(cpu[s], rel=1e-9), s
            checked += 1
    assert checked > 0
    assert 0 < b.thread_busy_frac <= 1.0 + 1e-9
    # the GPU is named only when kernels kept the SMs busier than the busiest thread; copies apart
    assert b.gpu_bound == (b.gpu_busy_frac > b.thread_busy_frac and b.gpu_busy_frac >= b.copy_busy_frac)
    assert ("The GPU bound" in b.sentence) == b.gpu_bound


def test_a_range_covering_the_run_is_work_not_an_envelope():
    # the DLProf CNN: one '.cuda()' range (a leaf, CUDA context creation) holds 99.5 % of the trace
    r = rep(str(OTH / f"{OTHERS[0]}.sqlite"))
    b = labkit.bottleneck(r, steady=False)  # the whole trace: start-up is what this report holds
    st = labkit.stage_table(r)
    assert b.thread_busy_frac > 0.99 and not b.gpu_bound
    one = st.loc[st["stage"] == b.stage].iloc[0]
    assert b.stage_ms == pytest.approx(one["cpu_ms"] - one["blocked_ms"] + one["latency_ms"])
    assert b.gpu_busy_frac < 0.01  # kernels 0.6 ms of 2.25 s


def test_no_nvtx_report_gets_cuda_findings_that_match_nsys_cudaapisum():
    name = OTHERS[1]
    r = rep(str(OTH / f"{name}.sqlite"))
    a = labkit.advise(r, steady=False)  # the whole trace, as nsys stats counts it
    assert "no NVTX ranges" in a.attrs["note"] and "whole trace" in a.attrs["note"]
    want = api_sum(name)
    s = a[a["rule"] == "sync_apis"].iloc[0]
    assert s["lever"] == "remove_sync" and s["basis"] == "bound"
    assert f"waited in them {want['cuStreamSynchronize'] / 1e6:.1f} ms" in s["evidence"]
    assert "cuStreamSynchronize x1942" in s["evidence"]
    # the prediction follows from the wait: wall over (wall - time some thread was in a sync)
    w0, w1 = a.attrs["window"]
    calls = idle.sync_calls(r)
    us, ue = idle.busy_intervals(calls["start_ns"].to_numpy(), calls["end_ns"].to_numpy())
    wall = (w1 - w0) / 1e6
    assert s["predicted_speedup"] == pytest.approx(wall / (wall - (ue - us).sum() / 1e6), rel=1e-9)
    lb = a[a["rule"] == "launch_bound"].iloc[0]
    assert f"spent {want['cuLaunchKernel'] / 1e6:.1f} ms in them" in lb["evidence"]
    assert lb["lever"] == "cuda_graphs"


def test_a_finding_whose_cost_is_zero_predicts_nothing():
    # the plain-nvtx program traced no CUDA: no CUDA rule may fire, whatever the threshold
    a = labkit.advise(rep(str(OTH / "plain_nvtx.nsys2022.4.sqlite")), min_gain=0.0)
    assert not a["rule"].isin(["sync_apis", "sync_memcpy", "pageable_memcpy", "gpu_starvation",
                               "gpu_low_utilization", "launch_bound", "gpu_bound"]).any()
    assert (a["predicted_speedup"] > 1.0).all()


def test_nothing_to_find_is_an_empty_frame_with_a_note():
    a = labkit.advise(rep(str(OTH / f"{OTHERS[2]}.sqlite")), min_gain=1e9)
    assert a.empty and list(a.columns) == ADVICE_COLUMNS and "nothing to find" in a.attrs["note"]
    assert next_lever(rep(str(OTH / f"{OTHERS[2]}.sqlite")), min_gain=1e9).startswith("No lever worth a step")


def test_plain_nvtx_program_gets_findings_per_domain_and_states_its_stages():
    r = rep(str(OTH / "plain_nvtx.nsys2022.4.sqlite"))
    st = labkit.stage_table(r)
    reads = st[st["stage"] == "read"]
    assert sorted(reads["domain"]) == ["Compute", "IO"] and (reads["instances"] == 8).all()
    assert "outermost repeated range 'step'" in st.attrs["note"]
    assert set(st.attrs["stages"]) == {"IO:read", "Compute:read", "update"}
    b = labkit.bottleneck(r)
    assert {"IO:read", "Compute:read"} <= set(b.table["stage"]) and b.stage == "update"
    a = labkit.advise(r)
    assert "outermost repeated range 'step'" in a.attrs["note"]
    serial = a[a["rule"] == "serial_stages"].iloc[0]
    assert "IO:read" in serial["evidence"] and "Compute:read" in serial["evidence"]
    assert serial["lever"] == "overlap_stages" and serial["basis"] == "estimate"
    dom = a[a["rule"] == "dominant_stage"].iloc[0]
    assert dom["stage"] == "update" and dom["stage"] == b.stage
    # the busy figure of the busiest thread is stage_table's stage time on it
    main = b.table[b.table["tid"] == b.tid]
    assert main["self_ms"].sum() / b.wall_ms == pytest.approx(b.thread_busy_frac, rel=1e-6)


def test_domains_stay_apart_in_stage_table_bottleneck_and_advise():
    r = rep(str(FIX / "domains.nsys2022.4.sqlite"))
    st = labkit.stage_table(r)
    assert set(zip(st["stage"], st["domain"])) == {("work", "mydomain"), ("plain", "")}
    assert labkit.bottleneck(r).stage == "mydomain:work"
    assert "mydomain:work" in set(labkit.advise(r)["stage"].dropna())


def test_idle_breakdown_accounts_for_every_idle_nanosecond():
    for name in OTHERS:
        r = rep(str(OTH / f"{name}.sqlite"))
        br = idle.gpu_idle_breakdown(r)
        parts = br[["copy_ns", "sync_ns", "cuda_ns", "untraced_ns"]]
        assert (parts >= 0).all().all()
        assert (parts.sum(axis=1) == br["duration_ns"]).all()
        w0, w1 = br.attrs["window"]
        assert br["duration_ns"].sum() / 1e6 + br.attrs["sm_busy_ms"] == pytest.approx((w1 - w0) / 1e6, abs=1e-6)
    # the unified-memory run: its one kernel waits 83 ms on cudaMallocManaged (a CUDA call, not a stall)
    um = rep(str(OTH / f"{OTHERS[2]}.sqlite"))
    br = idle.gpu_idle_breakdown(um, window=stages.trace_span(um))
    want = api_sum(OTHERS[2])
    assert want["cudaMallocManaged"] / 1e6 < br.attrs["totals_ms"]["cuda"] <= want.drop("cudaDeviceSynchronize").sum() / 1e6


def test_utilization_keeps_sm_and_copy_busy_apart():
    r = rep(str(OTH / f"{OTHERS[1]}.sqlite"))
    u = labkit.gpu_utilization(r, bin_ms=1e6)
    sm = idle.busy_intervals(r.kernels["start_ns"].to_numpy(), r.kernels["end_ns"].to_numpy())
    cp = pd.concat([r.memcpy, r.memset])
    cb = idle.busy_intervals(cp["start_ns"].to_numpy(), cp["end_ns"].to_numpy())
    assert u["busy_ns"].sum() == (sm[1] - sm[0]).sum() and u["copy_busy_ns"].sum() == (cb[1] - cb[0]).sum()


def test_general_functions_state_what_they_did_without_lab_conventions():
    r = rep(str(OTH / f"{OTHERS[0]}.sqlite"))
    ct = labkit.copy_table(r)
    assert ct["copies"].sum() == len(r.memcpy) == 13 and "no NVTX range carries a batch index" in ct.attrs["note"]
    empty = labkit.copy_table(rep(str(OTH / "plain_nvtx.nsys2022.4.sqlite")))
    assert empty.empty and "no memory copies" in empty.attrs["note"]
    b = labkit.batches(rep(str(OTH / "plain_nvtx.nsys2022.4.sqlite")))
    assert b.empty and "payload" in b.attrs["note"]
    # no 'infer' range: the window falls back to the outermost repeated range, 'step'
    p = rep(str(OTH / "plain_nvtx.nsys2022.4.sqlite"))
    start, end = labkit.steady_window(p, count=3)
    steps = np.sort(p.nvtx.loc[p.nvtx["name"] == "step", "start_ns"].to_numpy())
    assert ((steps >= start) & (steps < end)).sum() == 3
    # no repeated range at all: the whole trace
    n = rep(str(OTH / f"{OTHERS[1]}.sqlite"))
    s, e = labkit.steady_window(n)
    assert s == min(n.cuda_api["start_ns"].min(), n.gpu_ops()["start_ns"].min())
