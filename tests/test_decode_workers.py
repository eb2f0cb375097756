"""detect_video.py --decode-workers N: decoder processes that hand frames over through shared memory.

Real clips (source_code.scenes, 320x192, 30 fps) decoded by OpenCV in real spawned processes; the
CLI runs as a subprocess the way the lab runs it. What must hold: the same frames and the same
detections as decoding in-process, and a worker that dies (or a pipeline that dies) leaves one
line, no process and no /dev/shm segment behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import psutil
import pytest

from source_code.decode_workers import SHM_PREFIX
from source_code.scenes import SceneConfig, make_video

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "source_code" / "detect_video.py"
SMALL = ["--input-hw", "192x320", "--batch-size", "4", "--warmup", "4", "--cache-dir"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    d = tmp_path_factory.mktemp("decode_workers_clips")
    video, _ = make_video(d / "clip.mp4", seconds=1.0, config=SceneConfig(seed=3, width=320, height=192))
    return video


def _env(tmp_path: Path) -> dict:
    env = {**os.environ, "LABKIT_REPORTS": str(tmp_path / "reports")}
    env.pop("LABKIT_DEBUG", None)
    return env


def _run(tmp_path: Path, clip: Path, tag: str, *args: str) -> tuple[dict, list[str]]:
    """Run the CLI; return (results document, md5 of every frame of the output video)."""
    res, out = tmp_path / f"{tag}.json", tmp_path / f"{tag}.mp4"
    r = subprocess.run([sys.executable, str(APP), "--input", str(clip), *args, "--results", str(res), "--output",
                        str(out), *SMALL, str(tmp_path / "cache")], capture_output=True, text=True, timeout=300,
                       env=_env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cap, sums = cv2.VideoCapture(str(out)), []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        sums.append(hashlib.md5(frame.tobytes()).hexdigest())
    cap.release()
    return json.loads(res.read_text()), sums


def _segments(pid: int) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"{SHM_PREFIX}{pid}-"))


def test_decode_workers_give_the_same_frames_and_detections_as_in_process_decoding(tmp_path, clip):
    """Two streams decoded by two worker processes, against the same run decoded by threads: every
    output frame (the frame with its boxes drawn) and every accuracy figure are the same."""
    here, here_frames = _run(tmp_path, clip, "threads", "--streams", "2", "--decode-workers", "0")
    procs, proc_frames = _run(tmp_path, clip, "workers", "--streams", "2", "--decode-workers", "2")
    assert procs["status"] == here["status"] == "ok"
    assert procs["frames"] == here["frames"] == 60
    assert len(proc_frames) == 30 and proc_frames == here_frames
    assert procs["accuracy"]["output_digest"] == here["accuracy"]["output_digest"]  # stream 0's detections, tracks
    for k in ("map50", "mota", "idf1", "hota"):
        assert procs["accuracy"][k] == here["accuracy"][k] is not None, k
    assert procs["stages"]["decode"] is None  # decoded in other processes: none of this interpreter's time
    assert here["stages"]["decode"] > 0


def test_a_decode_worker_that_dies_ends_the_run_in_one_line_leaving_no_process_or_segment(tmp_path):
    """SIGKILL one decoder process mid-run (as the OOM killer would): the run exits 1 with one line
    naming the worker, its other worker and the rings are gone."""
    video, _ = make_video(tmp_path / "long.mp4", seconds=4.0, config=SceneConfig(seed=5, width=320, height=192))
    p = subprocess.Popen([sys.executable, str(APP), "--input", str(video), "--streams", "2", "--decode-workers", "2",
                          "--realtime", "--no-osd", *SMALL, str(tmp_path / "cache")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_env(tmp_path), cwd=tmp_path)
    main = psutil.Process(p.pid)
    deadline, workers = time.monotonic() + 120, []
    while time.monotonic() < deadline and len(workers) < 2 and p.poll() is None:
        workers = [c for c in main.children() if "spawn_main" in " ".join(c.cmdline())]
        time.sleep(0.05)
    assert len(workers) == 2, "the decoder processes never started"
    segments = _segments(p.pid)
    assert len(segments) == 2  # one ring per stream, while it runs
    everything = main.children(recursive=True)
    workers[0].send_signal(signal.SIGKILL)
    _, err = p.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip()]
    assert p.returncode == 1, err
    assert len(lines) == 1 and "decode worker" in lines[0] and f"pid {workers[0].pid}" in lines[0], lines
    assert "exited with code -9" in lines[0]
    _, alive = psutil.wait_procs(everything, timeout=10)
    assert not alive, alive
    assert _segments(p.pid) == []


def test_a_pipeline_that_is_killed_leaves_no_decoder_process_or_segment(tmp_path):
    """SIGKILL the pipeline itself: its decoder processes see their parent gone and leave, and
    multiprocessing's resource tracker unlinks the rings."""
    video, _ = make_video(tmp_path / "long.mp4", seconds=4.0, config=SceneConfig(seed=5, width=320, height=192))
    p = subprocess.Popen([sys.executable, str(APP), "--input", str(video), "--decode-workers", "1", "--realtime",
                          "--no-osd", *SMALL, str(tmp_path / "cache")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=_env(tmp_path), cwd=tmp_path)
    main = psutil.Process(p.pid)
    deadline, workers = time.monotonic() + 120, []
    while time.monotonic() < deadline and not workers and p.poll() is None:
        workers = [c for c in main.children() if "spawn_main" in " ".join(c.cmdline())]
        time.sleep(0.05)
    assert workers and _segments(p.pid)
    everything = main.children(recursive=True)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    _, alive = psutil.wait_procs(everything, timeout=10)
    assert not alive, alive
    assert _segments(p.pid) == []
