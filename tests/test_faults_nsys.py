"""Issue 25's faults around nsys, tried for real: a report replaced by an older-mtime copy,
another program's .sqlite beside a report, nsys's umask 0000, a program killed by SIGKILL, a
Python process killed mid-profile, a read-only folder as a real non-root user, broken and killed
exports, a full temporary disk during nsys's import, a full TMPDIR. Real nsys, real processes, real tmpfs."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from faultkit import fill, mount, open_tmp, run_as, user  # noqa: F401 (fixtures)

from labkit.record import export
from labkit.record import nsys
from labkit.record import tool
from labkit.errors import OutputError

pytestmark = [pytest.mark.nsys, pytest.mark.alone]  # alone: it kills, interrupts or waits out nsys and the programs it records: how fast they end decides what it sees

# a program with N NVTX ranges, that can also make a file, raise, or kill itself
PROG = """
import os, signal, sys, time, nvtx
n, how = int(sys.argv[1]), sys.argv[2]
print("program started", flush=True)
for i in range(n):
    with nvtx.annotate("step"):
        time.sleep(0.001)
if how == "files":
    open(sys.argv[3] + "/made.txt", "w").write("x"); os.makedirs(sys.argv[3] + "/made", exist_ok=True)
elif how == "raise":
    raise ValueError("frame 7 has the wrong shape")
elif how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
elif how == "sleep":
    print("sleeping " + sys.argv[3], flush=True); time.sleep(120)
"""


def _record(tmp_path, name, n=3, how="ok", *extra, outdir=None, **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    return nsys.record([sys.executable, str(prog), str(n), how, *extra], name=name, outdir=outdir or tmp_path,
                       trace=("nvtx",), progress=False, **kw)


def _ranges(db) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
                           "WHERE coalesce(e.text, s.value) = 'step'").fetchone()[0]
    finally:
        con.close()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))


def test_a_report_replaced_by_an_older_copy_is_exported_again(tmp_path):
    """rsync -a / scp -p / tar x give the new report an older mtime: its identity decides."""
    a = _record(tmp_path / "a", "run", 8).nsys_rep
    b = _record(tmp_path / "b", "run", 16).nsys_rep
    assert _ranges(export.export_sqlite(a)) == 8
    shutil.copy2(b, a)  # the new report, with b's (older) mtime
    os.utime(a, (time.time() - 3600, time.time() - 3600))
    assert _ranges(export.export_sqlite(a)) == 16


def test_another_programs_sqlite_beside_a_report_is_never_written_over(tmp_path):
    rep = _record(tmp_path, "run", 4).nsys_rep
    theirs = tmp_path / "run.sqlite"
    con = sqlite3.connect(theirs)
    con.execute("CREATE TABLE orders (id INTEGER, what TEXT)")
    con.execute("INSERT INTO orders VALUES (1, 'keep me')")
    con.commit()
    con.close()
    before = theirs.read_bytes()
    db = export.export_sqlite(rep)
    assert theirs.read_bytes() == before
    assert db != theirs and _ranges(db) == 4
    assert export.export_sqlite(rep) == db  # reused, by identity


def test_the_profiled_program_runs_with_umask_022(tmp_path):
    _record(tmp_path, "files", 1, "files", str(tmp_path))
    assert stat.S_IMODE((tmp_path / "made.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o755


def test_a_failed_program_s_error_ends_with_its_own_traceback(tmp_path):
    with pytest.raises(nsys.ProgramFailedError) as err:
        _record(tmp_path, "raise", 2, "raise")
    msg = str(err.value)
    assert msg.splitlines()[-1] == "ValueError: frame 7 has the wrong shape"
    assert "Generat" not in msg and "[1/1]" not in msg


def test_a_program_killed_by_sigkill_is_named_and_its_report_carries_a_note(tmp_path):
    with pytest.raises(nsys.ProgramFailedError, match="killed by SIGKILL"):
        _record(tmp_path, "oom", 5, "kill")
    rep = tmp_path / "oom.nsys-rep"
    notes = nsys.recording_notes(rep)
    assert notes and "SIGKILL" in notes[0] and "only" in notes[0]
    from labkit.report.load import load_report

    assert notes[0] in load_report(rep).notes  # the loaded report carries it too
    assert nsys.recording_notes(_record(tmp_path, "whole", 2).nsys_rep) == []


def test_a_killed_python_process_takes_nsys_and_its_program_with_it(tmp_path):
    marker = f"h5-{os.getpid()}-{time.time_ns()}"
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_faults_nsys as t; "
            f"from pathlib import Path; t._record(Path({str(tmp_path)!r}), 'orphan', 1, 'sleep', {marker!r})")
    parent = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    log = tmp_path / "orphan.log"
    t0 = time.monotonic()
    while not (log.exists() and f"sleeping {marker}" in log.read_text(errors="replace")):
        assert time.monotonic() - t0 < 120 and parent.poll() is None, "the program never started"
        time.sleep(0.2)
    parent.kill()  # as a dying Jupyter kernel
    parent.wait()

    def left():
        found = []
        for p in psutil.process_iter():
            try:
                if p.status() != psutil.STATUS_ZOMBIE and marker in " ".join(p.cmdline()):
                    found.append(p)
            except psutil.Error:
                pass
        return found

    try:
        t0 = time.monotonic()
        while left() and time.monotonic() - t0 < 60:
            time.sleep(0.5)
        assert not left(), "the program outlived the Python process that profiled it"
    finally:
        for p in left():
            p.kill()


def test_a_read_only_folder_with_an_older_sqlite_uses_the_per_user_cache(open_tmp, user):
    tmp_path = open_tmp
    a = _record(tmp_path / "a", "run", 4).nsys_rep
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(_record(tmp_path / "b", "run", 6).nsys_rep, shared / "run.nsys-rep")
    shutil.copy(export.export_sqlite(a), shared / "run.sqlite")  # an older export, of another report
    os.utime(shared / "run.sqlite", (time.time() - 3600, time.time() - 3600))
    for p in (tmp_path, shared, *shared.iterdir()):
        p.chmod(0o755 if p.is_dir() else 0o644)
    cache = tmp_path / "usercache"
    cache.mkdir()
    shutil.chown(cache, user)
    res = run_as(user, f"print(nsys_db := labkit.record.export.export_sqlite({str(shared / 'run.nsys-rep')!r}))",
                 env={"LABKIT_CACHE_DIR": str(cache)})
    assert res.returncode == 0, res.stderr
    db = Path(res.stdout.strip())
    assert db.parent == cache / "exports" and _ranges(db) == 6


def test_an_unwritable_home_is_named_with_the_variable_that_fixes_it(open_tmp, user):
    tmp_path = open_tmp
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(_record(tmp_path / "b", "run", 2).nsys_rep, shared / "run.nsys-rep")
    for p in (tmp_path, shared, shared / "run.nsys-rep"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    res = run_as(user, "import labkit.record.export as n\ntry:\n n.export_sqlite(%r)\nexcept n.NsysError as e:\n print(e)"
                 % str(shared / "run.nsys-rep"), env={})
    assert res.returncode == 0, res.stderr
    assert "LABKIT_CACHE_DIR" in res.stdout and len(res.stdout.strip().splitlines()) == 1


@pytest.mark.parametrize("kind, words", [("empty", "is empty"), ("text", "not an nsys report"),
                                         ("truncated", "damaged or truncated")])
def test_a_broken_report_is_explained(tmp_path, kind, words):
    rep = tmp_path / f"{kind}.nsys-rep"
    if kind == "empty":
        rep.write_bytes(b"")
    elif kind == "text":
        rep.write_text("<html>404 Not Found</html>\n" * 20)
    else:
        whole = _record(tmp_path / "w", "whole", 50).nsys_rep.read_bytes()
        rep.write_bytes(whole[: len(whole) // 3])
    for _ in range(2):  # the same clear error every time, never a partial export
        with pytest.raises(tool.NsysError, match=words) as err:
            export.export_sqlite(rep)
        assert "\n" not in str(err.value)
    assert not rep.with_suffix(".sqlite").exists()


def test_nsys_killed_mid_export_is_said_so(tmp_path):
    rep = _record(tmp_path, "run", 3).nsys_rep
    real = shutil.which("nsys") or "/usr/bin/nsys"
    wrapper = tmp_path / "nsys"  # the real nsys export, then it and this wrapper killed by SIGKILL (the OOM killer)
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = export ]; then {real} "$@" & sleep 0.1; kill -9 $!; kill -9 $$; fi\n'
                       f'exec {real} "$@"\n')
    wrapper.chmod(0o755)
    with pytest.raises(tool.NsysError, match="killed by SIGKILL") as err:
        export.export_sqlite(rep, nsys=str(wrapper))
    assert "run it again" in str(err.value)


def test_an_export_of_the_old_schema_counts_as_complete(tmp_path):
    """nsys 2020.5 wrote no export-metadata table: its .sqlite beside its report is reused, not
    exported again (or called a failed export)."""
    fixture = Path(__file__).parent / "fixtures" / "openacc.nsys2020.5.trimmed.sqlite"
    assert export.export_is_complete(fixture)
    failed = tmp_path / "failed.sqlite"  # what a failed export leaves: StringIds and ProcessStreams only
    con = sqlite3.connect(failed)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("CREATE TABLE ProcessStreams (pid INTEGER)")
    con.commit()
    con.close()
    assert not export.export_is_complete(failed)


def test_a_full_tmpdir_is_named_before_nsys_starts(tmp_path, mount, monkeypatch):
    """nsys with a full TMPDIR dies at once with "Failed to probe the process (sync)"; Python's own
    temporary folder had quietly fallen back to /tmp, so labkit checked the wrong disk. Real tmpfs."""
    disk = mount("2m")
    fill(disk)
    monkeypatch.setenv("TMPDIR", str(disk))
    with pytest.raises(OutputError) as err:
        _record(tmp_path / "run", "t")
    line = str(err.value)
    assert "\n" not in line and str(disk) in line and "TMPDIR" in line, line
    assert not list((tmp_path / "run").glob("t.*")), "nothing written for a run that never started"
