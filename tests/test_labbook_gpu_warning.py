"""labbook warns when a GPU run's report holds no GPU activity (issue 18, item 9), on real exports.

``gputest.nvtx-only.nsys2022.4.sqlite`` is a real GPU run (the H100, a CUDA 13 driver) recorded
by Debian's nsys 2022.4: NVTX and one CUDA API row, no kernel and no copy.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

import labkit
from labbook.display import NoGpuActivityWarning, no_gpu_activity, report, row_config

FIX = Path(__file__).parent / "fixtures"
NVTX_ONLY = FIX / "gputest.nvtx-only.nsys2022.4.sqlite"
WITH_KERNELS = FIX / "gputest.nsys2025.3.sqlite"


def test_a_gpu_run_without_gpu_activity_is_named_with_its_cause():
    why = no_gpu_activity(labkit.load_report(NVTX_ONLY), {"device": "cuda:0"})
    assert why is not None and "\n" not in why
    assert why.startswith(f"{NVTX_ONLY.name}: a cuda:0 run, but its report holds only CUDA API calls")
    assert "(2022.4.2.1) is likely too old for the GPU driver" in why and "doctor --probe" in why


@pytest.mark.parametrize("path, config", [
    (NVTX_ONLY, {"device": "cpu"}),  # a CPU run has no GPU activity by design
    (NVTX_ONLY, {}),  # nothing says where it ran
    (WITH_KERNELS, {"device": "cuda"}),  # the same program under nsys 2025.3: kernels recorded
])
def test_no_warning_where_nothing_is_missing(path, config):
    assert no_gpu_activity(labkit.load_report(path), config) is None


def test_report_warns_once_in_one_line_and_still_returns_the_report():
    run = SimpleNamespace(profile=str(NVTX_ONLY), config={"device": "cuda", "batch_size": 8})
    with pytest.warns(NoGpuActivityWarning) as caught:
        rep = report(run)
    assert isinstance(rep, labkit.Report) and rep.has_nvtx
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report(SimpleNamespace(profile=str(WITH_KERNELS), config={"device": "cuda"}))


def test_ledger_rows_give_their_config():
    assert row_config({"step": "x", "config.device": "cuda", "config.frames": float("nan"), "fps": 3.0}) == {
        "device": "cuda"}
