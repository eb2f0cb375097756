"""Issue 61 (round 4): "labkit wrote this" is checked at every write and delete of a file it writes,
and every name it derives is bounded and is what nsys really writes.

Each test runs the real command line (`python -m labkit profile`) under the installed nsys on a
tiny program, with real files of the user's beside it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.alone  # it kills, interrupts or waits out nsys and the programs it records: how fast they end decides what it sees

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _labkit(*args, cwd, timeout=300, env=None):
    return subprocess.run([PY, "-m", "labkit", *args], cwd=cwd, capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _profile(tmp_path, *args, prog=("-c", "print('ran')"), **kw):
    return _labkit("profile", "--outdir", str(tmp_path), "--summary", "none", "--trace", "nvtx", *args, "--",
                   PY, *prog, cwd=tmp_path, **kw)


def test_report_names_are_what_nsys_really_writes(tmp_path):
    """nsys 2022.4 replaces some endings of -o instead of adding .nsys-rep (-o z.sqlite writes
    z.nsys-rep; -o a.csv writes a.csv.nsys-rep): labkit's reserved names follow the real nsys run here."""
    import subprocess as sp

    from labkit.env import find_nsys
    from labkit.paths import NSYS_REPLACES, NameError_, report_base, report_files

    names = ["n.sqlite", "q.qdrep", "t.txt", "m.csv", "m.fp16"]
    assert set(NSYS_REPLACES) >= {".sqlite", ".qdrep", ".txt"}
    for n in names:
        before = set(tmp_path.iterdir())
        for _ in range(3):  # nsys 2022.4's start-up race under load (labkit.record.nsys.START_TRIES)
            sp.run([find_nsys(), "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none",
                    f"--output={tmp_path / n}", "true"], capture_output=True, timeout=120)
            made = set(tmp_path.iterdir()) - before
            if made:
                break
        assert {p.name for p in made} == {report_files(tmp_path, n)[".nsys-rep"].name}, (n, made)
    with pytest.raises(NameError_, match="without it"):
        report_base("x.arrow")


def test_profiling_train_py_keeps_the_users_own_train_log(tmp_path):
    """`labkit profile --outdir . -- python train.py` beside the user's own train.log: the log is not
    labkit's, so it is never truncated; the run is refused in one line naming --name (nothing else
    written), and a run under another name records as usual."""
    (tmp_path / "train.py").write_text("print('training')\n")
    mine = tmp_path / "train.log"
    mine.write_text("epoch 1 loss 0.5\n")
    out = _labkit("profile", "--outdir", ".", "--summary", "none", "--trace", "nvtx", "--", PY, "train.py",
                  cwd=tmp_path)
    err = out.stderr.decode()
    assert out.returncode != 0 and mine.read_text() == "epoch 1 loss 0.5\n", err
    assert len(err.strip().splitlines()) == 1 and "train.log" in err and "--name" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.log", "train.py"]
    out = _labkit("profile", "--outdir", ".", "--summary", "none", "--trace", "nvtx", "--name", "train-prof", "--",
                  PY, "train.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr.decode()
    assert mine.read_text() == "epoch 1 loss 0.5\n" and (tmp_path / "train-prof.nsys-rep").stat().st_size > 0


def test_a_name_ending_in_nsys_rep_never_replaces_that_report(tmp_path):
    """`--name base.nsys-rep` (or base.sqlite): nsys writes base.nsys-rep itself (it adds no second
    suffix), so an existing base.nsys-rep is refused in one line naming --overwrite, and a fresh name
    is recorded where nsys puts it (base.nsys-rep, its log base.log)."""
    old = tmp_path / "base.nsys-rep"
    old.write_bytes(b"the user's earlier report")
    for name in ("base.nsys-rep", "base.sqlite"):
        out = _profile(tmp_path, "--name", name)
        err = out.stderr.decode()
        assert out.returncode != 0 and old.read_bytes() == b"the user's earlier report", err
        assert len(err.strip().splitlines()) == 1 and "--overwrite" in err and "base.nsys-rep" in err, err
    out = _profile(tmp_path, "--name", "fresh.nsys-rep")
    assert out.returncode == 0, out.stderr.decode()
    assert (tmp_path / "fresh.nsys-rep").stat().st_size > 0 and not (tmp_path / "fresh.nsys-rep.nsys-rep").exists()
    assert "ran" in (tmp_path / "fresh.log").read_text()


def _locked(log) -> bool:
    """Whether some process still holds ``log``'s lock (the one labkit.record.nsys takes for a run)."""
    import fcntl

    with open(log, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def test_a_kill_9_of_labkit_leaves_nothing_that_blocks_the_name(tmp_path):
    """labkit killed outright (kill -9) while nsys records: the next run of the same name, without
    --overwrite, recognises labkit's own stale placeholder (its recording is over: no one holds its
    log) and records; a user's 0-byte file of that name, which labkit did not write, still blocks it."""
    proc = subprocess.Popen([PY, "-m", "labkit", "profile", "--outdir", str(tmp_path), "--summary", "none",
                             "--trace", "nvtx", "--name", "k", "--", PY, "-c", "import time; print('up', flush=True); "
                             "time.sleep(120)"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = tmp_path / "k.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and "up" in log.read_text(errors="replace")):
        time.sleep(0.2)
    assert "up" in log.read_text(errors="replace")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 120  # nsys, told by the parent-death signal, ends: it lets go of the log
    while time.monotonic() < deadline and _locked(log):  # 3 s were not always enough beside other tests
        time.sleep(0.2)
    rep = tmp_path / "k.nsys-rep"
    assert rep.stat().st_size == 0  # labkit's placeholder, as the kill left it (nsys wrote no report)
    out = _profile(tmp_path, "--name", "k")
    assert out.returncode == 0, out.stderr.decode()
    assert rep.stat().st_size > 0 and "ran" in log.read_text()
    (tmp_path / "u.nsys-rep").touch()  # the user's own empty file
    out = _profile(tmp_path, "--name", "u")
    assert out.returncode != 0 and "--overwrite" in out.stderr.decode() and (tmp_path / "u.nsys-rep").exists()


def test_a_stale_partial_export_is_removed_and_nothing_else(tmp_path):
    """An export killed outright leaves `.<name>.<pid>.partial.sqlite`: the next export removes those
    whose process is gone (labkit's, by their name and its owner), and keeps one whose process is
    alive (an export under way) and a user's file of a like name."""
    from labkit.record.export import export_sqlite

    out = _profile(tmp_path, "--name", "p")
    assert out.returncode == 0, out.stderr.decode()
    gone = subprocess.run(["true"]).args and subprocess.Popen(["true"])
    gone.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        stale = tmp_path / f".p.{gone.pid}.partial.sqlite"
        running = tmp_path / f".p.{live.pid}.partial.sqlite"
        users = tmp_path / ".p.notes.partial.sqlite"
        for f in (stale, running, users):
            f.write_bytes(b"SQLite format 3\x00")
        export_sqlite(tmp_path / "p.nsys-rep", force=True)
        assert not stale.exists() and running.exists() and users.exists()
    finally:
        live.kill()


def test_a_240_byte_name_records_exports_and_caches(tmp_path):
    """A legal 240-byte report name (249 bytes with .nsys-rep): the names labkit derives from it (the
    export's partial file, the per-user export and columnar cache folders) are bounded to 255 bytes,
    so recording, exporting and loading it work; one byte more than a file name takes is one line."""
    name = "r" * 240
    cache = tmp_path / "cache"
    out = _labkit("profile", "--outdir", str(tmp_path), "--trace", "nvtx", "--name", name, "--", PY, "-c",
                  "import nvtx\nwith nvtx.annotate('x'):\n    pass", cwd=tmp_path, env={"LABKIT_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr.decode()
    assert (tmp_path / f"{name}.nsys-rep").stat().st_size > 0 and (tmp_path / f"{name}.sqlite").exists()
    from labkit.paths import bounded_name

    assert len(bounded_name(f".{name}", ".123456.partial.sqlite", spare=8).encode()) == 247
    assert bounded_name("short", ".sqlite") == "short.sqlite"
    out = _profile(tmp_path, "--name", "r" * 247)
    err = out.stderr.decode()
    assert out.returncode != 0 and len(err.strip().splitlines()) == 1 and "shorter name" in err, err


def test_a_latin_1_argument_is_written_to_the_log_escaped(tmp_path):
    """`labkit profile -- prog <a Latin-1 file name>` (bytes that are not UTF-8, as argv holds them):
    no UnicodeEncodeError writing the command line to the log; the log shows the byte escaped (octal, as
    it travels through nsys, which fails on text that is not UTF-8) and the program gets the very bytes."""
    raw = b"caf\xe9.txt"
    (tmp_path / os.fsdecode(raw)).write_bytes(b"x")
    prog = "import os, sys; print('GOT', os.fsencode(sys.argv[1]).hex())"
    out = subprocess.run([os.fsencode(PY), b"-m", b"labkit", b"profile", b"--outdir", os.fsencode(tmp_path),
                          b"--summary", b"none", b"--trace", b"nvtx", b"--name", b"latin", b"--", os.fsencode(PY),
                          b"-c", prog.encode(), raw], cwd=tmp_path, capture_output=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr.decode(errors="replace")
    log = (tmp_path / "latin.log").read_text(encoding="utf-8")
    assert f"GOT {raw.hex()}" in log and "\\0351" in log.splitlines()[0]


def test_profile_ranks_keeps_the_users_own_log_of_that_name(tmp_path):
    """profile_ranks writes torchrun's output to NAME.log: a NAME.log labkit did not write is refused
    in one line before anything starts, and kept as it was."""
    from labkit.ranks.profile import profile_ranks
    from labkit.record.nsys import ReportExistsError

    mine = tmp_path / "job.log"
    mine.write_text("my notes\n")
    with pytest.raises(ReportExistsError, match="labkit did not write it"):
        profile_ranks([PY, "-c", "pass"], nproc=2, name="job", outdir=tmp_path)
    assert mine.read_text() == "my notes\n" and sorted(p.name for p in tmp_path.iterdir()) == ["job.log"]


def _reset(reports, *args):
    return subprocess.run(["make", "-s", "reset", *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LABKIT_REPORTS": str(reports), "PYTHON": PY})


def _in_lab(reports, code):
    """Run ``code`` as the lab does, in a fresh process whose reports folder is ``reports``."""
    out = subprocess.run([PY, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LABKIT_REPORTS": str(reports), "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return out


def test_make_reset_keeps_a_lab_file_the_user_edited(tmp_path):
    """A file the lab wrote (speedup.md, an executed notebook) and the user edited since: its own
    written-by mark says the lab did not write what it holds now, so `make reset` keeps it (saying
    so) and removes the rest; a second reset keeps it too, without refusing the folder."""
    reports = tmp_path / "reports"
    _in_lab(reports, "from labkit.paths import atomic_write; from labkit.errors import check_writable; "
                     f"import pathlib; r = pathlib.Path({str(reports)!r}); check_writable(r); "
                     "atomic_write(r / 'speedup.md', '| step |\\n'); atomic_write(r / 'other.md', 'x'); "
                     "check_writable(r / 'notebooks'); atomic_write(r / 'notebooks' / '01.ipynb', '{}'); "
                     "atomic_write(r / 'notebooks' / '02.ipynb', '{}')")
    with open(reports / "speedup.md", "a") as f:
        f.write("my conclusions\n")
    (reports / "notebooks" / "01.ipynb").write_text('{"cells": ["my answer"]}')
    out = _reset(reports)
    assert out.returncode == 0, out.stderr
    assert (reports / "speedup.md").read_text() == "| step |\nmy conclusions\n"
    assert (reports / "notebooks" / "01.ipynb").read_text() == '{"cells": ["my answer"]}'
    assert not (reports / "other.md").exists() and not (reports / "notebooks" / "02.ipynb").exists()
    assert "speedup.md" in out.stdout and "edited" in out.stdout
    again = _reset(reports)
    assert again.returncode == 0, again.stderr
    assert (reports / "speedup.md").exists() and (reports / "notebooks" / "01.ipynb").exists()


def test_make_reset_after_a_full_disk_at_the_first_ledger_row(tmp_path):
    """The disk fills as the lab writes its first ledger row (a real 64 KiB tmpfs): the row fails in
    one line; with room again the next row is written, and `make reset` removes the ledger (it was
    listed in the manifest before it existed) instead of refusing the folder for good."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        reports = mnt / "reports"
        _in_lab(reports, f"from labkit.errors import check_writable; check_writable({str(reports)!r})")
        filler = mnt / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k", "count=64"], capture_output=True)
        row = ("from labkit.bench.ledger import Ledger; "
               f"Ledger({str(reports / 'ledger.jsonl')!r}).append({{'step': 'baseline', 'metrics': {{'fps': 1.0}}, "
               "'note': 'x' * 3000})")
        full = subprocess.run([PY, "-c", row], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "LABKIT_REPORTS": str(reports), "PYTHONPATH": str(ROOT)})
        assert full.returncode != 0 and "full" in full.stderr.strip().splitlines()[-1], full.stderr
        filler.unlink()
        _in_lab(reports, row)
        out = _reset(reports)
        assert out.returncode == 0, out.stderr
        assert not (reports / "ledger.jsonl").exists()
    finally:
        subprocess.run(["umount", str(mnt)])


def test_make_reset_after_a_normal_lab_step_with_its_video(tmp_path):
    """One lab step that draws its output video (labbook.app_options puts it in reports/videos/, which
    the application writes with its own mkdir): the lab lists videos/ in its manifest, so `make reset`
    removes it with the rest instead of refusing the folder ("also holds what the lab did not write")."""
    reports = tmp_path / "reports"
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"clip")
    out = _in_lab(reports, "import json, labbook.app as a; "
                           f"print(json.dumps(a.app_options({{}}, video={str(clip)!r}, mode='small')))")
    import json

    video = Path(json.loads(out.stdout)["output"])
    assert video.parent == reports / "videos"
    video.parent.mkdir(parents=True, exist_ok=True)  # what the application does (source_code.results)
    video.write_bytes(b"tracked video")
    out = _reset(reports)
    assert out.returncode == 0, out.stderr
    assert not (reports / "videos").exists()


def test_make_reset_keeping_an_edited_file_never_follows_a_link_out(tmp_path):
    """A lab folder that holds an edited file and a link to a folder of the user's elsewhere: reset
    removes the link, never what it points to."""
    reports, elsewhere = tmp_path / "reports", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "thesis.tex").write_text("mine")
    _in_lab(reports, "from labkit.paths import atomic_write; from labkit.errors import check_writable; "
                     f"import pathlib; r = pathlib.Path({str(reports)!r}); check_writable(r / 'results'); "
                     "atomic_write(r / 'results' / 'a.json', '{}')")
    (reports / "results" / "a.json").write_text('{"edited": 1}')
    (reports / "results" / "link").symlink_to(elsewhere)
    out = _reset(reports)
    assert out.returncode == 0, out.stderr
    assert (elsewhere / "thesis.tex").read_text() == "mine" and not (reports / "results" / "link").exists()
    assert (reports / "results" / "a.json").read_text() == '{"edited": 1}'
