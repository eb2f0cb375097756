"""Issue 33, writes and deletions by one mechanism: every output goes through
labkit.paths.atomic_write and never replaces a file labkit did not write without --overwrite;
`make reset` removes only what the lab recorded writing, and refuses a folder holding anything
else; LABKIT_REPORTS resolves the same way everywhere; record_reference's state is written
atomically and locked; the JupyterLab token is never on a command line."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from labkit.paths import LockedError, OutputExistsError, atomic_write, hold_lock

pytestmark = pytest.mark.alone  # it kills, interrupts or waits out nsys and the programs it records: how fast they end decides what it sees

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "scripts"))


def test_atomic_write_keeps_what_labkit_did_not_write(tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's notes")
    with pytest.raises(OutputExistsError, match="--overwrite"):
        atomic_write(mine, "trace")
    assert mine.read_text() == "the user's notes"
    out = tmp_path / "t.txt"
    atomic_write(out, "one")
    inode = out.stat().st_ino
    atomic_write(out, "two")  # labkit's own, unchanged since: replaced without asking, by a rename
    assert out.read_text() == "two" and out.stat().st_ino != inode
    with open(out, "a") as f:
        f.write(" edited")  # edited by the user since: theirs now
    with pytest.raises(OutputExistsError):
        atomic_write(out, "three")
    atomic_write(mine, "replaced", overwrite=True)
    assert mine.read_text() == "replaced" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "t.txt"]


def test_export_perfetto_never_destroys_a_file_or_the_report(tmp_path, capsys):
    from labkit.cli import main

    db = tmp_path / "R.sqlite"
    shutil.copy(FIX / "domains.nsys2022.4.sqlite", db)
    before = db.read_bytes()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main(["export", "--perfetto", str(db), "-o", str(notes)]) == 1
    assert notes.read_text() == "mine" and "--overwrite" in capsys.readouterr().err
    for target in (db, tmp_path / "R.nsys-rep"):
        assert main(["export", "--perfetto", str(db), "-o", str(target), "--overwrite"]) == 1
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert db.read_bytes() == before and not (tmp_path / "R.nsys-rep").exists()
    assert main(["export", "--perfetto", str(db)]) == 0 and main(["export", "--perfetto", str(db)]) == 0  # its own
    assert main(["export", "--perfetto", str(db), "-o", str(notes), "--overwrite"]) == 0
    assert notes.read_bytes() != b"mine"


def test_table_output_and_timeline_save_ask_before_replacing(tmp_path, capsys):
    import labkit
    from labkit.bench.ledger import Ledger
    from labkit.bench.table_cli import cli_table

    led = Ledger(tmp_path / "ledger.jsonl")
    led.append({"step": "baseline", "env": {"host": "h"}, "metrics": {"fps": 1.0}})
    readme = tmp_path / "README.md"
    readme.write_text("# my project\n")
    assert cli_table([str(led.path), "--output", str(readme)]) == 1
    assert readme.read_text() == "# my project\n" and capsys.readouterr().out == ""
    assert cli_table([str(led.path), "--output", str(readme), "--overwrite"]) == 0
    assert cli_table([str(led.path), "--output", str(readme)]) == 0  # labkit's own now
    page = tmp_path / "page.html"
    page.write_text("mine")
    t = labkit.interactive_timeline(labkit.load_report(FIX / "domains.nsys2022.4.sqlite"))
    with pytest.raises(OutputExistsError):
        t.save(page)
    assert page.read_text() == "mine"
    t.save(page, overwrite=True)
    assert "Bokeh" in page.read_text()


def _lab_folder(folder: Path, monkeypatch):
    from labkit.bench.ledger import Ledger
    from labkit.errors import check_writable

    monkeypatch.setenv("LABKIT_REPORTS", str(folder))
    Ledger(folder / "ledger.jsonl").append({"step": "baseline", "env": {"host": "h"}, "metrics": {"fps": 1.0}})
    check_writable(folder / "profiles")
    (folder / "profiles" / "x.nsys-rep").write_bytes(b"r")
    atomic_write(folder / "speedup.png", b"png")


def test_reset_removes_only_what_the_lab_wrote(tmp_path, monkeypatch, capsys):
    import reset_lab

    shared = tmp_path / "shared"
    shared.mkdir()
    for name in ("notebooks", "results", "videos"):
        (shared / name).mkdir()
        (shared / name / "keep.txt").write_text("user's")
    (shared / "family.png").write_bytes(b"photo")
    _lab_folder(shared, monkeypatch)
    assert reset_lab.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing removed" in err[0] and "family.png" in err[0]
    assert sorted(p.name for p in shared.iterdir()) == [".labkit-written", "family.png", "ledger.jsonl", "notebooks",
                                                      "profiles", "results", "speedup.png", "videos"]
    own = tmp_path / "own"
    _lab_folder(own, monkeypatch)
    assert reset_lab.main([]) == 0
    assert list(own.iterdir()) == []


def test_relative_labkit_reports_is_one_folder_everywhere(monkeypatch):
    import jupyter_lab
    import reset_lab

    from labkit.env import reports_dir

    monkeypatch.setenv("LABKIT_REPORTS", "somewhere/rel")
    monkeypatch.chdir(ROOT / "notebooks")  # a kernel's working folder
    want = (ROOT / "somewhere" / "rel").resolve()
    assert reports_dir().resolve() == want == reset_lab.reports_folder()
    assert jupyter_lab.checkpoints_dir() == want / "checkpoints"


def test_record_reference_state_is_atomic_and_locked(tmp_path):
    import record_reference

    work = tmp_path / "work"
    fd = hold_lock(tmp_path / ".work.lock", what="record_reference")
    try:
        with pytest.raises(LockedError):
            hold_lock(tmp_path / ".work.lock")
        with pytest.raises(SystemExit, match="running already"):
            record_reference._one_at_a_time(work)
    finally:
        os.close(fd)
    os.close(record_reference._one_at_a_time(work))  # free again once the other call ends
    src = (ROOT / "scripts" / "record_reference.py").read_text()
    assert ".write_text(json.dumps(progress" not in src and '"commit.json").write_text' not in src


def test_jupyterlab_token_is_not_on_the_command_line(tmp_path):
    import browser_lab
    import jupyter_lab

    if browser_lab.missing() and "jupyterlab" in browser_lab.missing():
        pytest.skip(browser_lab.missing())
    port, token = browser_lab.free_port(), os.urandom(12).hex()
    env = {**os.environ, "JUPYTER_TOKEN": token, "HOME": str(tmp_path), "LABKIT_REPORTS": str(tmp_path / "r")}
    argv = jupyter_lab.command(port=port, checkpoints=tmp_path / "r" / "checkpoints")
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline
        deadline, status = time.monotonic() + 90, None
        while time.monotonic() < deadline and status is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=5) as r:
                    status = r.status
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        assert status == 200  # the server took the token from its environment
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token=wrong", timeout=5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
