"""A stage whose work a library's worker pool shares (ONNX Runtime's intra-op threads, OpenMP): the
pool's threads carry no ranges of their own, so the what-if model counts their time inside the
stage's ranges as the stage's (labkit.judge.whatif.WhatIf.helpers). Known answer from the lab's own
full CPU runs (2-core VM, 2026-11-26, ``make lab``): ``ort_int8`` measured 2.22x (95 % interval
1.60-3.13x) and 2.07x (1.62-2.64x) over these ``ort_fp32`` profiles; the bound "'infer' costs nothing"
said 1.14x on the first and nothing at all on the second before the pool was counted with the stage."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import labkit
from labkit.judge.whatif import WhatIf

LAB = Path(__file__).parent / "fixtures" / "lab"
# (profile, the top of the 95 % interval of what ort_int8 measured over that ort_fp32 run)
RUNS = {"run1": (LAB / "ort_fp32.cpu-2core.nsys2022.4.nsys-rep", 3.13),
        "run2": (LAB / "ort_fp32.cpu-2core.r2.nsys2022.4.nsys-rep", 2.64)}
WARMUP = 4  # batches of 4: the lab's 16 warm-up frames


@pytest.fixture(scope="module", params=sorted(RUNS))
def run(request, tmp_path_factory):
    path, high = RUNS[request.param]
    here = tmp_path_factory.mktemp("pool") / path.name  # the export goes beside it, not into tests/
    shutil.copy(path, here)
    return labkit.load_report(here), high


@pytest.fixture(scope="module")
def rep(run):
    return run[0]


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
def test_a_cheaper_infer_predicts_what_int8_measured_and_is_no_bound_where_cores_were_short(run):
    """In run 2 a pool thread's own time was within 10 % of the main thread's, and the model called the
    run balanced (no finding at all) until a pool's time inside a stage counted as that stage's. The
    finding predicts at least what INT8 measured. It is no bound: the pool's threads, the main thread
    and the decoder were ready to run at once on the VM's two cores for much of the window, and times
    measured while threads wait for a core shrink when a change frees one."""
    from labkit.judge.accounting import account

    rep, high = run
    a = labkit.advise(rep, warmup=WARMUP)
    found = a[(a["rule"] == "dominant_stage") & (a["stage"] == "infer")]
    assert len(found) == 1 and float(found["predicted_speedup"].iloc[0]) >= high
    assert "worker pool" in found["assumptions"].iloc[0]
    acc = account(rep, window=a.attrs["window"])
    assert acc.cores == 2 and acc.oversubscribed_ms > 0.2 * acc.window_ms, (acc.oversubscribed_ms, acc.window_ms)
    assert found["basis"].iloc[0] == "estimate" and "2 cores" in found["assumptions"].iloc[0]
    # and no finding exceeds its own Amdahl limit
    w = a["window_ms"].astype(float)
    assert (a["predicted_speedup"] <= w / (w - a["saves_ms"]) * (1 + 1e-9)).all()
