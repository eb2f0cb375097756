"""Issue 33, one boundary for names and paths: every name that becomes a file goes through
labkit.paths.check_name; what labkit reserves is exactly what nsys writes (a dotted name, a %);
a non-UTF-8 input video is one line from the application, never a segfault in OpenCV.
Real nsys where a test says so (skipped with the reason where it is absent)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.paths import NameError_, check_input, check_name, nsys_output, report_files

ROOT = Path(__file__).resolve().parents[1]
NSYS = shutil.which("nsys") or os.environ.get("LABKIT_NSYS")
needs_nsys = pytest.mark.skipif(not NSYS, reason="nsys not installed (scripts/install-nsys)")


@pytest.mark.parametrize("bad", ["", ".", "..", "../../x", "a/b", "a\x00b", "a\nb", "x" * 250, "caf\udce9"])
def test_check_name_refuses_in_one_line(bad):
    with pytest.raises(NameError_) as e:
        check_name(bad, what="report name")
    assert "\n" not in str(e.value) and "report name" in str(e.value)


def test_names_nsys_would_write_as_given():
    assert check_name("model.fp16") == "model.fp16" and check_name("a b%p") == "a b%p"
    files = report_files("out", "model.fp16")
    assert files[".nsys-rep"] == Path("out/model.fp16.nsys-rep") and files[".sqlite"] == Path("out/model.fp16.sqlite")
    assert nsys_output("r/100%/a%pb%q{HOME}") == "r/100%%/a%%pb%%q{HOME}"
    assert check_name("é" * 120, suffix=".nsys-rep") and pytest.raises(NameError_, check_name, "é" * 124)


def test_profile_refuses_bad_names_before_nsys_runs(tmp_path, capsys):
    from labkit.cli import main

    for name in ("", ".", "../../x"):
        assert main(["profile", "--name", name, "--outdir", str(tmp_path / "out"), "--", "true"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "report name" in err[0]
    assert not (tmp_path / "x.nsys-rep").exists() and not (tmp_path / "x.log").exists()
    assert not list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else True


@needs_nsys
def test_dotted_name_and_percent_reserve_what_nsys_writes(tmp_path):
    from labkit.record.nsys import ReportExistsError, record

    out = tmp_path / "100%"
    out.mkdir()
    mine = out / "model.fp16.nsys-rep"
    mine.write_bytes(b"an earlier report, not labkit's to replace")
    with pytest.raises(ReportExistsError):  # before: labkit reserved model.nsys-rep; nsys replaced this one
        record(["true"], name="model.fp16", outdir=out, trace=("osrt",), progress=False)
    assert mine.read_bytes() == b"an earlier report, not labkit's to replace"
    rec = record(["true"], name="a%pb.v2", outdir=out, trace=("osrt",), progress=False)
    assert rec.nsys_rep == out / "a%pb.v2.nsys-rep" and rec.nsys_rep.stat().st_size > 0
    assert sorted(p.name for p in out.iterdir()) == ["a%pb.v2.log", "a%pb.v2.nsys-rep", "model.fp16.nsys-rep"]


def test_check_input_refuses_special_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(Exception, match="special file"):
        check_input(fifo)
    with pytest.raises(Exception, match="a folder"):
        check_input(tmp_path)
    (tmp_path / "f").write_text("x")
    assert check_input(tmp_path / "f") == tmp_path / "f"


def test_bench_run_name_never_leaves_its_folder():
    from labkit.bench.runner import _safe

    assert _safe("..") == "run" and _safe("../../x") == "x" and _safe(".hidden") == "hidden"
    assert len(_safe("y" * 400).encode()) <= 180


def test_non_utf8_input_video_is_one_line_not_a_segfault(tmp_path):
    from source_code.scenes import SceneConfig, make_video

    video, _ = make_video(tmp_path / "clip.mp4", seconds=0.3, config=SceneConfig(seed=3, width=160, height=96, fps=10))
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9.mp4")
    os.link(os.fsencode(video), odd)
    argv = [os.fsencode(sys.executable), os.fsencode(ROOT / "source_code" / "detect_video.py"), b"--input", odd,
            b"--device", b"cpu", b"--frames", b"2", b"--input-hw", b"96x160", b"--cache-dir",
            os.fsencode(tmp_path / "cache"), b"--results", os.fsencode(tmp_path / "r.json")]
    r = subprocess.run(argv, capture_output=True, timeout=300, cwd=tmp_path)
    err = [line for line in r.stderr.decode(errors="replace").splitlines() if line.strip()]
    assert r.returncode == 2 and len(err) == 1 and "not valid UTF-8" in err[0], (r.returncode, err)
    assert "caf\\xe9.mp4" in err[0]
