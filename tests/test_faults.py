"""Issue 14's faults, tried for real: two same-name profiles at once, Ctrl-C (to the process
group, to labkit only, a Jupyter interrupt), a full or read-only disk (real tmpfs mounts), a
LABKIT_NSYS that is no nsys, a narrow terminal. Real nsys, real signals, real filesystems."""
from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from faultkit import fill, mount  # noqa: F401 (mount: a fixture of real tmpfs disks)

import labkit
from labkit import bench
from labkit.record import nsys
from labkit.record import tool
from labkit.errors import OutputError
from labkit.bench.ledger import Ledger

FIX = Path(__file__).parent / "fixtures"
# a program that says when it runs, then sleeps; its marker argument finds it among the processes
SLEEPER = "import sys, time; print('sleeper', sys.argv[1], 'started', flush=True); time.sleep(float(sys.argv[2]))"


def _cli(outdir: Path, name: str, marker: str, seconds: float, **kw) -> subprocess.Popen:
    argv = [sys.executable, "-m", "labkit", "profile", "--name", name, "--outdir", str(outdir), "--trace", "nvtx",
            "--summary", "none", "--", sys.executable, "-c", SLEEPER, marker, str(seconds)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _wait_started(log: Path, marker: str, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while not (log.exists() and f"sleeper {marker} started" in log.read_text(errors="replace")):
        assert time.monotonic() - t0 < timeout, f"the profiled program never started ({log})"
        time.sleep(0.2)


def _alive(marker: str) -> list[str]:
    """Command lines of live processes that carry ``marker`` (the program, or nsys running it)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if marker in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmd)
    return found


def _stream_files(log: Path) -> list[Path]:
    """The temporary .qdstrm files nsys said it was writing."""
    return [Path(p) for p in re.findall(r"Generating '([^']+\.qdstrm)'", log.read_text(errors="replace"))]


# ----------------------------------------------------------------------------- names
@pytest.mark.nsys
def test_two_profiles_of_the_same_name_started_together_never_share_files(tmp_path):
    out = tmp_path / "profiles"
    marker_a, marker_b = f"A{os.getpid()}", f"B{os.getpid()}"
    first = _cli(out, "same", marker_a, 6)
    _wait_started(out / "same.log", marker_a)
    second = _cli(out, "same", marker_b, 1)
    err_b = second.communicate(timeout=120)[1]
    _, err_a = first.communicate(timeout=120)
    assert first.returncode == 0, err_a
    assert second.returncode == 1
    assert err_b.strip().splitlines() == [
        f"labkit: {out / 'same.nsys-rep'} is being recorded by another run right now (its log {out / 'same.log'} is "
        f"in use): choose another name, or wait for that run to finish"]
    log = (out / "same.log").read_text()
    assert f"sleeper {marker_a} started" in log and marker_b not in log
    assert sorted(p.name for p in out.iterdir()) == ["same.log", "same.nsys-rep", "same.sqlite"]
    assert labkit.load_report(out / "same.sqlite").meta  # the first run's own, complete report
    # started afterwards, the same name is refused and nothing of the first run is touched
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    third = _cli(out, "same", marker_b, 1)
    assert third.communicate(timeout=120)[1].strip().endswith("already exists: pass overwrite=True (CLI: "
                                                              "--overwrite) or choose another name")
    assert third.returncode == 1 and {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


# ----------------------------------------------------------------------------- interrupts
def _assert_interrupted_cleanly(out: Path, name: str, marker: str, stderr: str) -> None:
    rep, log = out / f"{name}.nsys-rep", out / f"{name}.log"
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        f"labkit: interrupted: nsys stopped the program; the report nsys finished is kept: {rep} (its output: {log})"]
    assert rep.stat().st_size > 0 and labkit.load_report(rep).meta  # what nsys could finish, loadable
    assert sorted(p.name for p in out.iterdir()) == [f"{name}.log", f"{name}.nsys-rep", f"{name}.sqlite"]
    assert _stream_files(log) and not any(p.exists() for p in _stream_files(log))  # no /tmp/*.qdstrm left
    assert _alive(marker) == []


@pytest.mark.nsys
@pytest.mark.parametrize("to", ["process group", "labkit only"])
def test_ctrl_c_stops_program_and_nsys_and_keeps_the_report(tmp_path, to):
    """A terminal's Ctrl-C signals the whole foreground process group; ``kill -INT`` only labkit."""
    out, marker = tmp_path / "p", f"intr{os.getpid()}{to[0]}"
    proc = _cli(out, "intr", marker, 120, start_new_session=True)  # its own group, as a shell job
    _wait_started(out / "intr.log", marker)
    if to == "process group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    _assert_interrupted_cleanly(out, "intr", marker, err)


@pytest.mark.nsys
def test_a_jupyter_interrupt_raises_keyboardinterrupt_in_the_api(tmp_path):
    """Jupyter interrupts a kernel with SIGINT to the kernel's process alone."""
    out, marker = tmp_path / "p", f"api{os.getpid()}"
    script = textwrap.dedent(f"""
        import sys, labkit
        try:
            labkit.profile([sys.executable, "-c", {SLEEPER!r}, {marker!r}, "120"], name="api", outdir={str(out)!r},
                           trace=("nvtx",), progress=False)
        except KeyboardInterrupt as exc:
            print(exc, file=sys.stderr)
            sys.exit(7)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    _wait_started(out / "api.log", marker)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 7, err
    _assert_interrupted_cleanly(out, "api", marker, "labkit: " + err)


# ----------------------------------------------------------------------------- disks
@pytest.mark.nsys
def test_profile_on_a_full_disk_says_the_folder_and_the_space_needed(mount):
    disk = mount("2m")
    with pytest.raises(OutputError, match=rf"cannot write the report into {disk}/profiles: its disk has 2\.1 MB free "
                                          r"and about 67\.1 MB is needed: free some space there, or choose"):
        labkit.profile([sys.executable, "-c", "pass"], name="full", outdir=disk / "profiles", trace=("nvtx",))
    assert list((disk / "profiles").iterdir()) == []  # no log, no placeholder, nothing of nsys's


def test_rank_profiles_on_a_full_disk_fail_before_any_rank_starts(mount):
    disk = mount("2m")
    (disk / "profiles").mkdir()
    kept = disk / "profiles" / "full_0.nsys-rep"
    kept.write_bytes(b"an earlier rank report")
    with pytest.raises(OutputError, match=rf"cannot write the rank reports into {disk}/profiles: its disk has "
                                          r"2\.1 MB free and about 134\.2 MB is needed"):
        labkit.profile_ranks([sys.executable, "-c", "pass"], nproc=2, name="full", outdir=disk / "profiles",
                             overwrite=True)
    assert [p.name for p in (disk / "profiles").iterdir()] == ["full_0.nsys-rep"]  # nothing removed or added
    assert kept.read_bytes() == b"an earlier rank report"


@pytest.mark.nsys
def test_record_into_a_read_only_folder_names_it(mount):
    disk = mount("2m", ro=True)
    with pytest.raises(OutputError, match=rf"cannot create {disk}/profiles: {disk} is not writable \(Read-only file "
                                          r"system\): fix its permissions or choose another folder"):
        nsys.record([sys.executable, "-c", "pass"], name="ro", outdir=disk / "profiles", trace=("nvtx",))


def test_ledger_append_on_a_full_disk_is_one_error_and_leaves_the_file_as_it_was(mount):
    disk = mount("64k")
    led = Ledger(disk / "ledger.jsonl")
    led.append({"step": "baseline", "env": {"host": "h"}, "metrics": {"fps": 10.0}})
    before = led.path.read_bytes()
    fill(disk)
    with pytest.raises(OutputError, match=rf"cannot append a row to the ledger {led.path}: the disk holding {disk} is "
                                          r"full \(0\.0 MB free; about 0\.0 MB is needed\): free some space there"):
        led.append({"step": "next", "env": {"host": "h"}, "note": "x" * 20000})
    assert led.path.read_bytes() == before  # no half line


def test_ledger_append_in_a_read_only_folder_is_one_error(mount):
    disk = mount("64k", ro=True)
    with pytest.raises(OutputError, match=rf"{disk}: it is not writable \(Read-only file system\)"):
        Ledger(disk / "ledger.jsonl").append({"step": "baseline", "env": {"host": "h"}})


def test_bench_refuses_an_unwritable_ledger_before_running(mount, tmp_path):
    disk = mount("64k", ro=True)
    witness = tmp_path / "ran"
    with pytest.raises(OutputError, match=rf"cannot append to a ledger in {disk}: it is not writable"):
        bench.run([sys.executable, "-c", f"open({str(witness)!r}, 'w')"], step="s", repeats=1, warmup=None,
                  ledger=disk / "ledger.jsonl", results_dir=tmp_path / "r", progress=False)
    assert not witness.exists()  # refused before any run, so no result is lost at the end


# ----------------------------------------------------------------------------- nsys that is no nsys
@pytest.mark.parametrize("fake", ["/bin/false", "/bin/true"])
def test_labkit_nsys_that_is_not_nsys_says_what_ran_and_the_fix(monkeypatch, tmp_path, fake):
    monkeypatch.setenv("LABKIT_NSYS", fake)
    with pytest.raises(tool.NsysNotFoundError) as exc:
        labkit.profile([sys.executable, "-c", "pass"], name="x", outdir=tmp_path)
    assert str(exc.value) == (f"{fake} (from LABKIT_NSYS/NSYS={fake!r}) is not a working nsys: `{fake} --version` "
                              f"printed no Nsight Systems version: point LABKIT_NSYS at the nsys executable "
                              f"(scripts/install-nsys installs one)")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- narrow terminals
def _summary(*args: str, columns: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    res = subprocess.run([sys.executable, "-m", "labkit", "summary", str(FIX / "pipeline.nsys2025.3.sqlite"),
                          "--what", "kernels", *args], capture_output=True, text=True, env=env, check=True)
    return res.stdout.splitlines()


def test_summary_fits_the_terminal_unless_wide_and_prints_integers_as_integers():
    narrow = _summary(columns="100")
    assert max(map(len, narrow)) <= 100 and narrow[1].startswith("void cudnn::bn_fw_inf_1") and "…   " in narrow[1]
    wide = _summary("--wide", columns="100")
    assert len(wide) == len(narrow) and max(map(len, wide)) > 700 and "…" not in "".join(wide)
    assert _summary(columns=None) == wide  # a pipe without COLUMNS: nothing cut
    header = narrow[0].split()
    for line in narrow[1:]:
        row = dict(zip(header[1:], line.rsplit(None, len(header) - 1)[1:]))
        assert not any("e+" in v or "e-" in v for v in row.values())
        assert re.fullmatch(r"\d+", row["instances"]), row
        for col in ("total_ms", "min_ms", "max_ms"):  # ms to the microsecond, the unit in the header
            assert re.fullmatch(r"\d+\.\d{3}", row[col]), (col, row[col])
    ns = _summary("--ns", columns="100")  # nsys's units and names: integers as integers
    header = ns[0].split()
    for line in ns[1:]:
        row = dict(zip(header[1:], line.rsplit(None, len(header) - 1)[1:]))
        for col in ("instances", "total_ns", "min_ns", "max_ns"):
            assert re.fullmatch(r"\d+", row[col]), (col, row[col])


def test_summary_into_a_closed_pipe_ends_quietly():
    """``python -m labkit summary R | head -1``: the reader leaves early; no traceback, status 0."""
    proc = subprocess.Popen([sys.executable, "-m", "labkit", "summary", str(FIX / "pipeline.nsys2025.3.sqlite"),
                             "--what", "kernels", "--wide"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0)
    assert proc.stdout.read(10)
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0 and proc.stderr.read() == b""


def test_the_cuda_api_only_note_names_the_nsys_that_wrote_the_report(tmp_path):
    """A 2025.3 export with its GPU activity removed (what an nsys too old for the driver records)."""
    db = tmp_path / "api_only.sqlite"
    shutil.copyfile(FIX / "pipeline.nsys2025.3.sqlite", db)
    with sqlite3.connect(db) as con:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            con.execute(f"DELETE FROM {table}")
    rep = labkit.load_report(db)
    assert rep.notes == ["api_only.sqlite: no GPU activity recorded (CUDA API only): the nsys that recorded it "
                         "(2025.3.2.0) may be too old for the GPU driver; profile with a newer nsys"]


@pytest.mark.nsys
def test_ctrl_c_during_the_export_keeps_the_report_and_no_partial_export(tmp_path):
    out = tmp_path / "p"
    marks = "import nvtx\nfor i in range(200000): nvtx.mark('m')"  # a report whose export takes a while
    proc = subprocess.Popen([sys.executable, "-m", "labkit", "profile", "--name", "big", "--outdir", str(out),
                             "--trace", "nvtx", "--summary", "none", "--", sys.executable, "-c", marks],
                            stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not list(out.glob(".big.*.partial.sqlite")):  # nsys export is writing
        assert proc.poll() is None and time.monotonic() - t0 < 180, "the export was never seen running"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.splitlines() == [
        f"labkit: interrupted while exporting; the report is kept: {out / 'big.nsys-rep'} (labkit.load_report "
        f"exports it again)"]
    assert sorted(p.name for p in out.iterdir()) == ["big.log", "big.nsys-rep"]
    assert len(labkit.load_report(out / "big.nsys-rep").nvtx) == 200000


@pytest.mark.nsys
def test_a_second_ctrl_c_stops_nsys_its_agent_and_the_program_at_once(tmp_path):
    out, marker = tmp_path / "p", f"twice{os.getpid()}"
    proc = _cli(out, "twice", marker, 120)
    _wait_started(out / "twice.log", marker)
    nsys_pid = next(p.pid for p in psutil.process_iter(["cmdline"])
                    if (p.info["cmdline"] or [""])[0].endswith("nsys") and marker in " ".join(p.info["cmdline"]))
    agent = next(p for p in psutil.process_iter(["cmdline"])
                 if f"-{nsys_pid}" in " ".join(p.info["cmdline"] or []) and "--start-agent" in p.info["cmdline"])
    streams = [Path(f.path) for f in agent.open_files() if f.path.endswith(".qdstrm")]
    assert streams and all(p.exists() for p in streams)  # what nsys's agent records into, in /tmp
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err
    assert err.splitlines() == [f"labkit: interrupted again: nsys was stopped before it finished; no report was kept "
                                f"(its output: {out / 'twice.log'})"]
    time.sleep(2)  # nothing writes a report afterwards either
    assert [p.name for p in out.iterdir()] == ["twice.log"]
    assert not agent.is_running() and _alive(marker) == [] and not any(p.exists() for p in streams)
