"""The hands-on exercises' check cells (labbook.check) on real profiles whose answer is known: the
lab's synchronous and queued CPU runs, its interval-3 run (reports/reference/cpu-2core, nsys
2022.4), and real reports by others that traced OS runtime calls (tests/fixtures/real). A check
says yes only when the profile shows the change; None (nothing typed yet) never passes."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

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


def test_a_check_of_a_report_the_profile_did_not_write_says_what_its_log_says(tmp_path):
    """A by-hand profile that failed leaves no report: the check is one 'not yet' line quoting the
    log's last line (the notebooks write <report>.log beside it), never a ReportError traceback."""
    import labbook

    (tmp_path / "by_hand_mine.log").write_text("Collecting data...\nError: the application exited with 1\n")
    c = labbook.check.traced_waits(str(tmp_path / "by_hand_mine.nsys-rep"))
    assert c.ok is False and "\n" not in str(c) and "No report at" in str(c)
    assert "Error: the application exited with 1" in str(c)
    assert "Run the profile cell again" in str(labbook.check.traced_waits(str(tmp_path / "nothing.nsys-rep")))


def test_a_by_hand_profile_that_wrote_no_report_skips_the_cells_reading_it_with_its_logs_last_line(tmp_path,
                                                                                                  monkeypatch):
    """Notebook 01's profile cell: no report is one line (the log's last line, the fix) that the cells
    reading it show instead of a FileNotFoundError; a test (LABKIT_STRICT) gets the log's end raised."""
    import labbook

    rep = tmp_path / "by_hand.nsys-rep"
    (tmp_path / "by_hand.log").write_text("".join(f"line {i}\n" for i in range(30)) + "Error: no session\n\n")
    monkeypatch.delenv("LABKIT_STRICT", raising=False)
    note = labbook.missing_report_note(rep, what="the cells below read it").data
    assert "\n" not in str(note) and "Error: no session" in str(note) and "line 29" not in str(note)
    assert "so they are skipped" in str(note) and "run the profile cell again" in str(note)
    assert "wrote no log" in labbook.missing_report_note(tmp_path / "other.nsys-rep", what="x").data
    monkeypatch.setenv("LABKIT_STRICT", "1")
    with pytest.raises(RuntimeError, match="(?s)line 11.*Error: no session") as e:
        labbook.missing_report_note(rep, what="x")
    assert "line 10" not in str(e.value)  # its last 20 lines
    rep.write_bytes(b"x")
    assert labbook.missing_report_note(rep, what="x") is None
