"""run_step turns every LabkitError, not only a failed run, into a ledger row with status
failed and a one-line reason (issue 25): here nsys named by LABKIT_NSYS is missing, a real
NsysNotFoundError raised by labkit before the application starts. A notebook goes on past such a
step to its end (issue 33): notebook 05 headless, its INT8 step failing for a real reason."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import labbook
import labbook as lab
import pytest
from labkit import Ledger
from labkit.record.tool import NsysNotFoundError
from faultkit import mount  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.minutes(4)
@pytest.mark.nsys
@pytest.mark.slow
def test_05_goes_on_to_its_end_when_its_int8_step_fails(tmp_path, mount):
    """Notebook 05 run headless in small mode (``scripts/run_lab.py --only 05``: a real kernel, the
    real application under nsys, about 3 minutes here), with ort_int8 failing for a real reason:
    the folder the application writes its INT8 calibration scenes to
    (``$LABKIT_CACHE_DIR/backends/calibration_scenes``) is a read-only tmpfs, so calibration
    cannot write its first scene and the application exits with its error line; ort_fp32, which
    writes beside it, runs. 05 used to raise in ``lab.report(r)`` there; now it runs to its end,
    and each cell that needs ort_int8 says that it failed, why, and that it is skipped."""
    import nbformat

    cache, reports = tmp_path / "cache", tmp_path / "reports"
    (cache / "backends").mkdir(parents=True)
    mount("64k", ro=True, at=cache / "backends" / "calibration_scenes")
    env = {**os.environ, "LABKIT_MODE": "small", "LABKIT_REPORTS": str(reports), "LABKIT_CACHE_DIR": str(cache),
           "PYTHONPATH": str(ROOT)}
    env.pop("LABKIT_STRICT", None)  # strict: a failed step raises (the CI's whole-lab run)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_lab.py"), "--mode", "small", "--only", "05"],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)
    assert "run_lab: 05_INT8.ipynb done in" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
    assert out.returncode == 1 and "05_INT8.ipynb: ort_int8: " in out.stderr, out.stderr[-3000:]  # listed as failed
    rows = {r["step"]: r for r in Ledger(reports / "ledger.jsonl").rows() if r.get("status") != "repeat"}
    assert rows["ort_fp32"]["status"] == "ok", rows["ort_fp32"]
    why = rows["ort_int8"]["reason"]
    assert rows["ort_int8"]["status"] == "failed" and "calibration_scenes" in why, why  # the real cause

    nb = nbformat.read(reports / "notebooks" / "05_INT8.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)  # every cell ran, the last one included
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    said = {i: "".join(o.get("data", {}).get("text/markdown", "") for o in c.outputs) for i, c in enumerate(code)}
    needs = [i for i, c in enumerate(code) if "skip" in c.source]  # the cells that need ort_int8's result
    assert len(needs) >= 8, needs
    for i in needs:
        assert said[i].startswith("`ort_int8` failed (") and "calibration_scenes" in said[i], (code[i].source, said[i])
        assert said[i].endswith("so this cell is skipped; fix it and run the step again."), said[i]
