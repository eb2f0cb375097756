"""bench.run under torchrun (launcher="torchrun", nproc=N): the real application as 2 ranks with gloo on
the CPU, recorded in the ledger with config.ranks; and the profiled run, one nsys report per rank."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from labkit import bench
from labkit.bench.results import BenchError
from labkit.bench.runner import launch
from labkit.bench.ledger import Ledger
from source_code.scenes import SceneConfig, make_video

APP = Path(__file__).resolve().parents[1] / "source_code" / "detect_video.py"
SMALL = ["--no-osd", "--device", "cpu", "--input-hw", "192x320"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    video, _ = make_video(tmp_path_factory.mktemp("bench_ranks") / "clip.mp4", seconds=1.6,
                          config=SceneConfig(seed=31, width=320, height=192, fps=10))
    return str(video)


TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


@pytest.mark.parametrize("cmd, argv", [
    (["python3", "app.py", "--x"], ["python3", *TORCHRUN, "app.py", "--x"]),
    (["python", "-m", "pkg.app"], ["python", *TORCHRUN, "-m", "pkg.app"]),
    (["./app"], [sys.executable, *TORCHRUN, "--no-python", "./app"]),
])
def test_launch_under_torchrun(cmd, argv):
    assert launch(cmd, "torchrun", 2) == argv
    assert launch(cmd, None, None) == cmd


@pytest.mark.parametrize("launcher, nproc, message", [
    ("mpirun", 2, "launcher='mpirun': choose None"), (None, 2, "nproc=2 needs launcher='torchrun'"),
    ("torchrun", None, "nproc=None: give the number of ranks"),
])
def test_launch_refuses(launcher, nproc, message):
    with pytest.raises(BenchError, match=message):
        launch(["python", "app.py"], launcher, nproc)


def test_run_two_ranks_records_ranks(clip, tmp_path):
    cmd = [sys.executable, str(APP), "--input", clip, "--streams", "2", *SMALL]
    ledger = Ledger(tmp_path / "ledger.jsonl")
    r = bench.run(cmd, step="ranks2", repeats=1, warmup=2, launcher="torchrun", nproc=2, ledger=ledger,
                  results_dir=tmp_path, progress=False, config={"streams": 2})
    assert r.ok and r.config == {"streams": 2, "warmup": 2, "ranks": 2, "launcher": "torchrun"}
    assert r.metrics["frames"] == 32  # both ranks' frames, from rank 0's one results file
    assert r.fps > 0
    assert ledger.rows()[-1]["config"]["ranks"] == 2


@pytest.mark.nsys
@pytest.mark.filterwarnings("ignore:.*no CUDA tables")  # a CPU run: nsys records NVTX only
def test_profiled_run_has_one_report_per_rank(clip, tmp_path):
    cmd = [sys.executable, str(APP), "--input", clip, "--streams", "2", "--frames", "6", *SMALL]
    r = bench.run(cmd, step="ranks2", repeats=1, warmup=2, launcher="torchrun", nproc=2, profile=True,
                  results_dir=tmp_path, profile_dir=tmp_path / "p", progress=False, name="pr", timeout=300)
    assert sorted(p.name for p in (tmp_path / "p").glob("*.nsys-rep")) == ["pr_0.nsys-rep", "pr_1.nsys-rep"]
    assert r.profile == tmp_path / "p" / "pr_0.nsys-rep"
    profiled = r.repeats[r.repeats["profiled"]].iloc[0]
    assert profiled["frames"] == 12


@pytest.mark.nsys
@pytest.mark.filterwarnings("ignore:.*no CUDA tables")
def test_labkit_profile_per_rank_hands_off_to_profile_ranks(tmp_path):
    import labkit
    from labkit.ranks.reports import RanksError, Reports

    fixture = Path(__file__).parent / "fixtures" / "ranks.py"  # two gloo ranks with NVTX stages
    reps = labkit.profile([sys.executable, str(fixture)], name="pr", per_rank=True, nproc=2, outdir=tmp_path)
    assert isinstance(reps, Reports) and reps.ranks == [0, 1]
    assert sorted(p.name for p in tmp_path.glob("pr_*.sqlite")) == ["pr_0.sqlite", "pr_1.sqlite"]
    with pytest.raises(RanksError, match="per_rank=True needs nproc=N"):
        labkit.profile(["true"], name="x", per_rank=True)
    with pytest.raises(RanksError, match="pass per_rank=True too"):
        labkit.profile(["true"], name="x", nproc=2)
