"""labkit.report.window (restrict, @windowed) on real exports, and ``python -m labkit summary --what a,b``."""
from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labkit
from labkit.stats import summaries
from labkit.report.window import WindowError, restrict, windowed

FIX = Path(__file__).parent / "fixtures"
LLAMA = FIX / "real" / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite"
SUMMARIES = [summaries.nvtx_summary, summaries.kernel_summary, summaries.memcpy_summary, summaries.cuda_api_summary,
             summaries.memcpy_size_summary, summaries.osrt_summary, summaries.gpu_projection_summary]


@pytest.fixture(scope="module")
def llama():
    return labkit.load_report(LLAMA)


def test_windowed_keeps_signature_and_docstring():
    for fn in SUMMARIES:
        params = inspect.signature(fn).parameters
        assert params["window"].kind is inspect.Parameter.KEYWORD_ONLY and params["window"].default is None
        assert params["within"].kind is inspect.Parameter.KEYWORD_ONLY
        assert fn.__name__ and fn.__doc__ and "restrict" in fn.__doc__ and fn.__wrapped__

    @windowed
    def f(report, x, *, y=1, **kw):
        """Doc."""
        return report, x, y, kw

    assert list(inspect.signature(f).parameters) == ["report", "x", "y", "window", "within", "kw"]
    rep = object()
    assert f(rep, 2, z=3) == (rep, 2, 1, {"z": 3})  # no window: the report itself, untouched


def test_no_window_is_the_report_itself(llama):
    assert restrict(llama) is llama


@pytest.mark.parametrize("fn", SUMMARIES, ids=lambda f: f.__name__)
def test_windows_that_split_the_run_add_up_to_the_whole(llama, fn):
    """Every event starts in exactly one of two windows that split the run: counts and totals add up."""
    nv = llama.nvtx
    lo, hi = int(llama.cuda_api["start_ns"].min()) - 1, int(nv["end_ns"].max()) + 10**9
    mid = int(nv["start_ns"].iloc[len(nv) // 2])
    whole = fn(llama)
    parts = [fn(llama, window=(lo, mid)), fn(llama, window=(mid, hi))]
    count = "count" if "count" in whole else "instances"
    total = "total_bytes" if "total_bytes" in whole else "total_ns"
    if fn is summaries.gpu_projection_summary:  # a range whose launches fall in the other window loses them
        assert sum(int(p[count].sum()) for p in parts) <= int(whole[count].sum())
        return
    assert sum(int(p[count].sum()) for p in parts) == int(whole[count].sum())
    assert sum(int(p[total].sum()) for p in parts) == int(whole[total].sum())
    if len(whole) and fn is not summaries.osrt_summary:
        assert 0 < int(parts[0][count].sum()) < int(whole[count].sum())


def test_kernels_follow_their_launching_call(llama):
    """A kernel belongs to the window its cudaLaunchKernel started in, even if it ran after it."""
    api = llama.cuda_api
    k = llama.kernels
    calls = api.set_index("correlation_id")["start_ns"]
    launch = calls.loc[k["correlation_id"]].to_numpy()
    i = int(np.argmax(k["start_ns"].to_numpy() - launch))  # the kernel that waited longest after its launch
    w = (int(launch[i]), int(k["start_ns"].iloc[i]))  # from its launch up to (not including) its start
    cut = restrict(llama, window=w)
    want = int(((launch >= w[0]) & (launch < w[1])).sum())
    assert len(cut.kernels) == want and k["correlation_id"].iloc[i] in set(cut.kernels["correlation_id"])
    assert summaries.kernel_summary(llama, window=w)["instances"].sum() == want


def test_within_is_the_union_of_a_ranges_instances(llama):
    nv = llama.nvtx
    name = nv["name"].value_counts().index[0]
    cut = restrict(llama, within=name)
    inst = nv[nv["name"] == name]
    assert cut.meta["within"] == name and len(cut.meta["window"]) <= len(inst)
    assert (cut.nvtx["name"] == name).sum() == len(inst)
    starts = cut.nvtx["start_ns"].to_numpy()
    span = np.array(cut.meta["window"])
    inside = np.zeros(len(starts), dtype=bool)
    for a, b in span:
        inside |= (starts >= a) & (starts < b)
    assert inside.all()
    par = cut.nvtx["parent"].to_numpy()  # parents re-pointed at kept rows
    ok = par >= 0
    assert (par[ok] < len(cut.nvtx)).all()
    assert (cut.nvtx["start_ns"].to_numpy()[par[ok]] <= starts[ok]).all()


def test_bad_windows_say_what_to_give(llama):
    with pytest.raises(WindowError, match="start_ns .* >= end_ns"):
        summaries.nvtx_summary(llama, window=(5, 5))
    with pytest.raises(WindowError, match="not both"):
        summaries.nvtx_summary(llama, window=(0, 5), within="x")
    with pytest.raises(WindowError, match="no NVTX range named 'nope'.*pick one of"):
        summaries.kernel_summary(llama, within="nope")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "summary", *map(str, args)], capture_output=True,
                          text=True)


def test_summary_command_prints_several_summaries_from_one_load():
    r = _cli(LLAMA, "--what", "nvtx,kernels,cuda_api,memsize", "--csv")
    assert r.returncode == 0, r.stderr
    heads = [line for line in r.stdout.splitlines() if line.startswith("# ")]
    assert heads == ["# nvtx", "# kernels", "# cuda_api", "# memsize"]
    assert "cudaDeviceSynchronize,512," in r.stdout and "[CUDA memset],512," in r.stdout
    bad = _cli(LLAMA, "--what", "nvtx,bogus")
    assert bad.returncode == 2 and "unknown --what bogus" in bad.stderr


def test_summary_command_imports_only_what_it_needs():
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "labkit", "summary", LLAMA, "--what",
                        "nvtx,kernels,cuda_api"], capture_output=True, text=True)
    assert r.returncode == 0
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    for heavy in ("matplotlib", "labkit.stats.stages", "labkit.judge.advice", "labkit.show.timeline", "scipy", "labkit.stats.compare"):
        assert heavy not in imported, heavy


@pytest.mark.parametrize("stem", ["real/Sh1mwww_2024.6_llama3_real_inference_simulation",
                                  "real/extra-p_2022.1_concurrent_s16_windows",
                                  "real/YoonKyonghwan_2022.4_centerformer_poolformer",
                                  "real/NTHU-SC_2025.1_icon_graupel_gpu", "gputest.nsys2025.3", "start_end.nsys2022.4",
                                  "domains.nsys2022.4", "cpu_threads.nsys2022.4"])
def test_nvtx_summary_in_one_pass_equals_the_grouped_queries(stem, monkeypatch):
    """A large export's ranges are read in one pass (inline texts, text ids, domains); the summary is
    the one the grouped queries give on small exports."""
    from labkit.report import nvtx as reader_nvtx

    path = FIX / f"{stem}.sqlite"
    want = summaries.nvtx_summary(labkit.load_report(path))
    monkeypatch.setattr(reader_nvtx, "COLUMNS_FROM", 0)
    got = summaries.nvtx_summary(labkit.load_report(path))
    key = ["domain", "name", "style"]
    pd.testing.assert_frame_equal(got.sort_values(key, ignore_index=True), want.sort_values(key, ignore_index=True))
