"""The columnar cache's entries are input (labkit.report.columnar): an entry of another layout,
an emptied or cut entry, or one another user owns is skipped and rebuilt, never trusted or fatal;
the summaries still equal nsys's own (``nsys stats`` CSV of the same report)."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is a labkit dependency: pip install -e .")
import pyarrow as pa  # noqa: E402

from labbook.commands import agreement  # noqa: E402
from labkit.report import columnar  # noqa: E402
from labkit.report.load import load_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures"
DB = FIX / "pipeline.nsys2022.4.sqlite"
CSV = FIX / "pipeline.nsys2022.4.nvtxsum.csv"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(columnar, "MIN_ROWS", 1)  # the fixture is small: cache every frame with rows
    monkeypatch.setattr(columnar, "MIN_BYTES", 0)
    db = tmp_path / "run.sqlite"
    shutil.copyfile(DB, db)
    assert agreement(CSV, load_report(db), (2022, 4))["agree"].all()  # fills the cache
    (entry,) = (tmp_path / "cache" / "columnar").iterdir()
    assert list(entry.glob("*.parquet"))
    return db, entry


def _agrees(db, csv: Path = CSV) -> bool:
    return bool(agreement(csv, load_report(db), (2022, 4))["agree"].all())


def _cli(db, env_cache, user=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LABKIT_CACHE_DIR": str(env_cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "labkit", "summary", str(db), "--csv"], capture_output=True,
                          text=True, timeout=120, env=env, user=user)


def test_a_valid_parquet_of_another_layout_is_skipped_and_rebuilt(cache):
    db, entry = cache
    for f in entry.glob("*.parquet"):  # what another program (or an older labkit) may leave there
        pq.write_table(pa.table({"x": list(range(50)), "y": ["a"] * 50}), f)
    assert _agrees(db)
    p = _cli(db, entry.parent.parent)
    assert p.returncode == 0 and "Traceback" not in p.stderr and "KeyError" not in p.stderr, p.stderr
    assert _agrees(db)


@pytest.mark.parametrize("damage", ["zero bytes", "no rows", "half the rows"])
def test_an_emptied_or_cut_entry_is_not_read_as_no_data(cache, damage):
    db, entry = cache
    for f in entry.glob("*.parquet"):
        table = pq.read_table(f)
        if damage == "zero bytes":
            f.write_bytes(b"")
        else:  # a valid Parquet, labkit's own columns and marks, fewer rows than were written
            pq.write_table(table.slice(0, 0 if damage == "no rows" else table.num_rows // 2), f)
    assert _agrees(db)
    p = _cli(db, entry.parent.parent)
    assert p.returncode == 0 and "no nvtx" not in (p.stdout + p.stderr).lower(), p.stdout + p.stderr


def test_an_entry_another_user_owns_is_not_trusted(cache):
    """An entry of another user (here `nobody`) with a doctored frame: skipped, not read."""
    db, entry = cache
    for f in entry.glob("*.parquet"):  # a frame as labkit wrote it, longer ranges, then handed to nobody
        table = pq.read_table(f)
        if "duration_ns" in table.column_names:
            i = table.column_names.index("duration_ns")
            table = table.set_column(i, "duration_ns", pa.compute.add(table.column(i), 10**9))
        pq.write_table(table, f)
        os.chown(f, pwd.getpwnam("nobody").pw_uid, -1)
    assert _agrees(db)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_a_cache_shared_by_two_users_is_skipped_with_one_line(tmp_path, monkeypatch):
    """A second, real user (nobody) loads the same report with the same LABKIT_CACHE_DIR, a team's
    folder (mode 1777) whose entries root wrote (mode 0700): no PermissionError; the frames come
    from the export (or a folder of the second user's own), one line said at most; the summary
    equals nsys's."""
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="labkit-shared-"))
    try:
        _as_nobody(shared, monkeypatch)
    finally:
        shutil.rmtree(shared)


def _as_nobody(shared: Path, monkeypatch) -> None:
    shared.chmod(0o755)
    db = shared / "run.sqlite"
    shutil.copyfile(DB, db)
    db.chmod(0o644)
    csv = shared / CSV.name  # nsys's own CSV where the second user can read it (a checkout may be 0700)
    shutil.copyfile(CSV, csv)
    csv.chmod(0o644)
    (shared / "cache").mkdir(mode=0o777)
    (shared / "cache").chmod(0o1777)
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(shared / "cache"))
    monkeypatch.setattr(columnar, "MIN_ROWS", 1)
    monkeypatch.setattr(columnar, "MIN_BYTES", 0)
    assert _agrees(db)  # root fills the shared cache
    assert list((shared / "cache" / "columnar").glob("*/*.parquet"))
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the interpreter is loaded (it lives under root's home): the child only reads
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            import io
            from contextlib import redirect_stderr

            err = io.StringIO()
            with redirect_stderr(err):
                ok = _agrees(db, csv) and _agrees(db, csv)
            out = {"ok": ok, "stderr": err.getvalue()}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which asserts
            out = {"ok": False, "stderr": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        got = json.loads(f.read() or '{"ok": false, "stderr": "no answer"}')
    os.waitpid(pid, 0)
    assert got["ok"], got["stderr"]
    assert len(got["stderr"].strip().splitlines()) <= 1, got["stderr"]
    assert "Traceback" not in got["stderr"]


@pytest.mark.parametrize("how", ["link", "copy"])
def test_an_entry_that_is_another_exports_frame_is_not_read(cache, tmp_path, how):
    """A frame labkit wrote for another export, linked or copied into this export's entry, is not
    read: the frames are this export's own."""
    db, entry = cache
    other = tmp_path / "other.sqlite"
    shutil.copyfile(FIX / "gputest.nsys2025.3.sqlite", other)
    import labkit

    labkit.nvtx_summary(load_report(other))  # fills the other export's entry with the same frames
    (theirs,) = [d for d in entry.parent.iterdir() if d.name.startswith("other-")]
    for f in entry.glob("*.parquet"):
        if (theirs / f.name).exists():
            f.unlink()
            if how == "link":
                f.symlink_to(theirs / f.name)
            else:
                shutil.copy2(theirs / f.name, f)
    assert _agrees(db)
