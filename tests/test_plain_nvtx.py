"""A program that is not the lab's, annotated only with plain ``nvtx`` (tests/programs/plain_nvtx.py:
two threads, domains IO and Compute both with a range ``read``, named categories), run under the real
nsys: one nvtx_summary row per domain, equal to ``nsys stats``'s own, and windows by range name."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import labkit
from labkit import env

PROGRAM = Path(__file__).parent / "programs" / "plain_nvtx.py"


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("plain_nvtx")
    rep = labkit.profile([sys.executable, str(PROGRAM)], name="plain", outdir=out, trace=("nvtx", "osrt"),
                         progress=False)
    return rep


@pytest.mark.nsys
def test_one_row_per_domain_as_nsys_stats(plain, tmp_path):
    ours = labkit.nvtx_summary(plain)
    rows = {(d, n): i for d, n, i in zip(ours["domain"], ours["name"], ours["instances"])}
    assert rows[("IO", "read")] == 6 and rows[("Compute", "read")] == 6  # two domains, one name: two rows
    assert rows[("", "step")] == 6 and rows[("", "train")] == 6
    db = Path(plain.path).with_suffix(".sqlite")
    subprocess.run([env.find_nsys(), "stats", "-q", "-r", "nvtxsum", "-f", "csv", "--force-export=false",
                    "-o", str(tmp_path / "o"), str(db)], check=True, capture_output=True)
    theirs = pd.read_csv(tmp_path / "o_nvtxsum.csv")
    labels = [f"{d}:{n}" if d else n for d, n in zip(ours["domain"], ours["name"])]
    assert labels == list(theirs["Range"])
    assert list(ours["total_ns"]) == list(theirs["Total Time (ns)"])


@pytest.mark.nsys
def test_categories_are_named_and_threads_are_the_programs(plain):
    nv = plain.nvtx
    reads = nv[nv["name"] == "read"]
    assert dict(zip(reads["domain"], reads["category_name"])) == {"IO": "disk", "Compute": "tensor"}
    assert (nv.loc[nv["domain"] == "", "category_name"] == "").all()
    assert set(plain.threads["pid"]) == set(nv["pid"])  # the profiled process only, not nsys's launcher's parent
    assert nv.loc[nv["domain"] == "IO", "global_tid"].nunique() == 1
    assert set(nv.loc[nv["domain"] == "IO", "global_tid"]).isdisjoint(nv.loc[nv["name"] == "step", "global_tid"])


@pytest.mark.nsys
def test_within_a_range_keeps_its_instances_and_what_starts_inside(plain):
    full = labkit.nvtx_summary(plain)
    inside = labkit.nvtx_summary(plain, within="train")
    got = dict(zip(zip(inside["domain"], inside["name"]), inside["instances"]))
    # the span is time: the other thread's IO reads that start during a train are kept too
    assert got[("", "train")] == 6 and set(got) <= {("", "train"), ("IO", "read")}
    steps = labkit.nvtx_summary(plain, within="step").set_index(["domain", "name"])["instances"]
    # the IO thread's reads overlap the steps in time: those that start inside a step are kept
    assert steps[("", "step")] == 6 and steps[("Compute", "read")] == 6 and steps[("", "train")] == 6
    assert 0 <= steps.get(("IO", "read"), 0) <= 6
    both = labkit.nvtx_summary(plain, within="Compute:read")
    assert set(zip(both["domain"], both["name"])) <= {("Compute", "read"), ("IO", "read")}
    assert full["instances"].sum() == 24
    with pytest.raises(labkit.report.window.WindowError, match="no NVTX range named 'nope'"):
        labkit.nvtx_summary(plain, within="nope")
