"""detect_video.py never replaces what the user has, checks before any work, and ends every
fault in one line (issue 14). Real clips (source_code.scenes), the real detector at 96x160."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from labkit import annotate
from source_code import checks
from source_code.detect_video import main
from source_code.scenes import SceneConfig, gt_path_for, make_video
from faultkit import APP_PRELOAD, open_tmp, run_as, user  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--input-hw", "96x160", "--device", "cpu", "--warmup", "0", "--frames", "4"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    video, _ = make_video(d / "clip.mp4", seconds=0.6, config=SceneConfig(seed=41, width=320, height=192, fps=10))
    return video


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    # the application reads no cache variable: every run here passes --cache-dir (FAST is in each argv)
    monkeypatch.setitem(globals(), "FAST", [*FAST, "--cache-dir", str(tmp_path_factory.getbasetemp() / "cache")])


def cli(*args, cwd=ROOT):
    """(exit code, non-empty stderr lines) of the real program as a subprocess."""
    r = subprocess.run([sys.executable, str(ROOT / "source_code" / "detect_video.py"), *map(str, args)],
                       capture_output=True, text=True, timeout=300, cwd=cwd)
    return r.returncode, [line for line in r.stderr.splitlines() if line.strip()]


def err_of(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize("flag", ["--output", "--results"])
def test_a_file_the_app_did_not_write_is_refused_unless_overwrite(clip, tmp_path, capsys, flag):
    mine = tmp_path / ("mine.mp4" if flag == "--output" else "mine.json")
    mine.write_bytes(b"the user's own file")
    assert main(["--input", str(clip), flag, str(mine), *FAST]) == 2
    (line,) = err_of(capsys)
    assert line == (f"detect_video: error: {flag} {mine} exists and was not written by detect_video: "
                    "pass --overwrite to replace it, or choose another path")
    assert mine.read_bytes() == b"the user's own file"
    assert main(["--input", str(clip), flag, str(mine), "--overwrite", *FAST]) == 0
    assert mine.read_bytes() != b"the user's own file"


def test_the_apps_own_files_are_replaced_and_a_replaced_video_is_not(clip, tmp_path, capsys):
    out, res = tmp_path / "v.mp4", tmp_path / "r.json"
    args = ["--input", str(clip), "--output", str(out), "--results", str(res), *FAST]
    assert main(args) == 0 and main(args) == 0  # the second run replaces the first run's files
    assert annotate.read_results(res)["status"] == "ok"
    out.write_bytes(out.read_bytes()[:-10])  # someone else changed the video since
    capsys.readouterr()
    assert main(args) == 2 and "--output" in err_of(capsys)[0]


@pytest.mark.parametrize("flag", ["--output", "--results"])
def test_ground_truth_and_inputs_are_never_targets(clip, tmp_path, capsys, flag):
    gt = gt_path_for(clip)
    before = gt.read_bytes(), clip.read_bytes()
    for target, what in ((gt, "is ground truth"), (clip, "is an input video")):
        assert main(["--input", str(clip), flag, str(target), "--overwrite", *FAST]) == 2
        (line,) = err_of(capsys)
        assert what in line and "refusing to overwrite" in line
    assert (gt.read_bytes(), clip.read_bytes()) == before


def test_unwritable_folders_are_found_before_any_work(clip, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for flag, name in (("--results", "r.json"), ("--output", "v.mp4")):
        rc, err = cli("--input", clip, flag, blocker / name, *FAST)
        assert rc == 2 and len(err) == 1, err
        assert err[0].startswith(f"detect_video: error: {flag} {blocker / name}: cannot write in {blocker}")
        assert err[0].endswith("choose a writable folder")


def test_read_only_output_folder(clip, open_tmp, user):
    """A folder the user may not write (0555) is found before any work. Root writes anywhere, so the
    program runs as a real non-root user (faultkit's)."""
    ro = open_tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    shutil.copy(clip, open_tmp / "clip.mp4")
    fast = [*FAST[:FAST.index("--cache-dir")], "--cache-dir", str(open_tmp / "cache")]
    res = run_as(user, "from source_code.detect_video import main\n"
                       f"sys.exit(main({['--input', str(open_tmp / 'clip.mp4'), '--output', str(ro / 'v.mp4'), *fast]!r}))",
                 preload=APP_PRELOAD)
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and err == [f"detect_video: error: --output {ro / 'v.mp4'}: cannot write in {ro} "
                                           "(Permission denied): choose a writable folder"], res.stderr


def test_bad_input_and_unwritable_results_give_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    rc, err = cli("--input", bad, "--results", blocker / "r.json", *FAST)
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], err


def test_a_1x1_video_gets_the_right_message(tmp_path):
    tiny = tmp_path / "tiny.avi"
    w = cv2.VideoWriter(str(tiny), cv2.VideoWriter_fourcc(*"MJPG"), 10, (1, 1))
    for _ in range(3):
        w.write(np.zeros((1, 1, 3), np.uint8))
    w.release()
    rc, err = cli("--input", tiny, "--output", tmp_path / "out.mp4", *FAST)
    assert rc == 2 and len(err) == 1
    assert "cannot write 1x1 frames" in err[0] and "use a .mp4 or .avi path" not in err[0]


def test_url_input(tmp_path):
    rc, err = cli("--input", "https://example.com/clip.mp4", *FAST)
    assert rc == 2 and err == ["detect_video: error: --input https://example.com/clip.mp4: URLs are not supported: "
                               "download the video first"]


def test_device_cuda_n_is_accepted_by_the_parser(clip):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: cuda:1 may exist")
    rc, err = cli("--input", clip, *FAST, "--device", "cuda:1")  # the last --device wins
    assert rc == 3 and len(err) == 1 and "no CUDA GPU is visible" in err[0]  # not the parser's refusal (2)


def test_disk_estimate_names_the_folder_and_the_space(tmp_path):
    with pytest.raises(checks.PipelineError) as e:
        checks.check_video_target(tmp_path / "v.mp4", frames=10**9, width=1280, height=720)
    assert str(e.value).startswith(f"not enough free disk in {tmp_path} for the output video: about ")
    assert e.value.exit_code == 2
    checks.check_video_target(tmp_path / "v.mp4", frames=10, width=1280, height=720)  # room for 10 frames
