"""The application under torchrun (source_code/distributed.py): real ranks, gloo on the CPU, the real
detector on a generated clip; rank 0 writes one results file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.annotate import ResultsError, read_results, write_results
from source_code.distributed import World, share, shard
from source_code.options import PipelineConfig
from source_code.scenes import SceneConfig, make_video

pytestmark = pytest.mark.alone  # torch.distributed ranks against deadlines: alone

APP = Path(__file__).resolve().parents[1] / "source_code" / "detect_video.py"
SMALL = ["--no-osd", "--device", "cpu", "--input-hw", "192x320", "--warmup", "2"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    video, _ = make_video(tmp_path_factory.mktemp("ranks") / "clip.mp4", seconds=1.6,
                          config=SceneConfig(seed=31, width=320, height=192, fps=10))
    return Path(video)


def _torchrun(nproc: int, args: list[str], cwd: Path, script: Path = APP) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(script),
            *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("n, size, shares", [
    (2, 2, [[0], [1]]), (5, 2, [[0, 1, 2], [3, 4]]), (7, 3, [[0, 1, 2], [3, 4], [5, 6]]), (3, 3, [[0], [1], [2]]),
])
def test_sources_spread_evenly(n, size, shares):
    assert [list(share(n, World(rank=r, size=size))) for r in range(size)] == shares


def test_world_from_launcher_environment():
    assert World.from_env({}) == World()
    assert World.from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}) == World(3, 4, 1, 4)
    assert World.from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}) == World(3, 4, 1, 2)


def test_shard_gives_results_and_video_to_rank_0_only(clip):
    cfg = PipelineConfig(inputs=(str(clip),), streams=3, device="cpu", results="r.json", output="v.mp4")
    first, last = (shard(cfg, World(rank=r, size=2)) for r in (0, 1))
    assert (first.inputs, first.streams, first.results, first.output) == ((str(clip),) * 2, 2, "r.json", "v.mp4")
    assert (last.inputs, last.streams, last.results, last.output) == ((str(clip),), 1, None, None)


def test_two_ranks_write_one_results_file(clip, tmp_path):
    # the command of issue 17's "done when", on a small clip
    r = _torchrun(2, ["--input", str(clip), "--streams", "2", "--results", "r.json", *SMALL], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = read_results(tmp_path / "r.json")  # validates ranks and per_rank too
    assert doc["ranks"] == 2 and [p["rank"] for p in doc["per_rank"]] == [0, 1]
    assert doc["frames"] == sum(p["frames"] for p in doc["per_rank"]) == 32
    assert doc["timed_frames"] == sum(p["timed_frames"] for p in doc["per_rank"])
    # the common window holds every rank's own window, so the aggregate is at most their sum
    assert doc["seconds"] >= max(p["seconds"] for p in doc["per_rank"])
    assert doc["fps"] <= sum(p["fps"] for p in doc["per_rank"]) + 1e-6
    assert all(p["device"] == "cpu" and p["stages"]["infer"] > 0 for p in doc["per_rank"])
    if doc["fps_ci95"] is not None:  # the aggregate's own interval, holding its point (never rank 0's)
        assert doc["fps_ci95"][0] <= doc["fps"] <= doc["fps_ci95"][1]
        assert all(p["fps_ci95"] for p in doc["per_rank"])
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # rank 1 wrote nothing (no second file, no video)

    # accuracy over both ranks' sequences: two copies of one clip score as the clip alone
    one = subprocess.run([sys.executable, str(APP), "--input", str(clip), "--results", "one.json", *SMALL],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert one.returncode == 0, one.stderr
    alone = read_results(tmp_path / "one.json")["accuracy"]
    assert doc["accuracy"]["map50"] == pytest.approx(alone["map50"])
    assert doc["accuracy"]["mota"] == pytest.approx(alone["mota"])
    assert doc["accuracy"]["counts"]["CLR_FN"] == 2 * alone["counts"]["CLR_FN"]


def test_the_aggregate_interval_is_the_ranks_own_scaled_to_the_aggregate():
    """The full CPU lab's ranks2 run (2-core VM, 2026-11-26): rank 0 98.8 frames/s (81.6-122.4 over
    its batches), rank 1 88.5; the aggregate 176.9 over the common window. The merged file carried
    rank 0's interval beside the aggregate, so the ledger read 176.9 (81.6-176.9)."""
    from source_code.distributed import aggregate_ci

    docs = [{"fps": 98.8183, "fps_ci95": [81.6382, 122.4354]}, {"fps": 88.4682, "fps_ci95": [75.0, 101.0]}]
    low, high = aggregate_ci(docs, 176.9365)
    assert low == pytest.approx(176.9365 * (81.6382 + 75.0) / (98.8183 + 88.4682), abs=1e-3)
    assert high == pytest.approx(176.9365 * (122.4354 + 101.0) / (98.8183 + 88.4682), abs=1e-3)
    assert low < 176.9365 < high and low > 81.6382 * 1.5
    assert aggregate_ci([docs[0], {"fps": 88.0, "fps_ci95": None}], 176.9) is None  # a rank without one
    assert aggregate_ci(docs, None) is None


def test_more_ranks_than_sources_is_one_line(clip, tmp_path):
    r = _torchrun(2, ["--input", str(clip), "--results", "r.json", *SMALL], tmp_path)
    assert r.returncode != 0
    line = "detect_video: error: 1 source(s) for 2 ranks: every rank needs one; give --streams 2"
    assert line in r.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["status"] == "failed" and doc["error"].startswith("1 source(s) for 2 ranks")


def test_rank_0_late_to_start_still_writes_the_failure_every_rank_found(clip, tmp_path):
    """Every rank finds one source too few for two ranks; rank 1, the faster to start, exited with its
    error, torchrun stopped rank 0 before it had written the results file, and there was none (1 in 4
    runs on the 2-core VM; CI of 2026-11-30). Here rank 0 starts 2 s late, the application itself
    unchanged: the ranks meet, rank 0 writes the failure, then they leave."""
    late = tmp_path / "late_rank0.py"
    late.write_text("import os, runpy, sys, time\n"
                    "if os.environ.get('RANK') == '0':\n    time.sleep(2)\n"
                    f"sys.argv[0] = {str(APP)!r}\nrunpy.run_path({str(APP)!r}, run_name='__main__')\n")
    r = _torchrun(2, ["--input", str(clip), "--results", "r.json", *SMALL], tmp_path, script=late)
    assert r.returncode != 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["status"] == "failed" and doc["error"].startswith("1 source(s) for 2 ranks"), doc["error"]


def test_a_failing_rank_fails_the_run_with_its_line(clip, tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_text("not a video")
    r = _torchrun(2, ["--input", str(clip), str(bad), "--streams", "2", "--results", "r.json", *SMALL], tmp_path)
    assert r.returncode != 0
    own = f"detect_video: error: rank 1: cannot open {bad}: not a readable video"
    assert own in r.stderr  # the failing rank's own line
    doc = json.loads((tmp_path / "r.json").read_text())  # rank 0 stopped too and wrote the failure
    assert doc["status"] == "failed" and doc["error"].startswith(f"rank 1 failed: cannot open {bad}")


def test_per_rank_field_is_checked(tmp_path):
    good = json.loads(json.dumps({"status": "ok", "frames": 2, "timed_frames": 2, "warmup_frames": 0, "seconds": 1.0,
                                  "fps": 2.0, "stages": {}, "stage_detail": {}, "latency_ms": {}, "accuracy": {},
                                  "config": {}, "model": None, "output_frames": 0, "warnings": []}))
    write_results(tmp_path / "a.json", good)
    assert "ranks" not in read_results(tmp_path / "a.json")  # optional: a one-process file has neither
    write_results(tmp_path / "b.json", {**good, "ranks": 2, "per_rank": {"0": {}}})
    with pytest.raises(ResultsError, match="'per_rank' should be list"):
        read_results(tmp_path / "b.json")


def _rank_that_waits(rank: int, port: int, results) -> None:
    """Rank 0 waits at the start for rank 1, which never comes (a hung rank), with gloo and a 3 s timeout."""
    import os
    import time

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    from source_code import distributed

    distributed.COLLECTIVE_TIMEOUT_S = 3
    world = distributed.World.from_env()
    with distributed.process_group(world, "cpu") as dist:
        if rank == 1:
            time.sleep(10)
            return
        t0 = time.monotonic()
        try:
            distributed.Rank(world, dist).start()
            results.put(("returned", time.monotonic() - t0))
        except distributed.PipelineError as e:
            results.put((str(e), time.monotonic() - t0))


def test_a_hung_rank_times_the_others_out():
    import multiprocessing
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank_that_waits, args=(r, port, results)) for r in (0, 1)]
    for p in procs:
        p.start()
    message, waited = results.get(timeout=120)
    for p in procs:
        p.join(timeout=60)
    assert message.startswith("rank 0: the other ranks did not answer (") and "one failed or hung" in message
    assert 2.5 < waited < 9  # the 3 s timeout, not rank 1's 10 s
