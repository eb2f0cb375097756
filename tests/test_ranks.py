"""labkit.ranks on real per-rank exports: a 2-rank gloo program (tests/fixtures/ranks.py) run by
torchrun under Debian nsys 2022.4, one report per rank (commands in tests/fixtures/README.md).

Per-rank summaries are compared with nsys's own ``stats`` of each rank; merged summaries with
the sum of the per-rank ones. The nsys-marked tests run torchrun under nsys here.
"""
from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from labkit.errors import LabkitError
from labkit.ranks.reports import RanksError, _rank_from_env, load_reports, plot_rank_timeline, rank_from_name
from labkit.ranks.profile import RankFailedError, profile_ranks
from labkit.report.load import Report, load_report

pytestmark = pytest.mark.alone  # ranks under torchrun against deadlines, and their ports: alone

FIX = Path(__file__).parent / "fixtures"
EXPORTS = [FIX / f"ranks.nsys2022.4_{r}.sqlite" for r in (0, 1)]
STAGES = {"main": 1, "load": 4, "compute": 4, "allreduce": 4}  # instances per rank (ranks.py)


def _quiet_load(paths, **kw):
    return load_reports(paths, **kw)


@pytest.fixture(scope="module")
def reps():
    return _quiet_load(EXPORTS, frames=("nvtx", "kernels", "memcpy", "memset"))


def _nsys_csv(rank: int) -> pd.DataFrame:
    return pd.read_csv(FIX / f"ranks.nsys2022.4_{rank}.nvtxsum.csv").set_index("Range")


def test_frames_carry_rank_column(reps):
    assert reps.ranks == [0, 1]
    nv = reps.nvtx()
    assert list(nv.columns[:2]) == ["rank", "name"]
    for r, path in zip((0, 1), EXPORTS):
        one = load_report(path).nvtx
        mine = nv[nv["rank"] == r].drop(columns="rank").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, one.reset_index(drop=True), check_dtype=False, check_categorical=False)
    ranges = nv[nv["kind"] == "push_pop"].groupby(["rank", "name"]).size()
    assert ranges.to_dict() == {(r, s): n for r in (0, 1) for s, n in STAGES.items()}
    assert len(reps.kernels()) == 0 and "rank" in reps.kernels().columns  # CPU run: empty, with its columns


def test_per_rank_nvtx_summary_matches_nsys_stats(reps):
    s = reps.nvtx_summary()
    assert list(s.columns[:2]) == ["rank", "name"]
    for r in (0, 1):
        ours = s[s["rank"] == r].set_index("name")
        theirs = _nsys_csv(r)
        assert sorted(ours.index) == sorted(theirs.index)
        for name, row in theirs.iterrows():
            assert ours.loc[name, "instances"] == row["Instances"]
            assert ours.loc[name, "total_ns"] == row["Total Time (ns)"]
            assert ours.loc[name, "max_ns"] == row["Max (ns)"]


def test_merged_summaries_equal_sum_of_ranks(reps):
    per = reps.nvtx_summary().groupby("name")
    merged = reps.nvtx_summary(merged=True).set_index("name")
    for col, how in (("instances", "sum"), ("total_ns", "sum"), ("min_ns", "min"), ("max_ns", "max")):
        assert merged[col].to_dict() == per[col].agg(how).to_dict(), col
    both = _nsys_csv(0)["Total Time (ns)"] + _nsys_csv(1)["Total Time (ns)"]
    assert merged["total_ns"].to_dict() == both.to_dict()
    assert merged.loc["compute", "instances"] == 8
    stages = reps.stage_table(merged=True).set_index("stage")
    per_stage = reps.stage_table().groupby("stage")
    assert stages["instances"].to_dict() == per_stage["instances"].sum().to_dict()
    assert np.allclose(stages["cpu_ms"], per_stage["cpu_ms"].sum()[stages.index])
    assert stages.loc["compute", "items"] == 16 and (stages["ranks"] == 2).all()
    assert reps.kernel_summary(merged=True).empty and reps.kernel_summary().empty


def test_imbalance_names_slow_and_fast_rank(reps):
    imb = reps.imbalance().set_index("stage")
    assert list(imb.reset_index().columns) == ["stage", "ranks", "fastest_rank", "fastest_ms", "slowest_rank",
                                               "slowest_ms", "spread_ms", "ratio", "mean_ms"]
    c = imb.loc["compute"]  # rank 1 sleeps twice as long in compute
    assert (c["fastest_rank"], c["slowest_rank"], c["ranks"]) == (0, 1, 2)
    assert c["fastest_ms"] == pytest.approx(_nsys_csv(0).loc["compute", "Total Time (ns)"] / 1e6)
    assert c["slowest_ms"] == pytest.approx(_nsys_csv(1).loc["compute", "Total Time (ns)"] / 1e6)
    assert 1.8 < c["ratio"] < 2.2
    a = imb.loc["allreduce"]  # ...so rank 0 waits for it in the all-reduce
    assert (a["fastest_rank"], a["slowest_rank"]) == (1, 0)
    assert imb.index[0] in ("compute", "allreduce")  # sorted by spread


def test_ranks_from_names_env_or_position(tmp_path):
    rev = _quiet_load(EXPORTS[::-1])
    assert rev.ranks == [0, 1] and rev.paths[1] == EXPORTS[1]
    plain = [tmp_path / "b.sqlite", tmp_path / "a.sqlite"]
    for src, dst in zip(EXPORTS[::-1], plain):
        shutil.copy(src, dst)
    pos = _quiet_load(plain)
    assert pos.ranks == [0, 1] and pos.paths[0] == plain[0]
    dup = tmp_path / "other_1.sqlite"
    shutil.copy(EXPORTS[0], dup)
    with pytest.raises(RanksError, match="rank 1 twice"):
        _quiet_load([EXPORTS[1], dup])
    with pytest.raises(RanksError, match="no reports"):
        load_reports([])
    with pytest.raises(RanksError, match="frames=.*cuda_api"):
        _quiet_load(EXPORTS).cuda_api()


def test_frames_not_kept_are_named_not_empty():
    lean = _quiet_load(EXPORTS)  # summaries only: merged ones too, without any frame
    assert lean.nvtx_summary(merged=True)["instances"].sum() == 26  # 13 ranges per rank
    assert len(lean.kernel_summary()) == 0 and len(lean.kernel_summary(merged=True)) == 0
    with pytest.raises(RanksError, match=r"frame 'kernels' was not kept \(kept: none\).*frames=\(\.\.\., 'kernels'\)"):
        lean.kernels()
    with pytest.raises(RanksError, match="frame 'nvtx' was not kept"):
        plot_rank_timeline(_quiet_load(EXPORTS, frames=()))
    with pytest.raises(RanksError, match="unknown frame 'gpu'"):
        load_reports(EXPORTS, frames=("gpu",))


def test_unreadable_report_is_named(tmp_path):
    bad = tmp_path / "run_1.sqlite"
    bad.write_text("not a report")
    with pytest.raises(LabkitError, match=r"run_1.sqlite is neither an Nsight Systems report"):
        _quiet_load([EXPORTS[0], bad])


def test_rank_from_recorded_environment(tmp_path):
    # a real nsys 2025.3 export records the environment; add the RANK torchrun would have set
    db = tmp_path / "pipeline.sqlite"
    shutil.copy(FIX / "pipeline.nsys2025.3.sqlite", db)
    assert _rank_from_env(db) is None
    con = sqlite3.connect(db)
    con.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', "
                "'SLURM_PROCID=\"5\"')")
    con.commit()
    assert _rank_from_env(db) == 5
    con.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', 'RANK=\"3\"')")
    con.commit()
    con.close()
    assert _rank_from_env(db) == 3  # torchrun's RANK before Slurm's process id
    other = tmp_path / "b.sqlite"  # names without ranks: load_reports takes the recorded RANK
    shutil.copy(db, other)
    con = sqlite3.connect(other)
    con.execute("UPDATE META_DATA_CAPTURE SET value = 'RANK=\"0\"' WHERE value = 'RANK=\"3\"'")
    con.commit()
    con.close()
    assert _quiet_load([db, other]).paths == {0: other, 3: db}
    assert _rank_from_env(EXPORTS[0]) is None  # 2022.4 exports record no environment


@pytest.mark.parametrize("name,rank", [("run_3.sqlite", 3), ("run-12.nsys-rep", 12), ("run.rank7.sqlite", 7),
                                       ("ranks.nsys2022.4_1.sqlite", 1), ("pipeline.nsys2022.4.sqlite", None),
                                       ("run.sqlite", None), ("rank_5.nsys-rep", 5)])
def test_rank_from_name(name, rank):
    assert rank_from_name(name) == rank


def test_merged_summaries_from_results_equal_summaries_of_all_frames(reps):
    # the merge reads no frame; the old way joined every rank's frames and summarized them
    from labkit.stats.summaries import kernel_summary, nvtx_summary

    allnv = Report.from_frames(nvtx=reps.nvtx().drop(columns="rank"))
    pd.testing.assert_frame_equal(reps.nvtx_summary(merged=True), nvtx_summary(allnv))
    real = FIX / "real" / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite"  # kernels and nested ranges
    two = load_reports([real, real], ranks=[0, 1], frames=("nvtx", "kernels"))
    both = Report.from_frames(nvtx=two.nvtx().drop(columns="rank"), kernels=two.kernels().drop(columns="rank"))
    pd.testing.assert_frame_equal(two.nvtx_summary(merged=True), nvtx_summary(both))
    pd.testing.assert_frame_equal(two.kernel_summary(merged=True), kernel_summary(both))
    assert two.kernel_summary(merged=True)["instances"].sum() == 2 * len(load_report(real).kernels) > 0


def test_frames_one_rank_at_a_time(reps):
    seen = [(r, len(df)) for r, df in reps.frames("nvtx")]
    assert seen == [(0, (reps.nvtx()["rank"] == 0).sum()), (1, (reps.nvtx()["rank"] == 1).sum())]
    one = reps.frame("nvtx", 1)
    assert set(one["rank"]) == {1} and one.drop(columns="rank").equals(load_report(EXPORTS[1]).nvtx)
    with pytest.raises(RanksError, match="no rank 7 here"):
        reps.frame("nvtx", 7)


def test_stragglers_name_the_slowest_rank_per_stage(reps):
    s = reps.stragglers(top=1)
    assert list(s.columns) == ["stage", "place", "rank", "cpu_ms", "median_ms", "over_median_ms", "ratio"]
    assert (s["place"] == 1).all() and sorted(s["stage"]) == sorted(STAGES)
    by = s.set_index("stage")
    assert by.loc["compute", "rank"] == 1 and by.loc["allreduce", "rank"] == 0  # as imbalance() says
    st = reps.stage_table().set_index(["rank", "stage"])["cpu_ms"]
    assert by.loc["compute", "cpu_ms"] == st[(1, "compute")]
    assert by.loc["compute", "median_ms"] == pytest.approx((st[(0, "compute")] + st[(1, "compute")]) / 2)
    assert len(reps.stragglers(top=2)) == 2 * len(STAGES)


def test_notes_kept_with_rank(reps):
    assert len(reps.notes) == 2 and not any(load_report(p).has_cuda for p in EXPORTS)
    assert reps.notes[1].startswith("rank 1: ") and "no CUDA tables" in reps.notes[1]


def test_rank_timeline_one_band_per_rank(reps):
    matplotlib.use("Agg")
    fig = plot_rank_timeline(reps)
    axes = fig.axes
    assert [a.get_ylabel() for a in axes] == ["rank 0", "rank 1"]
    for a, r in zip(axes, (0, 1)):  # one bar per range (marks are not drawn)
        nv = reps.nvtx()
        bars = sum(len(c.get_paths()) for c in a.collections)
        assert bars == ((nv["rank"] == r) & (nv["kind"] != "mark")).sum()
    assert axes[0].get_xlim() == axes[1].get_xlim()
    # the last all-reduce ends at the same moment on both ranks once aligned (within 1 ms)
    ends = [reps.report(r, aligned=True).nvtx.query("name == 'allreduce'")["end_ns"].max() for r in (0, 1)]
    assert abs(ends[0] - ends[1]) < 1e6


@pytest.mark.nsys
def test_profile_ranks_under_torchrun(tmp_path):
    cmd = [sys.executable, str(FIX / "ranks.py")]
    reps = profile_ranks(cmd, nproc=2, name="t", outdir=tmp_path)
    assert reps.ranks == [0, 1]
    assert sorted(p.name for p in tmp_path.glob("t_*.nsys-rep")) == ["t_0.nsys-rep", "t_1.nsys-rep"]
    # the CPUs the ranks could use are noted beside each rank's report, as labkit.profile notes its own
    from labkit.env import usable_cpus
    from labkit.record.nsys import recording_facts

    assert [recording_facts(tmp_path / f"t_{r}.nsys-rep") for r in (0, 1)] == [([], usable_cpus())] * 2
    got = reps.nvtx_summary().set_index(["rank", "name"])["instances"].to_dict()
    assert got == {(r, s): n for r in (0, 1) for s, n in STAGES.items()}
    assert reps.imbalance().set_index("stage").loc["compute", "slowest_rank"] == 1
    with pytest.raises(LabkitError, match="already exists"):
        profile_ranks(cmd, nproc=2, name="t", outdir=tmp_path)


@pytest.mark.nsys
def test_profile_ranks_names_the_failed_rank(tmp_path):
    cmd = [sys.executable, str(FIX / "ranks.py")]
    with pytest.raises(RankFailedError, match=r"^rank 1 failed: RuntimeError: rank 1 failed on purpose"):
        profile_ranks(cmd, nproc=2, name="f", outdir=tmp_path, env={"RANKS_FAIL_RANK": "1"})


@pytest.mark.nsys
def test_profile_ranks_stops_a_hung_rank(tmp_path):
    cmd = [sys.executable, str(FIX / "ranks.py"), str(tmp_path)]  # the extra argument marks this run's ranks
    t0 = time.monotonic()
    with pytest.raises(RankFailedError, match=r"did not finish in 20 s and were stopped"):
        profile_ranks(cmd, nproc=2, name="h", outdir=tmp_path, env={"RANKS_HANG_RANK": "0"}, timeout_s=20)
    assert time.monotonic() - t0 < 60
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert left == []  # no rank, nsys or torchrun of this run is still running


def test_merged_median_beyond_the_points_is_estimated_close(monkeypatch):
    from labkit.ranks import merge
    from labkit.stats.summaries import kernel_summary

    monkeypatch.setattr(merge, "POINTS", 16)  # each rank sends 16 order statistics per kernel name
    real = FIX / "real" / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite"
    two = load_reports([real, real], ranks=[0, 1], frames=("kernels",))
    got = two.kernel_summary(merged=True).set_index("name")
    k = two.kernels()
    want = kernel_summary(Report.from_frames(kernels=k.drop(columns="rank"))).set_index("name")
    assert got.index.tolist() == want.index.tolist()
    for c in ("instances", "total_ns", "min_ns", "max_ns"):
        assert got[c].tolist() == want[c].tolist()
    assert got["stddev_ns"].to_numpy() == pytest.approx(want["stddev_ns"].to_numpy(), rel=1e-9)
    for name, row in got.iterrows():  # between the 40th and 60th percentiles of all instances
        d = k.loc[k["demangled"] == name, "duration_ns"]
        assert d.quantile(0.4) <= row["med_ns"] <= d.quantile(0.6), name
