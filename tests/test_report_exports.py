"""Exports of .nsys-rep files: nothing partial survives, a cached export is reused only when complete,
read-only folders export into a per-user cache, a report newer than the installed nsys says so."""
from __future__ import annotations

import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

import labkit
from labkit.env import find_nsys, nsys_version
from labkit.record.tool import NsysError
from labkit.record.export import export_is_complete, report_version
from labkit.report.reader import ReportError
from labkit.report.load import load_report

FIX = Path(__file__).parent / "fixtures"
REP = "annotated.nsys2022.4.nsys-rep"
needs_nsys = pytest.mark.skipif(find_nsys() is None, reason="nsys not found (scripts/install-nsys or LABKIT_NSYS)")


def _rep(folder: Path) -> Path:
    """A writable copy of the real 2022.4 report in ``folder``."""
    (out := Path(shutil.copy(FIX / REP, folder))).chmod(0o644)
    return out


def test_load_report_of_bytes_is_a_clear_error():
    with pytest.raises(ReportError, match="takes a path"):
        load_report(b"SQLite format 3\x00")


def test_completeness_is_read_from_the_tables(tmp_path):
    assert all(export_is_complete(p) for p in FIX.glob("*.sqlite"))
    partial = tmp_path / "partial.sqlite"
    con = sqlite3.connect(partial)  # what a failed `nsys export` left behind (issue 14)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE ProcessStreams (globalPid INTEGER)")
    con.commit()
    con.close()
    assert not export_is_complete(partial) and not export_is_complete(FIX / REP)


@pytest.mark.nsys
@needs_nsys
def test_a_partial_export_newer_than_the_report_is_not_reused(tmp_path):
    rep = _rep(tmp_path)
    db = rep.with_suffix(".sqlite")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE ProcessStreams (globalPid INTEGER)")
    con.commit()
    con.close()
    loaded = load_report(rep)  # was: the partial file reused, an empty report and no error
    assert len(loaded.nvtx) == 57 and export_is_complete(db)
    assert loaded.meta["capture_nsys_version"] == loaded.nsys_version == "2022.4.2.1"  # read from the .nsys-rep
    assert loaded.meta["export_source"] == REP  # 2022.4 writes EXPORT_INPUT_FILE


@pytest.mark.nsys
@needs_nsys
def test_a_failed_export_leaves_no_sqlite(tmp_path):
    rep = tmp_path / "broken.nsys-rep"
    rep.write_bytes((FIX / REP).read_bytes()[:4000])  # a truncated report
    with pytest.raises(NsysError):
        load_report(rep)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.nsys-rep"]


@pytest.mark.nsys
@needs_nsys
def test_a_report_newer_than_nsys_names_both_versions(tmp_path):
    # No report of a newer nsys is at hand (none in fixtures/ or reports/reference/, no GPU machine
    # lent): the real 2022.4 header, its version string changed and its body cut, so that 2022.4's
    # export fails as on a newer report. (With only the version string changed, 2022.4 exports it
    # fine: labkit names the versions only when the export has failed.)
    rep = tmp_path / "future.nsys-rep"
    head = (FIX / REP).read_bytes()[:200].replace(b"2022.4.2.1", b"2025.5.1.0")
    rep.write_bytes(head + b"2025.5.1.0" + b"\x00" * 2000)
    assert report_version(rep) == "2025.5.1.0"
    ours = ".".join(nsys_version().split(".")[:2])
    with pytest.raises(NsysError, match=rf"{rep} was written by nsys 2025\.5; the installed {ours} cannot "
                                        r"read it: export it with a newer nsys, or pass the \.sqlite$"):
        load_report(rep)


@pytest.mark.nsys
@needs_nsys
def test_a_read_only_folder_exports_into_a_private_per_user_cache(tmp_path, monkeypatch):
    import os

    ro = tmp_path / "shared"
    ro.mkdir()
    rep = _rep(ro)
    ro.chmod(0o555)
    if os.access(ro, os.W_OK):  # root writes anywhere: let labkit see the folder as a user would
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == ro and mode == os.W_OK
                            else real(p, mode, **kw))
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    try:
        loaded = load_report(rep)
        again = load_report(rep)
    finally:
        ro.chmod(0o755)
    cache = tmp_path / "cache" / "exports"
    assert len(loaded.nvtx) == 57 and [p.suffix for p in cache.iterdir()] == [".sqlite"]
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and not rep.with_suffix(".sqlite").exists()
    assert again._db is not None and Path(again.meta.get("export_source") or "").name == REP
