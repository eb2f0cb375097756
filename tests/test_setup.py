"""`make lab` and `make test` set up what they need (scripts/setup): a part this machine cannot install
is one line before any work, and the test summary counts what each missing part skipped (issue 59).
The machine without the parts is real: a real non-root user with no sudo, on a PATH holding every
command of this machine except nsys, Chromium and the GUI's programs."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from faultkit import open_tmp, user  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ("nsys", "nsys-ui", "chromium", "chromedriver", "Xvfb", "x11vnc", "websockify", "xdotool", "xauth")


def _bare_machine(folder: Path) -> dict:
    """A copy of scripts/setup and install-nsys, and a PATH of this machine's commands less the parts."""
    (folder / "scripts").mkdir()
    for name in ("setup", "install-nsys"):
        shutil.copy(ROOT / "scripts" / name, folder / "scripts" / name)
    bin_ = folder / "bin"
    bin_.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for exe in Path(d).iterdir():
            if exe.name not in HIDDEN and not (bin_ / exe.name).exists():
                (bin_ / exe.name).symlink_to(exe)
    folder.chmod(0o755)
    return {"PATH": str(bin_), "HOME": "/nonexistent", "LANG": "C.UTF-8"}


def _setup_as(user: str, folder: Path, what: str) -> subprocess.CompletedProcess:
    env = _bare_machine(folder)
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                           "bash", str(folder / "scripts" / "setup"), what],
                          capture_output=True, text=True, timeout=120, cwd="/")


def test_the_lab_without_nsys_stops_before_any_work_in_one_line(open_tmp, user):
    res = _setup_as(user, open_tmp, "lab")
    lines = res.stdout.strip().splitlines() + res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, lines
    assert lines[0].startswith("setup: nsys not found and not installable here")
    assert "scripts/install-nsys" in lines[0] and "LABKIT_NSYS" in lines[0]


def test_the_tests_without_their_parts_say_each_in_one_line_and_go_on(open_tmp, user):
    res = _setup_as(user, open_tmp, "test")
    lines = res.stdout.strip().splitlines()
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert lines[0].startswith("setup: nsys not found: run scripts/install-nsys")
    assert lines[1] == ("setup: Chromium and chromium-driver missing: install it with "
                        "'sudo apt-get install chromium chromium-driver' (the tests that need it skip)")
    assert lines[2].startswith("setup: the GUI's packages missing: install it with 'sudo apt-get install xvfb")
    assert lines[3] == "setup: going on without the parts above" and len(lines) == 4


def test_where_every_part_is_present_setup_installs_nothing_and_says_nothing():
    have = all(shutil.which(c) for c in HIDDEN if c != "nsys-ui")
    res = subprocess.run(["bash", str(ROOT / "scripts" / "setup"), "test"], capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LABKIT_SETUP": "0"})
    assert res.returncode == 0
    if have:  # CI: make test installed them all
        assert res.stdout == "" and res.stderr == ""
    else:  # LABKIT_SETUP=0 installs nothing: only lines naming what is missing
        assert res.stdout and all(line.startswith("setup: ") for line in res.stdout.splitlines())


def test_the_summary_counts_what_each_missing_part_skipped(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_parts.py").write_text(
        "import pytest\n"
        "def test_a(): pytest.skip('nsys not installed (run scripts/install-nsys)')\n"
        "def test_b(): pytest.skip('nsys not found (scripts/install-nsys or LABKIT_NSYS)')\n"
        "def test_c(): pytest.skip('chromium not found: apt-get install chromium')\n"
        "def test_d(): pytest.skip('a reason of its own')\n"
        "def test_e(): pass\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = res.stdout
    assert "2 tests skipped for want of nsys (get it: scripts/install-nsys)" in out, out
    assert "1 test skipped for want of the browser (get it: apt-get install chromium chromium-driver)" in out
    assert "1 test skipped for other reasons (pytest -rs lists them)" in out


def test_the_parallel_phase_hands_out_the_longest_file_first(tmp_path):
    """make test's parallel phase (pytest-xdist, one file per worker) starts the file whose tests carry
    the most ``minutes`` first, so an hour-long test does not end the phase alone; without
    ``--no-loadscope-reorder`` (which make test passes) xdist would order files by their test count."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    started = tmp_path / "started.txt"
    body = ("import time, pytest\n"
            "def _start(name):\n"
            f"    with open({str(started)!r}, 'a') as f: f.write(name + '\\n')\n"
            "    time.sleep(0.3)\n")
    (tmp_path / "test_many.py").write_text(body + "".join(f"def test_m{i}(): _start('many')\n" for i in range(5)))
    (tmp_path / "test_few.py").write_text(body + "def test_f0(): _start('few')\ndef test_f1(): _start('few')\n")
    (tmp_path / "test_long.py").write_text(body + "@pytest.mark.minutes(30)\ndef test_l(): _start('long')\n")

    def order(*extra: str) -> list[str]:
        started.write_text("")
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                              "-n", "2", "--dist", "loadfile", *extra, str(tmp_path)],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return list(dict.fromkeys(started.read_text().split()))  # the files in the order they started

    assert "--no-loadscope-reorder" in (ROOT / "Makefile").read_text()
    ours = order("--no-loadscope-reorder")
    assert ours.index("long") < ours.index("few"), ours
    assert order()[-1] == "long"  # xdist's own order: most tests first
