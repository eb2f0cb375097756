"""Where each rank runs (source_code.distributed.placement) for 0, 1, 2 and 8 GPUs, and a real
torchrun run on this CPU machine with --device auto: the ranks run on the CPU with gloo and say so."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labkit.annotate import read_results
from source_code.distributed import PipelineError, Placement, World, placement
from source_code.scenes import SceneConfig, make_video

APP = Path(__file__).resolve().parents[1] / "source_code" / "detect_video.py"


def placements(requested: str, ranks: int, gpus: int):
    return [placement(requested, World(rank=r, size=ranks, local_rank=r, local_size=ranks), gpus) for r in range(ranks)]


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_a_gpu_per_rank_uses_nccl_on_its_own_gpu(gpus):
    got = placements("auto", gpus, gpus)
    assert [p.device for p in got] == [f"cuda:{r}" for r in range(gpus)]
    assert {p.backend for p in got} == {"nccl"} and not any(p.note for p in got)


@pytest.mark.parametrize("ranks, gpus, devices", [
    (2, 1, ["cuda:0", "cuda:0"]),
    (8, 1, ["cuda:0"] * 8),
    (8, 2, ["cuda:0", "cuda:1"] * 4),
    (3, 2, ["cuda:0", "cuda:1", "cuda:0"]),
])
def test_more_ranks_than_gpus_share_them_with_gloo(ranks, gpus, devices):
    got = placements("cuda", ranks, gpus)
    assert [p.device for p in got] == devices
    # NCCL is never asked to put two ranks on one GPU
    assert {p.backend for p in got} == {"gloo"}
    assert f"{ranks} ranks share {gpus} GPU(s)" in got[0].note


def test_an_explicit_gpu_shared_by_ranks_is_gloo_alone_nccl():
    assert {(p.device, p.backend) for p in placements("cuda:0", 2, 8)} == {("cuda:0", "gloo")}
    assert [(p.device, p.backend) for p in placements("cuda:1", 1, 2)] == [("cuda:1", "nccl")]
    with pytest.raises(PipelineError, match=r"--device cuda:1 but this node has 1 GPU\(s\)"):
        placements("cuda:1", 2, 1)


def test_no_gpu_runs_on_the_cpu_and_says_so():
    got = placements("auto", 2, 0)
    assert [(p.device, p.backend) for p in got] == [("cpu", "gloo")] * 2 and "run on the CPU" in got[0].note
    assert [(p.device, p.backend, p.note) for p in placements("cpu", 2, 8)] == [("cpu", "gloo", "")] * 2
    with pytest.raises(PipelineError, match=r"no CUDA GPU: run with --device auto or --device cpu"):
        placements("cuda", 2, 0)


def test_torchrun_with_device_auto_on_a_cpu_machine(tmp_path):
    clip, _ = make_video(tmp_path / "clip.mp4", seconds=0.8, config=SceneConfig(seed=32, width=320, height=192, fps=10))
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(APP),
            "--input", str(clip), "--streams", "2", "--results", "r.json", "--no-osd", "--device", "auto",
            "--input-hw", "192x320", "--warmup", "2"]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = read_results(tmp_path / "r.json")
    assert [p["device"] for p in doc["per_rank"]] == ["cpu", "cpu"]
    assert doc["placement"] == "no CUDA GPU: the 2 ranks run on the CPU (gloo)"
    assert not any("gloo" in w for w in doc["warnings"])  # where the ranks ran is a fact, not a fault that flags a row


def test_slurm_one_gpu_per_task_is_a_gpu_of_its_own_not_two_ranks_sharing_one():
    """srun --ntasks-per-node 2 --gpus-per-task 1: each task sees one GPU (its own, as cuda:0) while
    the node runs two ranks; that was read as two ranks sharing one GPU (gloo, a sharing note)."""
    slurm = {"SLURM_GPUS_PER_TASK": "1", "SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "1"}
    w = World(rank=1, size=2, local_rank=1, local_size=2)
    assert placement("auto", w, 1, env=slurm) == Placement("cuda:0", "nccl")
    assert placement("cuda", w, 1, env=slurm) == Placement("cuda:0", "nccl")
    assert placement("cuda:0", w, 1, env=slurm) == Placement("cuda:0", "nccl")
    # the same two ranks without per-task GPUs do share the one GPU they both see
    shared = placement("auto", w, 1, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert shared.backend == "gloo" and "2 ranks share 1 GPU" in shared.note
