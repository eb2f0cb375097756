"""labkit.compare on real exports: the lab pipeline under nsys 2022.4 (CPU) and 2025.3 (H100), and
two reports made by others; rows agree with each report's own summaries."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.stats.compare import COMPARE_COLUMNS

FIX = Path(__file__).parent / "fixtures"
A = FIX / "pipeline.nsys2022.4.sqlite"
B = FIX / "pipeline.nsys2025.3.sqlite"


@pytest.fixture(scope="module")
def diff():
    return labkit.compare(A, B)


def test_rows_are_each_reports_own_totals(diff):
    a, b = labkit.load_report(A), labkit.load_report(B)
    assert list(diff.columns) == COMPARE_COLUMNS
    nv = diff[diff["kind"] == "nvtx"].set_index(["domain", "name"])
    for rep, col in ((a, "total_a_ns"), (b, "total_b_ns")):
        s = labkit.nvtx_summary(rep).groupby(["domain", "name"])["total_ns"].sum()
        assert nv[col].loc[s.index].tolist() == s.tolist()
    api = diff[diff["kind"] == "cuda_api"].set_index("name")
    s = labkit.cuda_api_summary(b).set_index("name")
    assert api.loc[s.index, "total_b_ns"].tolist() == s["total_ns"].tolist()
    assert (api["total_a_ns"] == 0).all()  # the CPU run made no CUDA calls
    k = diff[diff["kind"] == "kernel"]
    assert k["total_b_ns"].sum() == labkit.kernel_summary(b)["total_ns"].sum() and len(k) > 0


def test_sorted_by_how_much_each_change_moved_the_total(diff):
    d = diff["delta_ns"].abs().to_numpy()
    assert (d[:-1] >= d[1:]).all()
    assert (diff["delta_ns"] == diff["total_b_ns"] - diff["total_a_ns"]).all()
    assert (diff["delta_count"] == diff["count_b"] - diff["count_a"]).all()
    infer = diff[(diff["kind"] == "nvtx") & (diff["name"] == "infer")].iloc[0]
    assert infer["delta_ns"] < 0 and np.isclose(infer["delta_pct"], infer["delta_ns"] * 100 / infer["total_a_ns"])
    new = diff[diff["total_a_ns"] == 0]
    assert new["delta_pct"].isna().all()


def test_a_report_against_itself_changes_nothing():
    rep = labkit.load_report(FIX / "real" / "extra-p_2022.1_concurrent_s16_windows.sqlite")
    d = labkit.compare(rep, rep)
    assert len(d) > 0 and (d["delta_ns"] == 0).all() and (d["delta_count"] == 0).all()
    assert set(d.loc[d["kind"] == "nvtx", "domain"]) == {"de.tu-darmstadt.parallel.extra_prof"}


def test_domains_stay_apart_and_within_restricts_both():
    rep = labkit.load_report(FIX / "domains.nsys2022.4.sqlite")
    d = labkit.compare(rep, rep, within="mydomain:work")
    nv = d[d["kind"] == "nvtx"]
    assert set(zip(nv["domain"], nv["name"])) == {("mydomain", "work")}


def test_plot_is_a_figure_without_pyplot_state(diff):
    import matplotlib
    from matplotlib.figure import Figure

    fig = labkit.plot_compare(diff, top=6)
    assert isinstance(fig, Figure)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == 6 and labels[-1].startswith("nvtx: infer")  # the biggest change drawn on top
    if "matplotlib.pyplot" in sys.modules:
        assert not matplotlib.pyplot.get_fignums()


def test_command_line_prints_the_biggest_changes():
    out = subprocess.run([sys.executable, "-m", "labkit", "compare", str(A), str(B), "--top", "3", "--csv"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == ",".join(COMPARE_COLUMNS) and len(out) == 4
    assert out[1].startswith("nvtx,infer,")
    bad = subprocess.run([sys.executable, "-m", "labkit", "compare", str(A), str(FIX / "nope.sqlite")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "nope.sqlite" in bad.stderr
