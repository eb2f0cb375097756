"""Bad input: each case is a clear error (a LabkitError naming the fix) or an empty frame plus
a warning, never a bare sqlite3/pandas exception."""
from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.errors import LabkitError
from labkit.nsys import NsysNotFoundError, ReportExistsError, profile
from labkit.report import NVTX_COLUMNS, SUMMARY_COLUMNS, ReportError, ReportWarning, load_report

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
        rep.kernel_summary()


def test_corrupt_sqlite(tmp_path):
    data = bytearray((FIX / "gputest.nsys2025.3.sqlite").read_bytes())
    data[4096:len(data) - 4096] = b"\xa5" * (len(data) - 8192)  # keep the header, wreck the pages
    p = tmp_path / "bad.sqlite"
    p.write_bytes(bytes(data))
    with pytest.raises(ReportError):
        rep = load_report(p)
        rep.load_all()
        rep.kernel_summary()


def test_export_without_nvtx_warns_and_gives_empty_frames(tmp_path):
    p = _copy("gputest.nsys2025.3.sqlite", tmp_path)
    con = sqlite3.connect(p)
    con.execute("DROP TABLE NVTX_EVENTS")
    con.commit()
    con.close()
    with pytest.warns(ReportWarning, match="no NVTX_EVENTS"):
        rep = load_report(p)
    assert len(rep.nvtx) == 0 and set(NVTX_COLUMNS) <= set(rep.nvtx.columns)
    assert len(rep.nvtx_summary()) == 0 and set(SUMMARY_COLUMNS[1:]) <= set(rep.nvtx_summary().columns)
    assert len(rep.gpu_projection()) == 0
    assert len(rep.kernel_summary()) == 6  # the GPU side is still there (6 kernel names)
    assert len(rep.stage_table()) == 0 and len(rep.batches()) == 0
    assert "No NVTX ranges" in str(rep.bottleneck())


def test_export_without_cuda_tables_warns():
    with pytest.warns(ReportWarning, match="no CUDA tables"):
        rep = load_report(FIX / "cpu_threads.nsys2022.4.sqlite")
    assert len(rep.kernels) == 0 and len(rep.memcpy_summary()) == 0


def test_export_with_api_but_no_gpu_activity_warns():
    with pytest.warns(ReportWarning, match="no GPU activity"):
        rep = load_report(FIX / "gputest.nvtx-only.nsys2022.4.sqlite")
    assert len(rep.cuda_api) == 1 and len(rep.kernels) == 0 and len(rep.gpu_projection()) == 0


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
