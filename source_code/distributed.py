"""The application under torchrun: each rank runs its share of the sources; rank 0 writes the results.

PyTorch's own launcher starts the ranks (``python -m torch.distributed.run --nproc-per-node N
source_code/detect_video.py ...``, also under ``srun`` and across nodes with ``--nnodes``); it
sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``. With ``WORLD_SIZE`` > 1:

- ``shard`` gives each rank its share of the sources (the ``--input`` files, or ``--streams``
  copies of one), spread evenly, and its device (``placement``: ``cuda:LOCAL_RANK`` when the node
  has a GPU per rank; ranks share the GPUs there are when it has fewer; the CPU without one);
  only rank 0 keeps ``--results`` and the output video;
- ``torch.distributed`` (NCCL when every rank has a GPU of its own; gloo on the CPU and when
  ranks share a GPU, which NCCL refuses) runs two collectives (three after a failure), each under a short timeout
  (``COLLECTIVE_TIMEOUT_S``) so that no rank hangs: every rank says it is ready just before its first frame (the
  measured windows start together, or every rank stops when one failed), and every rank sends
  its figures, or its error line, to rank 0 at the end; after a failure they meet once more, once
  rank 0 has written it to the results file (torchrun stops every rank when one exits with an error);
- rank 0 merges them (``merge``): ``ranks``, ``per_rank`` (rank, host, device, frames, fps and
  its interval, latency, stages), the aggregate ``frames`` and ``fps`` (every rank's timed frames
  over the common measured window, from the first rank's start to the last rank's end) with its
  interval (``aggregate_ci``) and the accuracy of stream 0 of every rank together.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import socket
from typing import Any, Callable, Iterator

import numpy as np

from source_code.errors import EXIT_FAILED, EXIT_USAGE, PipelineError, first_line

COLLECTIVE_TIMEOUT_S = int(os.environ.get("DETECT_COLLECTIVE_TIMEOUT_S") or 300)
"""Longest wait in one collective, s (``$DETECT_COLLECTIVE_TIMEOUT_S``, default 300, not the
process group's 1800): the start waits for the slowest rank's set-up (torch.compile, a TensorRT
engine build: cached after the first); past it the waiting ranks fail instead of hanging."""


@dataclasses.dataclass(frozen=True)
class World:
    """Where this process stands in a torchrun job (one rank of ``size``, ``local_rank`` on its node)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1  # ranks on this node (torchrun's LOCAL_WORLD_SIZE)

    @classmethod
    def from_env(cls, env: dict | None = None) -> "World":
        """The world torchrun (or any launcher setting RANK, WORLD_SIZE, LOCAL_RANK) describes; one rank without it."""
        env = os.environ if env is None else env
        size = int(env.get("WORLD_SIZE", 1) or 1)
        if size <= 1:
            return cls()
        return cls(rank=int(env.get("RANK", 0)), size=size, local_rank=int(env.get("LOCAL_RANK", 0)),
                   local_size=int(env.get("LOCAL_WORLD_SIZE", 0) or size))


def share(n_sources: int, world: World) -> range:
    """Indices of the sources that ``world.rank`` decodes: contiguous, sizes differing by at most one."""
    base, extra = divmod(n_sources, world.size)
    start = world.rank * base + min(world.rank, extra)
    return range(start, start + base + (world.rank < extra))


@dataclasses.dataclass(frozen=True)
class Placement:
    """A rank's device, the ``torch.distributed`` backend of the job, and what to tell the user."""

    device: str
    backend: str  # "nccl" or "gloo"
    note: str = ""  # "" when every rank has a GPU of its own, or runs on the CPU as asked


def own_gpus(env: dict | None = None) -> bool:
    """Whether the launcher gave this task GPUs of its own: Slurm's ``--gpus-per-task`` (it sets
    ``SLURM_GPUS_PER_TASK`` and a ``CUDA_VISIBLE_DEVICES`` per task), so the GPUs this rank sees are
    no other rank's, however many ranks the node runs."""
    env = os.environ if env is None else env
    return bool(env.get("SLURM_GPUS_PER_TASK")) and bool(env.get("CUDA_VISIBLE_DEVICES"))


def placement(requested: str, world: World, n_gpus: int, env: dict | None = None) -> Placement:
    """Where rank ``world.rank`` runs when it sees ``n_gpus`` CUDA GPUs (a function of its
    arguments and ``env``, the launcher's variables: ``os.environ`` by default).

    - ``cpu``: the CPU, gloo.
    - ``auto`` or ``cuda`` with a GPU per rank: ``cuda:LOCAL_RANK``, NCCL.
    - ``auto`` or ``cuda`` with fewer GPUs than ranks: ``cuda:(LOCAL_RANK mod n_gpus)``, ranks share
      them, gloo (NCCL refuses two ranks on one GPU; gloo carries the collectives, which are only
      the start and the figures, on the host).
    - an explicit ``cuda:N``: every rank there; gloo when several ranks share it.
    - ``auto`` without a GPU: the CPU, gloo, said; ``cuda`` without one: PipelineError (exit 2).
    - GPUs of its own per task (:func:`own_gpus`: Slurm's one GPU per task): the rank is alone on
      the GPUs it sees, so they are counted for it only: ``cuda:0`` (or ``cuda:N``), NCCL, no note.
    """
    ranks = 1 if own_gpus(env) and n_gpus else max(world.local_size, 1)
    local = 0 if ranks == 1 else world.local_rank
    if requested == "cpu":
        return Placement("cpu", "gloo")
    if requested in ("auto", "cuda"):
        if n_gpus == 0:
            if requested == "cuda":
                raise PipelineError(f"rank {world.rank}: --device cuda but this node has no CUDA GPU: run with "
                                    "--device auto or --device cpu", EXIT_USAGE)
            return Placement("cpu", "gloo", f"no CUDA GPU: the {ranks} ranks run on the CPU (gloo)")
        if n_gpus >= ranks:
            return Placement(f"cuda:{local}", "nccl")
        return Placement(f"cuda:{local % n_gpus}", "gloo",
                         f"{ranks} ranks share {n_gpus} GPU(s) (gloo for the collectives: NCCL needs a GPU per rank)")
    if requested.startswith("cuda:"):
        index = int(requested.split(":", 1)[1])
        if index >= n_gpus:
            raise PipelineError(f"rank {world.rank}: --device {requested} but this node has {n_gpus} GPU(s): "
                                "use --device auto (a GPU per rank where there are enough)", EXIT_USAGE)
        if ranks > 1:
            return Placement(requested, "gloo", f"{ranks} ranks share {requested} (gloo for the collectives)")
        return Placement(requested, "nccl")
    return Placement(requested, "gloo")


def _gpu_count(requested: str) -> int:
    if requested == "cpu":
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def shard(cfg: Any, world: World) -> Any:
    """This rank's PipelineConfig: its share of the sources, its device, and (ranks > 0) no results
    file and no output video. Raises PipelineError (exit 2) when there are fewer sources than ranks."""
    sources = list(cfg.inputs) if len(cfg.inputs) > 1 else [cfg.inputs[0]] * cfg.streams
    if len(sources) < world.size:
        raise PipelineError(f"{len(sources)} source(s) for {world.size} ranks: every rank needs one; give "
                            f"--streams {world.size} (or {world.size} --input files), or start fewer ranks "
                            f"(--nproc-per-node)", EXIT_USAGE)
    mine = [sources[i] for i in share(len(sources), world)]
    keep = world.rank == 0
    where = placement(cfg.device, world, _gpu_count(cfg.device))
    return dataclasses.replace(cfg, inputs=tuple(mine), streams=len(mine), device=where.device,
                               results=cfg.results if keep else None, output=cfg.output if keep else None)


class RankFailed(PipelineError):
    """Another rank failed: this one stops too (its message names that rank and its error line)."""


def _failure(r: int, state: dict) -> RankFailed:
    message = state["error"].split(": ", 1)[-1]  # its own line, without its "rank R: "
    return RankFailed(f"rank {r} failed: {message}", state.get("exit_code", EXIT_FAILED))


class Rank:
    """This rank's side of the collectives; ``run_pipeline(..., rank=)`` calls ``start`` and ``finished``."""

    def __init__(self, world: World, collectives: Any):
        self.world = world
        self.dist = collectives  # torch.distributed, once its process group is up
        self.started = False
        self.broken = False  # a collective failed (timeout, a rank gone): the next would fail too
        self.part: dict = {}

    def _all(self, item: dict) -> list[dict]:
        out: list = [None] * self.world.size
        try:
            self.dist.all_gather_object(out, item)
        except Exception as e:  # noqa: BLE001 - gloo and NCCL raise RuntimeError and their own types
            self.broken = True
            raise PipelineError(f"rank {self.world.rank}: the other ranks did not answer ({first_line(e)}): one "
                                f"failed or hung (see its error line), or raise COLLECTIVE_TIMEOUT_S "
                                f"({COLLECTIVE_TIMEOUT_S} s) in source_code/distributed.py", EXIT_FAILED) from None
        return out

    def start(self, error: PipelineError | None = None) -> None:
        """Wait until every rank is ready for its first frame (or has failed); raise RankFailed when one failed."""
        self.started = True
        states = self._all(_state(error))
        failed = [r for r, s in enumerate(states) if s.get("error") and r != self.world.rank]
        if failed and error is None:
            raise _failure(failed[0], states[failed[0]])

    def finished(self, sink: Any, gt: dict | None) -> None:
        """Keep what rank 0 needs of this rank's run: its timed window, latencies and stream 0's results."""
        n0 = max(sink.tracks, default=-1) + 1  # stream 0's frames (each has its tracks, maybe none)
        self.part = {"window_ns": sink.window_ns(), "latency_ms": list(sink.latency_ms),
                     "sequence": (gt, sink.dets, sink.tracks, n0) if gt else None}

    def leave(self) -> None:
        """Wait until every rank is here (rank 0 has written the failure) before this one exits with
        its error; where the others do not answer, leave anyway."""
        with contextlib.suppress(PipelineError):
            self._all({})

    def gather(self, doc: dict | None, error: PipelineError | None = None) -> list[dict]:
        """Every rank's part (its results document and figures, or its own error) at every rank."""
        if not self.started:  # failed before its first frame: still meet the others at the start
            self.start(error)
        mine = _state(error) if error else {"doc": doc, **self.part}
        return self._all({"rank": self.world.rank, "host": socket.gethostname(), **mine})


def _outcome(error: PipelineError | None, parts: list[dict]) -> PipelineError | None:
    """The error this rank ends with, once every rank's part is in: its own, else the first failed
    rank's, else the failure it heard of; None when every rank finished."""
    if error is not None and not isinstance(error, RankFailed):
        return error
    failed = [p for p in parts if p.get("error")]
    if failed:
        return _failure(failed[0]["rank"], failed[0])
    return error


def _state(error: PipelineError | None) -> dict:
    """What a rank tells the others of its failure: its own error line (not a failure it only heard of)."""
    if error is None or isinstance(error, RankFailed):
        return {"followed": True} if error else {}
    return {"error": str(error), "exit_code": error.exit_code}


@contextlib.contextmanager
def process_group(world: World, device: str, backend: str | None = None) -> Iterator[Any]:
    """torch.distributed with ``backend`` (``placement``'s; default NCCL on a CUDA device, gloo on
    the CPU), every collective under ``COLLECTIVE_TIMEOUT_S``; torn down on the way out."""
    import torch
    import torch.distributed as dist

    backend = backend or ("nccl" if device.startswith("cuda") else "gloo")
    if device.startswith("cuda"):
        torch.cuda.set_device(device)  # NCCL's object collectives use the current device
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    except (RuntimeError, ValueError) as e:
        raise PipelineError(f"rank {world.rank}: torch.distributed did not start ({first_line(e)}): run under "
                            "torchrun, which sets MASTER_ADDR and MASTER_PORT", EXIT_FAILED) from None
    try:
        yield dist
    finally:
        with contextlib.suppress(Exception):  # a failure on the way out must not hide the run's own
            dist.destroy_process_group()


def run(cfg: Any, world: World, run_pipeline: Callable[..., dict],
        on_failure: Callable[[str], None] | None = None) -> dict | None:
    """Run this rank's share of ``cfg``; rank 0 returns the merged results document, the others None.

    Raises PipelineError: this rank's own error (``rank R: ...``; one that every rank finds alike,
    too few sources for the ranks, without the prefix), else the first failed rank's error line
    (``rank R failed: ...``). Rank 0 passes that line to ``on_failure`` (main writes it to the
    results file) before any rank leaves: torchrun stops every rank once one exits with an error,
    and a rank 0 still starting when a fast rank 1 had failed and exited wrote no results file (1 in
    4 runs with one source for two ranks on the 2-core VM)."""
    where = placement(cfg.device, world, _gpu_count(cfg.device))
    with process_group(world, where.device, where.backend) as dist:
        rank = Rank(world, dist)
        error, doc = None, None
        try:
            local = shard(cfg, world)
        except PipelineError as e:  # the same on every rank: they meet, and stop together
            error = e
        else:
            try:
                doc = run_pipeline(local, rank=rank)
            except PipelineError as e:
                mine = not isinstance(e, RankFailed) and not rank.broken
                error = PipelineError(f"rank {world.rank}: {e}", e.exit_code) if mine else e
            except Exception as e:  # noqa: BLE001 - the other ranks must hear of it before it is reported
                error = PipelineError(f"rank {world.rank}: {first_line(e)}", EXIT_FAILED)
        if rank.broken:  # the start never completed: no second wait
            raise error
        try:
            parts = rank.gather(doc, error)
        except PipelineError as e:  # the others did not answer: this rank's own error first, if it had one
            raise error or e from None
        failure = _outcome(error, parts)
        if failure is not None:
            if world.rank == 0 and on_failure is not None:
                on_failure(str(failure))
            rank.leave()
            raise failure
    if world.rank != 0:
        return None
    doc = merge(parts, cfg)
    doc["placement"] = where.note or f"as asked: {where.device.split(':')[0]}, {where.backend}"  # a fact, not a fault
    return doc


def _stage_detail(details: list[dict]) -> dict:
    out: dict = {}
    for d in details:
        for stage, s in d.items():
            m = out.setdefault(stage, {"count": 0, "total_ms": 0.0, "items": 0, "cuda_ms": None})
            m["count"] += s.get("count") or 0
            m["total_ms"] += s.get("total_ms") or 0.0
            m["items"] += s.get("items") or 0
            if s.get("cuda_ms") is not None:
                m["cuda_ms"] = (m["cuda_ms"] or 0.0) + s["cuda_ms"]
    for m in out.values():
        m["mean_ms"] = round(m["total_ms"] / m["count"], 4) if m["count"] else None
        m["ms_per_item"] = round(m["total_ms"] / m["items"], 4) if m["items"] else None
        m["total_ms"] = round(m["total_ms"], 4)
    return out


def _weighted_stages(docs: list[dict]) -> dict:
    """ms per timed frame of each stage over every rank (weighted by the rank's timed frames)."""
    out = {}
    for stage in docs[0]["stages"]:
        pairs = [(d["stages"].get(stage), d["timed_frames"]) for d in docs if d["stages"].get(stage) is not None]
        n = sum(w for _, w in pairs)
        out[stage] = round(sum(v * w for v, w in pairs) / n, 4) if n else None
    return out


def aggregate_ci(docs: list[dict], fps: float | None) -> list[float] | None:
    """The aggregate fps's 95 % interval: each rank's interval over its own batches, summed (every
    rank at its low end, or its high end, together: wider than any joint interval) and scaled to the
    aggregate's own point (``fps``, over the common window, which is longer than any rank's own
    window); it always holds that point. None where a rank has no interval."""
    cis = [d.get("fps_ci95") for d in docs]
    own = sum(float(d.get("fps") or 0) for d in docs)
    if fps is None or not own or not all(isinstance(c, list) and len(c) == 2 for c in cis):
        return None
    low, high = fps * sum(c[0] for c in cis) / own, fps * sum(c[1] for c in cis) / own
    return [round(min(low, fps), 4), round(max(high, fps), 4)]


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def merge(parts: list[dict], cfg: Any) -> dict:
    """Rank 0's results document of the whole run from every rank's part (fields:
    ``labkit.annotate.RESULTS_FIELDS``, with ``ranks`` and ``per_rank``)."""
    from source_code.results import accuracy_over
    from source_code.scenes import CLASS_NAMES

    docs = [p["doc"] for p in parts]
    windows = [p["window_ns"] for p in parts if p.get("window_ns")]
    seconds = (max(w[1] for w in windows) - min(w[0] for w in windows)) / 1e9 if len(windows) == len(parts) else None
    timed = sum(d["timed_frames"] for d in docs)
    latencies = [v for p in parts for v in p["latency_ms"]]
    sequences = [p["sequence"] for p in parts if p.get("sequence")]
    acc = accuracy_over(sequences, CLASS_NAMES) if sequences and not docs[0]["config"]["decode_only"] \
        else docs[0]["accuracy"]
    per_rank = [{"rank": p["rank"], "host": p["host"], "device": d["config"]["device_resolved"],
                 "inputs": list(d["config"]["inputs"]), "frames": d["frames"], "timed_frames": d["timed_frames"],
                 "seconds": d["seconds"], "fps": d["fps"], "fps_ci95": d.get("fps_ci95"),
                 "latency_ms": d["latency_ms"], "stages": d["stages"], "status": d["status"]}
                for p, d in zip(parts, docs)]
    fps = round(timed / seconds, 4) if seconds else None
    return {
        **docs[0],
        "status": "ok" if all(d["status"] == "ok" for d in docs) else "partial",
        "frames": sum(d["frames"] for d in docs),
        "timed_frames": timed,
        "warmup_frames": sum(d["warmup_frames"] for d in docs),
        "seconds": round(seconds, 6) if seconds else None,
        "fps": fps,
        "fps_ci95": aggregate_ci(docs, fps),  # not rank 0's own
        "stages": _weighted_stages(docs),
        "stage_detail": _stage_detail([d["stage_detail"] for d in docs]),
        "latency_ms": {"p50": _percentile(latencies, 50), "p99": _percentile(latencies, 99)},
        "accuracy": acc,
        "config": {**docs[0]["config"], "inputs": list(cfg.inputs), "streams": cfg.streams,
                   "device": cfg.device},
        "output_frames": docs[0]["output_frames"],
        "warnings": [w if p["rank"] == 0 else f"rank {p['rank']}: {w}" for p, d in zip(parts, docs)
                     for w in d["warnings"]],
        "ranks": len(parts),
        "per_rank": per_rank,
    }
