"""A stage whose work a library's worker pool shares (ONNX Runtime's intra-op threads, OpenMP): the
pool's threads carry no ranges of their own, so the what-if model counts their time inside the
stage's ranges as the stage's (labkit.judge.whatif.WhatIf.helpers). Known answer from the lab's own
full CPU run (2-core VM, 2026-11-26, ``make lab``): ``ort_int8`` measured 2.22x over this
``ort_fp32`` profile (95 % interval 1.60-3.13x) with 'infer' from 33.1 to 14.9 ms a frame; the
bound "'infer' costs nothing" said 1.14x before the pool was counted with the stage."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import labkit
from labkit.judge.whatif import WhatIf

PROFILE = Path(__file__).parent / "fixtures" / "lab" / "ort_fp32.cpu-2core.nsys2022.4.nsys-rep"
MEASURED_HIGH = 3.13  # INT8 over this run, the top of its 95 % interval
WARMUP = 4  # batches of 4: the lab's 16 warm-up frames


@pytest.fixture(scope="module")
def rep(tmp_path_factory):
    here = tmp_path_factory.mktemp("pool") / PROFILE.name  # the export goes beside it, not into tests/
    shutil.copy(PROFILE, here)
    return labkit.load_report(here)


@pytest.mark.nsys
def test_the_pool_threads_are_helpers_and_their_time_goes_with_infer(rep):
    a = labkit.advise(rep, warmup=WARMUP)
    m = WhatIf(rep, a.attrs["window"], a.attrs["stages"])
    infer = m.stages[m.stages["stage"] == "infer"].iloc[0]
    helped = m.helper_ms(int(infer["tid"]), ["infer"])
    # ONNX Runtime's intra-op threads: no ranges, busy most of the window, nearly all of it inside 'infer'
    assert helped and max(helped.values()) > 0.5 * float(infer["own_ms"])
    own = m.threads.set_index("tid")["own_ms"]
    assert all(h in m.helpers and helped[h] <= own[h] + 1e-6 for h in helped)


@pytest.mark.nsys
def test_a_cheaper_infer_bound_is_a_bound_on_what_int8_measured(rep):
    a = labkit.advise(rep, warmup=WARMUP)
    bound = a[(a["rule"] == "dominant_stage") & (a["stage"] == "infer")]
    assert len(bound) == 1 and bound["basis"].iloc[0] == "bound"
    assert float(bound["predicted_speedup"].iloc[0]) >= MEASURED_HIGH
    assert "worker pool" in bound["assumptions"].iloc[0]
    # and no finding exceeds its own Amdahl limit
    w = a["window_ms"].astype(float)
    assert (a["predicted_speedup"] <= w / (w - a["saves_ms"]) * (1 + 1e-9)).all()
