"""Issue 25's faults in the application, tried for real: a swapped model in the cache, ground
truth with a truncated row or only a header, a disk that fills while the output video is written
(a real tmpfs), then freed; a model cache the run cannot write (issue 33: a read-only disk, a
folder another user owns, as a real non-root user). Real clips, the real detector at 96x160, real
ONNX export."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from faultkit import APP_PRELOAD, fill, mount, open_tmp, run_as, user  # noqa: F401 (fixtures)
from test_app_safety import FAST, clip  # noqa: F401 (clip: the same small real clip's fixture)

from source_code.detect_video import main
from source_code.scenes import SceneConfig, gt_path_for, make_video, read_gt

pytestmark = pytest.mark.alone  # it kills, interrupts or waits out nsys and the programs it records: how fast they end decides what it sees


def test_a_swapped_model_in_the_cache_is_not_reused(tmp_path):
    import torch

    from source_code.backends.artifacts import ensure_onnx

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x)

    model = Tiny().eval()
    path = ensure_onnx(model, cache_dir=tmp_path, input_hw=(32, 32))
    good = path.read_bytes()
    path.write_bytes(b"another user's model")  # a world-writable cache, swapped
    again = ensure_onnx(model, cache_dir=tmp_path, input_hw=(32, 32))
    assert again == path and again.read_bytes() != b"another user's model" and len(again.read_bytes()) == len(good)


@pytest.mark.parametrize("cut", ["truncated", "header-only"])
def test_broken_ground_truth_is_named_not_scored(clip, tmp_path, cut):
    video = tmp_path / "clip.mp4"
    shutil.copy(clip, video)
    lines = gt_path_for(clip).read_text().splitlines()
    gt = gt_path_for(video)
    gt.write_text("\n".join(lines[:1] if cut == "header-only" else lines[:5] + [lines[5].split(",")[0] + ",12"])
                  + "\n")
    with pytest.raises(ValueError) as err:
        read_gt(gt)
    assert str(gt) in str(err.value) and "\n" not in str(err.value)
    results = tmp_path / "r.json"
    assert main([*FAST, "--cache-dir", str(tmp_path / "cache"), "--input", str(video), "--results", str(results)]) == 0
    import json

    doc = json.loads(results.read_text())
    assert doc["accuracy"]["mota"] is None and any(str(gt) in w for w in doc["warnings"])


def test_a_disk_that_filled_while_writing_the_video_does_not_block_later_runs(tmp_path, mount, capsys):
    import threading
    import time

    clip, _ = make_video(tmp_path / "long.mp4", seconds=4, config=SceneConfig(seed=43, width=320, height=192, fps=10))
    disk = mount("3m")
    out = disk / "out.mp4"
    args = [*FAST, "--cache-dir", str(tmp_path / "cache"), "--input", str(clip), "--output", str(out), "--frames", "40"]

    def fill_once_writing():  # another user's download fills the disk while the video is written
        t0 = time.monotonic()
        while not out.exists() and time.monotonic() - t0 < 120:
            time.sleep(0.005)
        fill(disk)

    filler = threading.Thread(target=fill_once_writing)
    filler.start()
    results = tmp_path / "r.json"
    main([*args, "--results", str(results)])  # OpenCV's writer reports no write error on a full disk
    filler.join()
    err = capsys.readouterr().err
    import json

    doc = json.loads(results.read_text())  # the short video is said, and the row is not "ok"
    short = [w for w in doc["warnings"] if w.startswith(f"the output video {out} holds")]
    assert doc["status"] == "partial" and len(short) == 1 and "free space and run again" in short[0], doc["warnings"]
    assert short[0] in err
    os.unlink(disk / "filler")  # space freed: the next run replaces its own partial video
    assert main(args) == 0, capsys.readouterr().err


def test_an_audio_only_file_is_named_as_such(clip, tmp_path, capsys):
    """A real MP4 whose one track is declared a sound track (its ``hdlr`` box says "soun", as an
    audio-only recording's does): one line saying it has no video track, not "damaged"."""
    from source_code.sources import track_kinds

    data = clip.read_bytes()
    at = data.find(b"hdlr")
    assert track_kinds(clip) >= {"video"} and data[at + 12:at + 16] == b"vide"
    audio = tmp_path / "talk.mp4"
    audio.write_bytes(data[:at + 12] + b"soun" + data[at + 16:])
    assert track_kinds(audio) == {"audio"}
    assert main([*FAST, "--cache-dir", str(tmp_path / "cache"), "--input", str(audio),
                 "--results", str(tmp_path / "r.json")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no video track" in err[0] and "audio" in err[0] and "damaged" not in err[0], err
    import json

    doc = json.loads((tmp_path / "r.json").read_text())  # a failed run's results say so, with the same line
    assert doc["status"] != "ok" and "no video track" in json.dumps(doc)


def test_a_model_cache_on_a_read_only_disk_is_said_before_any_work(clip, tmp_path, mount, capsys):
    disk = mount("1m", ro=True)
    rc = main([*FAST, "--backend", "onnxruntime", "--cache-dir", str(disk), "--input", str(clip),
               "--results", str(tmp_path / "r.json")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert f"--cache-dir {disk}: cannot write the converted models there (Read-only file system)" in lines[0]
    assert lines[0].endswith("pass --cache-dir with a folder of your own")
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "failed"  # no frame was decoded


def test_a_model_cache_another_user_owns_is_said_with_its_owner(clip, open_tmp, user):
    """Issue 33: a cache root made (as in a shared container) failed at the first model written with
    'free space there', a permissions problem found late. The run is a real non-root user's."""
    cache = open_tmp / "cache"
    cache.mkdir(mode=0o755)  # root's
    shutil.copy(clip, open_tmp / "clip.mp4")
    res = run_as(user, "from source_code.detect_video import main\n"
                       f"sys.exit(main({[*FAST, '--backend', 'onnxruntime', '--cache-dir', str(cache), '--input', str(open_tmp / 'clip.mp4')]!r}))",
                 preload=APP_PRELOAD)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert f"(Permission denied, {cache} owned by root): pass --cache-dir with a folder of your own" in lines[0]
