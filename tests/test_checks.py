"""The hands-on exercises' check cells (labbook.check) on real profiles whose answer is known: the
lab's synchronous and queued CPU runs, its interval-3 run (reports/reference/cpu-2core, nsys
2022.4), and real reports by others that traced OS runtime calls (tests/fixtures/real). A check
says yes only when the profile shows the change; None (nothing typed yet) never passes."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from labbook import check
from labbook.outcome import Outcome

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "reports" / "reference" / "cpu-2core"
OSRT = ROOT / "tests" / "fixtures" / "real" / "NTHU-SC_2025.1_icon_graupel_gpu.sqlite"


def test_stages_on_their_own_threads_overlap_and_the_synchronous_run_does_not():
    queued = check.overlap(str(REF / "queues.sqlite"))
    assert queued.ok is True and "The stages ran on 6 thread(s)" in queued.text  # the stages' threads only
    sync = check.overlap(str(REF / "baseline.sqlite"))
    assert sync.ok is False and "1 thread(s)" in sync.text and "Which option" in sync.text


def test_the_detector_ran_on_one_frame_in_k():
    k3 = check.interval(str(REF / "interval3.sqlite"), 3)
    assert k3.ok is True and "43 of 128 frames" in k3.text
    assert check.interval(str(REF / "interval3.sqlite"), 8).ok is False
    assert check.interval(str(REF / "queues.sqlite"), 3).ok is False  # every frame detected


def test_calls_per_frame_at_most_one_in_b():
    one = check.batched(str(REF / "queues.sqlite"), 4)
    assert one.ok is False and "128 calls on 128 frames" in one.text
    assert check.batched(str(REF / "queues.sqlite"), 1).ok is True


def test_a_trace_with_os_runtime_calls_keeps_blocked_time_apart():
    assert check.traced_waits(str(OSRT)).ok is True
    no = check.traced_waits(str(REF / "baseline.sqlite"))
    assert no.ok is False and "Add `osrt`" in no.text


def test_infer_follows_the_pixels():
    """The same report on both sides moved nothing: no pixels followed."""
    same = check.input_size(str(REF / "queues.sqlite"), str(REF / "queues.sqlite"), "192x320", "384x640")
    assert same.ok is False and "25% of the pixels" in same.text


def test_int8_share_falls_without_the_fusions():
    all_ = pd.Series({"quantized": 0.89, "qdq": 0.02, "float": 0.09})
    basic = pd.Series({"quantized": 0.0, "qdq": 0.18, "float": 0.82})
    assert check.int8_share(basic, all_, "basic").ok is True
    assert check.int8_share(all_, all_, "extended").ok is False
    assert check.int8_share(all_, all_, "all").ok is None


def test_nothing_typed_or_a_failed_run_never_passes():
    for fn, args in ((check.overlap, ()), (check.batched, (4,)), (check.interval, (3,)), (check.traced_waits, ())):
        assert fn(None, *args).ok is None
        bad = fn(Outcome("my_threads", "failed", "the application exited 2"), *args)
        assert bad.ok is False and "the application exited 2" in bad.text
    assert "Nothing to check yet" in check.waiting("type it").text
