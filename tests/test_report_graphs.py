"""Whole-graph rows (``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``, what nsys records for a CUDA graph launch by
default) take part in gpu_ops, the projection, utilization, the bottleneck and kernel_summary.

No committed export has graph rows yet (the H100 ``fp16_cuda_graphs`` profile is not in the tree; to
make one on a GPU machine: ``nsys profile -t cuda,nvtx --cuda-graph-trace=graph -o graphs python
source_code/detect_video.py --input data/clip.mp4 --device cuda --fp16 --cuda-graphs`` then
``nsys export --type sqlite graphs.nsys-rep``). Until then the test turns the real H100 export
``gputest.nsys2025.3.sqlite`` into one: each ``torch_infer`` range's kernels become one graph row
spanning them, launched by the first of their calls, as graph-level tracing records it (columns as
CUPTI's CUpti_ActivityGraphTrace). Without graph support those kernels vanish from every analysis.
"""
from __future__ import annotations

import shutil
import sqlite3

from pathlib import Path

import numpy as np

import labkit

FIX = Path(__file__).parent / "fixtures"
SRC = FIX / "gputest.nsys2025.3.sqlite"


def _as_graphs(dst: Path) -> list[tuple[int, int]]:
    """Rewrite ``dst``: the kernels of each torch_infer instance become one graph row; returns their spans."""
    proj = labkit.gpu_projection(labkit.load_report(SRC))
    spans = [(int(a), int(b)) for a, b in proj.loc[proj["name"] == "torch_infer", ["proj_start_ns", "proj_end_ns"]]
             .to_numpy()]
    con = sqlite3.connect(dst)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
                "correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL)")
    for a, b in spans:
        first = con.execute("SELECT deviceId, contextId, streamId, correlationId, globalPid FROM "
                            "CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= ? AND end <= ? ORDER BY start LIMIT 1",
                            (a, b)).fetchone()
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, ?, ?, ?, ?, ?, 1)", (a, b, *first))
        gone = con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= ? AND end <= ?", (a, b)).rowcount
        assert gone > 1
    con.commit()
    con.close()
    return spans


def test_graph_rows_count_in_every_analysis(tmp_path):
    dst = tmp_path / "graphs.sqlite"
    shutil.copyfile(SRC, dst)
    dst.chmod(0o644)
    spans = _as_graphs(dst)
    before, rep = labkit.load_report(SRC), labkit.load_report(dst)
    assert len(spans) == 10 and len(rep.kernels) == len(before.kernels) - 270  # 27 kernels per instance

    assert len(rep.graphs) == 10 and (rep.graphs["name"] == "[CUDA graph 1]").all()
    ops = rep.gpu_ops()
    assert (ops["category"] == "graph").sum() == 10 and ops["start_ns"].is_monotonic_increasing

    # projection: each infer instance keeps its GPU span, now from one launch
    old, new = (labkit.gpu_projection(r) for r in (before, rep))
    for name in ("torch_infer", "infer"):
        o, n = (p[p["name"] == name].sort_values("start_ns") for p in (old, new))
        assert list(n["proj_start_ns"]) == list(o["proj_start_ns"])
        assert list(n["proj_end_ns"]) == list(o["proj_end_ns"])
        assert list(n["num_gpu_ops"]) == list(o["num_gpu_ops"] - 27 + 1)  # 27 kernels -> 1 graph launch

    ks = labkit.kernel_summary(rep).set_index("name")
    assert ks.loc["[CUDA graph 1]", "instances"] == 10
    assert ks.loc["[CUDA graph 1]", "total_ns"] == sum(b - a for a, b in spans)

    # busy time: a graph covers its kernels (and the gaps between them)
    busy = {k: labkit.gpu_utilization(r, bin_ms=50)["busy_ns"].sum() for k, r in (("old", before), ("new", rep))}
    assert busy["new"] >= busy["old"]
    assert labkit.bottleneck(rep).gpu_busy_frac >= labkit.bottleneck(before).gpu_busy_frac > 0
    # the stage's kernel-busy time: one graph row covers the gaps between its kernels, so it is at least
    # the kernels' own busy time and at most their first-to-last span
    st = labkit.stage_table(rep).set_index("stage")
    kernels_busy = labkit.stage_table(before).set_index("stage").loc["infer", "gpu_ms"]
    span = old.loc[old["name"] == "infer", "proj_duration_ns"].sum() / 1e6
    assert kernels_busy <= st.loc["infer", "gpu_ms"] <= span + 1e-9


def test_profile_asks_for_graph_nodes_where_nsys_supports_it():
    from labkit.env import find_nsys
    from labkit.record.nsys import profile_command
    from labkit.record.tool import supports_option

    argv = profile_command(["python", "a.py"], output=Path("r/x"), nsys="nsys")
    assert "--cuda-graph-trace=node" in argv
    assert "--cuda-graph-trace=node" not in profile_command(["a"], output=Path("x"), trace=("nvtx",))
    mine = profile_command(["a"], output=Path("x"), nsys_args=["--cuda-graph-trace=graph"])
    assert mine.count("--cuda-graph-trace=graph") == 1 and "--cuda-graph-trace=node" not in mine
    exe = find_nsys()
    if exe:  # Debian's 2022.4 lists it (nsys profile --help)
        assert supports_option(exe, "--cuda-graph-trace") and not supports_option(exe, "--no-such-option-here")
