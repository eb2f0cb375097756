"""Bad input: each case is a clear error (a LabkitError naming the fix) or an empty frame plus
a note in Report.notes, never a bare sqlite3/pandas exception."""
from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import labkit
from labkit.errors import LabkitError
from labkit.record.tool import NsysNotFoundError
from labkit.record.nsys import ReportExistsError
from labkit.report.reader import NVTX_COLUMNS, SUMMARY_COLUMNS, ReportError
from labkit.report.load import load_report, profile

FIX = Path(__file__).parent / "fixtures"


def _copy(name: str, dst: Path) -> Path:
    out = dst / name
    shutil.copyfile(FIX / name, out)
    out.chmod(0o644)
    return out


def test_missing_path():
    with pytest.raises(ReportError, match="report not found"):
        load_report("/nonexistent/run.nsys-rep")


def test_directory(tmp_path):
    with pytest.raises(ReportError, match="is a folder"):
        load_report(tmp_path)


@pytest.mark.parametrize("name", ["notes.sqlite", "notes.txt", "run.qdstrm"])
def test_file_that_is_not_a_report(tmp_path, name):
    p = tmp_path / name
    p.write_text("just some text\n")
    with pytest.raises(ReportError):
        load_report(p)


def test_sqlite_that_is_not_an_export(tmp_path):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(ReportError, match="not an Nsight Systems export"):
        load_report(p)


def test_truncated_sqlite(tmp_path):
    p = tmp_path / "cut.sqlite"
    p.write_bytes((FIX / "gputest.nsys2025.3.sqlite").read_bytes()[:48 * 1024])
    with pytest.raises(ReportError):
        rep = load_report(p)
        rep.load_all()
        labkit.kernel_summary(rep)


def test_corrupt_sqlite(tmp_path):
    data = bytearray((FIX / "gputest.nsys2025.3.sqlite").read_bytes())
    data[4096:len(data) - 4096] = b"\xa5" * (len(data) - 8192)  # keep the header, wreck the pages
    p = tmp_path / "bad.sqlite"
    p.write_bytes(bytes(data))
    with pytest.raises(ReportError):
        rep = load_report(p)
        rep.load_all()
        labkit.kernel_summary(rep)


def test_export_without_nvtx_says_so_and_gives_empty_frames(tmp_path):
    p = _copy("gputest.nsys2025.3.sqlite", tmp_path)
    con = sqlite3.connect(p)
    con.execute("DROP TABLE NVTX_EVENTS")
    con.commit()
    con.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing part is data (has_nvtx), never a warning
        rep = load_report(p)
    assert not rep.has_nvtx and rep.has_cuda and any("no NVTX_EVENTS" in n for n in rep.notes)
    assert len(rep.nvtx) == 0 and set(NVTX_COLUMNS) <= set(rep.nvtx.columns)
    assert len(labkit.nvtx_summary(rep)) == 0 and set(SUMMARY_COLUMNS[1:]) <= set(labkit.nvtx_summary(rep).columns)
    assert len(labkit.gpu_projection(rep)) == 0
    assert len(labkit.kernel_summary(rep)) == 6  # the GPU side is still there (6 kernel names)
    assert len(labkit.stage_table(rep)) == 0 and len(labkit.batches(rep)) == 0
    assert "no nvtx ranges, so no stage to name" in str(labkit.bottleneck(rep)).lower()


def test_export_without_cuda_tables_is_data_not_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = load_report(FIX / "cpu_threads.nsys2022.4.sqlite")
    assert not rep.has_cuda and rep.has_nvtx and any("no CUDA tables" in n for n in rep.notes)
    assert len(rep.kernels) == 0 and len(labkit.memcpy_summary(rep)) == 0


def test_export_with_api_but_no_gpu_activity_names_its_nsys():
    rep = load_report(FIX / "gputest.nvtx-only.nsys2022.4.sqlite")
    assert rep.has_cuda  # CUDA was traced: the API calls are there, the GPU side is not
    note = next(n for n in rep.notes if "no GPU activity" in n)
    assert "(2022.4.2.1)" in note and "CUDA 13" not in note  # the report's own nsys, not a fixed guess
    assert len(rep.cuda_api) == 1 and len(rep.kernels) == 0 and len(labkit.gpu_projection(rep)) == 0


def test_nsys_rep_without_nsys(tmp_path, monkeypatch):
    p = _copy("annotated.nsys2022.4.nsys-rep", tmp_path)
    monkeypatch.setenv("LABKIT_NSYS", str(tmp_path / "no-such-nsys"))
    with pytest.raises(NsysNotFoundError, match="scripts/install-nsys.*LABKIT_NSYS"):
        load_report(p)


def test_profile_without_nsys(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_NSYS", str(tmp_path / "no-such-nsys"))
    with pytest.raises(NsysNotFoundError, match="scripts/install-nsys"):
        profile([sys.executable, "-c", "pass"], name="x", outdir=tmp_path)


def test_profile_refuses_to_overwrite(tmp_path):
    (tmp_path / "run.nsys-rep").write_bytes(b"old")
    with pytest.raises(ReportExistsError, match="overwrite=True"):
        profile([sys.executable, "-c", "pass"], name="run", outdir=tmp_path)
    assert (tmp_path / "run.nsys-rep").read_bytes() == b"old"


def test_errors_are_labkit_errors():
    assert issubclass(ReportError, LabkitError) and issubclass(NsysNotFoundError, LabkitError)


@pytest.mark.parametrize("args", [["summary", "/nonexistent.sqlite"], ["profile", "--name", "x", "--", "true"]])
def test_cli_errors_are_one_line(tmp_path, args):
    env = {"PATH": "/usr/bin:/bin", "LABKIT_NSYS": str(tmp_path / "none"), "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "labkit", *args], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=120)
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("labkit: ")
