"""run_step turns every LabkitError, not only a failed run, into a ledger row with status
failed and a one-line reason (issue 25): here nsys named by LABKIT_NSYS is missing, a real
NsysNotFoundError raised by labkit before the application starts."""
from __future__ import annotations

import labbook
import labbook as lab
import pytest
from labkit import Ledger
from labkit.record.tool import NsysNotFoundError


@pytest.fixture
def led(tmp_path, monkeypatch):
    for mod in (labbook.runs, labbook.reference, labbook.display):
        monkeypatch.setattr(mod, "LEDGER", tmp_path / "ledger.jsonl")
    monkeypatch.setattr(labbook.runs, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(labbook.runs, "PROFILES", tmp_path / "profiles")
    monkeypatch.setenv("LABKIT_NSYS", str(tmp_path / "no-such-nsys"))
    return Ledger(tmp_path / "ledger.jsonl")


def test_a_missing_nsys_is_a_failed_row_with_one_line(led, monkeypatch):
    monkeypatch.delenv("LABKIT_STRICT", raising=False)
    out = lab.run_step("baseline", mode="small", guess=1.0)
    assert out.status == "failed" and "\n" not in out.reason
    assert "NsysNotFoundError" in out.reason and "LABKIT_NSYS" in out.reason
    row = led.rows()[-1]
    assert row["status"] == "failed" and row["reason"] == out.reason and row["guess"] == 1.0


def test_strict_mode_raises_it(led, monkeypatch):
    monkeypatch.setenv("LABKIT_STRICT", "1")
    with pytest.raises(NsysNotFoundError):
        lab.run_step("baseline", mode="small")


def test_the_decode_ceiling_is_measured_once_per_machine_and_mode(led, monkeypatch):
    """A real decode-only run of the small clip: one ledger row labelled ceiling=decode, and no
    second run while it stands."""
    monkeypatch.delenv("LABKIT_STRICT", raising=False)
    out = labbook.runs.decode_ceiling("small")
    assert out is not None and out.status == "ok", out
    row = led.rows()[-1]
    assert row["ceiling"] == "decode" and row["mode"] == "small" and row["kind"] == "exercise"
    assert row["provenance"]["mode"] == "small"  # the mode labkit.bench matches later rows by
    assert row["config"]["decode_only"] is True and row["metrics"]["fps"] > 0
    assert labbook.runs.decode_ceiling("small") is None and len(led.rows()) == 1
