"""The GPU-side rules of :func:`labkit.advise`: each a function of the
:class:`~labkit.judge.evidence.Evidence` returning finding rows. They read the CUDA API and GPU
activity as ``nsys analyze``'s rules do (synchronizing APIs, synchronous memcpy/memset, async memcpy
from pageable memory, GPU starvation, GPU low utilization), so they work on reports without
annotations; launch-bound and GPU-bound runs besides. The host-side rules (stages and threads):
:mod:`labkit.judge.rules`; :data:`labkit.judge.advice.RULES` lists them all."""
from __future__ import annotations

import math

import pandas as pd

from labkit.judge import launches
from labkit.judge.evidence import IDLE_GAP_MS, LOW_GPU_BUSY, MANY_KERNELS, MANY_KERNELS_PER_BATCH, Evidence, row
from labkit.judge.launches import TINY_KERNEL_US
from labkit.stats import idle

OTHERS_KEEP = "the thread's other work and the kernels keep their measured times"
"""What a GPU-side bound keeps: only the time waited in the calls it names is saved."""


def _names(calls: pd.DataFrame) -> str:
    return ", ".join(f"{n} x{c}" for n, c in calls["name"].astype(str).value_counts().head(4).items())


def sync_apis(ev: Evidence) -> list[dict]:
    """Threads waited in synchronizing CUDA calls (nsys analyze: cuda_api_sync)."""
    calls = ev.in_window(idle.sync_calls(ev.rep))
    b, waited, tid = ev.waited_bound(calls)
    if waited <= 0:
        return []
    text = (f"{len(calls)} synchronizing calls in {ev.wall_ms:.0f} ms ({_names(calls)}); thread {tid} waited in them "
            f"{waited:.1f} ms; the SMs were busy {ev.sm_ms:.1f} ms")
    return [row("sync_apis", "Threads wait for the GPU in synchronizing CUDA calls", text, "remove_sync", b, "bound",
                f"only the time spent waiting in these calls is saved; {OTHERS_KEEP}")]


def sync_copies(ev: Evidence) -> list[dict]:
    """Synchronous memcpy/memset calls block their thread (nsys analyze: cuda_memcpy_sync)."""
    cc = ev.in_window(idle.copy_calls(ev.rep))
    calls = cc[cc["blocking"] & ~cc["name"].astype(str).str.contains("Async", regex=False)] if len(cc) else cc
    b, waited, tid = ev.waited_bound(calls, ev.copy_ms)
    if waited <= 0:
        return []
    text = (f"{len(calls)} synchronous copy or memset calls ({_names(calls)}); thread {tid} was blocked in them "
            f"{waited:.1f} ms of {ev.wall_ms:.0f} ms; the copy engines were busy {ev.copy_ms:.1f} ms")
    return [row("sync_memcpy", "Synchronous copies block the host", text, "overlap_copies", b, "bound",
                "the copies still take their copy-engine time but overlap other work; " + OTHERS_KEEP)]


PRECISION_BYTES = 4
"""The most a narrower type can shrink a copy: FP32 to INT8 moves a quarter of the bytes."""

PINNED_GBPS = {7: 12.0, 8: 25.0, 9: 50.0, 10: 50.0}
"""The host-device rate pinned copies reach where a report measured none, by the GPU's compute
capability and the PCIe link its generation shipped with (GB/s, one direction: Volta and Turing on
Gen3 x16, Ampere and Ada on Gen4, Hopper and Blackwell on Gen5). Pinned copies of 256 MiB measured
51 GB/s on an H200 (2026-11-28). An assumption the finding states."""


def _pinned_gbps(ev: Evidence, pinned: pd.DataFrame) -> tuple[float, str]:
    """(GB/s, where it comes from): this report's own pinned host copies of 1 MB or more, else the
    link the GPU's generation shipped with."""
    big = pinned[pinned["bytes"] >= 1 << 20]
    if len(big) and big["duration_ns"].sum() > 0:
        gbps = float(big["bytes"].sum()) / float(big["duration_ns"].sum())
        return gbps, f"{gbps:.1f} GB/s, the rate of this report's {len(big)} pinned copies of 1 MB or more"
    gpu = ev.rep.gpu
    major = gpu["compute_major"].iloc[0] if "compute_major" in gpu and len(gpu) else None
    major = int(major) if major is not None and pd.notna(major) else None  # NULL in nsys 2019.6 and 2020.3
    name = gpu["name"].iloc[0] if "name" in gpu and len(gpu) else None
    name = str(name) if name is not None and pd.notna(name) else "this GPU"
    if major is None:  # the slowest link: the estimate promises no more than the oldest GPU's rate
        gbps = PINNED_GBPS[7]
        return gbps, (f"{gbps:g} GB/s, the slowest PCIe link of the table (the report does not say {name}'s "
                      "compute capability; no pinned copy in this report measured it)")
    gbps = PINNED_GBPS.get(major, PINNED_GBPS[7] if major < 7 else PINNED_GBPS[10])
    return gbps, (f"{gbps:g} GB/s, the PCIe link of {name}'s generation (compute capability {major}; "
                  "no pinned copy in this report measured it)")


def pageable(ev: Evidence) -> list[dict]:
    """Copies to or from pageable host memory: the driver stages them through a pinned buffer, so an
    async one runs synchronously (nsys analyze: cuda_memcpy_async) and each runs at the host's
    memcpy rate, not the link's. Pinned, a copy takes its bytes at the pinned rate; the estimate
    replaces the pageable copies' copy-engine time in the window with that."""
    m = ev.in_window(ev.rep.memcpy)
    paged = m[m["pageable"]] if len(m) else m
    if len(paged) == 0 or ev.wall_ms <= 0:
        return []
    gbps, source = _pinned_gbps(ev, m[m["pinned"]])
    s, e = paged["start_ns"].to_numpy(), paged["end_ns"].to_numpy()
    w0, w1 = ev.window
    now_ms = idle.busy_in(*idle.busy_intervals(s, e), w0, w1) / 1e6
    mb = float(paged["bytes"].sum()) / 1e6
    pinned_ms = mb / gbps  # MB / (GB/s) = ms
    saves = max(0.0, now_ms - pinned_ms)
    b = ev.wall_ms / max(ev.wall_ms - saves, ev.sm_ms, 1e-9)
    cc = ev.in_window(idle.copy_calls(ev.rep))
    blocked = cc[cc["pageable"]] if len(cc) else cc
    waits = ""
    if len(blocked):
        _, waited, tid = ev.waited_bound(blocked)
        waits = f"; thread {tid} was blocked in them {waited:.1f} ms"
    text = (f"{len(paged)} copies touch pageable host memory ({mb:.1f} MB at {mb / max(now_ms, 1e-9):.1f} GB/s, "
            f"{now_ms:.1f} ms of copy-engine time in {ev.wall_ms:.0f} ms){waits}; pinned, they would take about "
            f"{pinned_ms:.1f} ms; an upper bound, were they free: "
            f"{ev.wall_ms / max(ev.wall_ms - now_ms, ev.sm_ms, 1e-9):.2f}x")
    return [row("pageable_memcpy", "Copies use pageable host memory", text, "pin_memory", b, "estimate",
                f"pinned copies move their bytes at {source}; the copies stay where they are in the run "
                f"(async, they could also overlap other work: not counted); {OTHERS_KEEP}")]


def starvation(ev: Evidence) -> list[dict]:
    """The SMs idle while the host is in no traced call and in no stage: a host-side stall (nsys
    analyze: gpu_starvation; HTA's idle breakdown). Gap time inside a stage's ranges is that stage's
    work, which the stage rules weigh; only the rest is the stall."""
    if len(ev.kernels) == 0 or ev.wall_ms <= 0:
        return []
    br = idle.gpu_idle_breakdown(ev.rep, min_gap_ms=IDLE_GAP_MS, window=ev.window, ranges=ev.stage_ranges)
    stall = float(br["untraced_ns"].sum()) / 1e6
    if stall <= 0:
        return []
    tot = br.attrs["totals_ms"]
    staged = (f", in the stages' ranges {tot['ranges']:.0f} ms (their work: the stage findings weigh it)"
              if tot["ranges"] > 0 else "")
    longest = br["untraced_ns"].max() / 1e6
    text = (f"{len(br)} gaps of {IDLE_GAP_MS:g} ms or more with no kernel running, {br['duration_ns'].sum() / 1e6:.0f} ms "
            f"in all: the host was in a copy {tot['copy']:.0f} ms, in a sync {tot['sync']:.0f} ms, in other CUDA "
            f"calls {tot['cuda']:.0f} ms{staged}, and in nothing traced {stall:.0f} ms (a host-side stall: "
            f"compilation, Python, I/O; {longest:.1f} ms in the longest)")
    b = ev.wall_ms / max(ev.wall_ms - stall, ev.sm_ms, 1e-9)
    return [row("gpu_starvation", "The GPU waits for host work nothing traced (a host-side stall)", text,
                "overlap_stages", b, "bound", "only the untraced host time in the gaps is saved (it overlaps the "
                "kernels instead); the kernels and the stages keep their measured times")]


def _fewer_launches(ev: Evidence, after_ms: float, gpu_ms: float) -> tuple[float, float] | None:
    """(prediction, ms the launching thread saves) when its steps take ``after_ms`` in all and the
    SMs ``gpu_ms``: the window over the largest of that thread, the other threads and the SMs."""
    lm = ev.launches
    t = ev.acc.threads
    mine = t[t["global_tid"] == lm.global_tid]
    if not len(mine):
        return None
    busy, untraced = float(mine["busy_ms"].iloc[0]), float(mine["untraced_ms"].iloc[0])
    saves = min(max(lm.now_ms - after_ms, 0.0), busy)
    others = ev.acc.floor_ms(without_thread=lm.global_tid, gpu=False)
    return launches.speedup(ev.wall_ms, busy - saves, others, gpu_ms), saves + min(lm.between_ms, untraced)


def _cold_text(lm) -> str:
    """What the launch model takes off a step's edges, in words (labkit.judge.launches)."""
    if lm.cold_ms <= 0:
        return ""
    return (f", less the cold start after a burst of launches ({lm.cold_ms:.2f} ms in all: the typical time from one "
            "step's last launch to the next's first beyond one launch, which grows with the launches a step holds)")


def _pauses_text(lm) -> str:
    """How the launch model took the pauses it took for interruptions, in words."""
    if lm.interrupted_ms <= 0:
        return ""
    return (f"; pauses in a few steps with nothing traced in them ({lm.interrupted_ms:.2f} ms) are interruptions, "
            "which keep their share of the time rather than their time")


def _many_a_step(ev: Evidence) -> bool:
    lm = ev.launches
    return lm is not None and lm.launches / lm.steps >= MANY_KERNELS_PER_BATCH


def _steps_text(ev: Evidence) -> str:
    lm = ev.launches
    return (f"; {lm.steps} steps of thread {_tid(ev, lm.global_tid)} launch {lm.launches / lm.steps:.0f} kernels "
            f"each, {lm.per_launch_us:.1f} us a launch (the call and the work around it)")


def _tid(ev: Evidence, gtid: int) -> int:
    t = ev.acc.threads
    return int(t.loc[t["global_tid"] == gtid, "tid"].iloc[0])


def low_utilization(ev: Evidence) -> list[dict]:
    """The SMs are busy less than half the window (nsys analyze: gpu_time_util). Where a step
    launches many kernels, batching's estimate is the launch model's
    (:mod:`labkit.judge.launches`): each step's launches of one kernel at one shape merged into one."""
    if len(ev.kernels) == 0 or ev.wall_ms <= 0 or ev.sm_ms <= 0 or ev.acc.limiter == "gpu":
        return []  # the SMs are idle most of the time only where they are not the busiest resource
    busy = ev.sm_ms / ev.wall_ms
    if busy >= LOW_GPU_BUSY:
        return []
    text = (f"kernels kept the SMs busy {busy:.1%} of {ev.wall_ms:.0f} ms ({ev.sm_ms:.1f} ms; copies "
            f"{ev.copy_ms:.1f} ms apart, not counted)")
    fewer = _fewer_launches(ev, ev.launches.merged_ms, ev.launches.gpu_merged_ms) if _many_a_step(ev) else None
    if fewer is None:
        return [row("gpu_low_utilization", "The GPU's SMs are idle most of the time", text, "batch",
                    ev.wall_ms / ev.sm_ms, "estimate", "the kernels keep their measured times (batching merges "
                    "them, and a merged kernel can take less than their sum); reaching it needs all host work and "
                    "copies overlapped with them")]
    lm = ev.launches
    r = row("gpu_low_utilization", "The GPU's SMs are idle most of the time", text + _steps_text(ev), "batch",
            fewer[0], "estimate",
            f"each step's launches of one kernel at one shape become one launch doing their work (independent work, as a "
            f"batch): a step keeps its work before its first launch and after its last{_cold_text(lm)} and pays one "
            f"launch a kernel and shape ({lm.now_ms:.1f} ms of steps become {lm.merged_ms:.1f} ms); {lm.waves} "
            f"({lm.gpu_now_ms:.1f} ms of kernels become {lm.gpu_merged_ms:.2f} ms){_pauses_text(lm)}; the other threads keep "
            "their times")
    r.update(touch_ms=fewer[1], gpu_ms=lm.gpu_merged_ms)
    return [r]


def launch_bound(ev: Evidence) -> list[dict]:
    """Many tiny kernels: the launches, not the GPU, set the pace. Where steps hold them, the graph's
    estimate is the launch model's (:mod:`labkit.judge.launches`): a step's launches replayed as one."""
    k = ev.kernels
    if len(k) == 0:
        return []
    med_us = float(k["duration_ns"].median()) / 1e3
    many = len(k) / ev.batches >= MANY_KERNELS_PER_BATCH if ev.batches else len(k) >= MANY_KERNELS
    if med_us >= TINY_KERNEL_US or not many:
        return []
    launches = ev.in_window(idle.launch_calls(ev.rep))
    b, waited, tid = ev.waited_bound(launches)
    if waited <= 0:
        return []
    text = (f"{len(k)} kernels in {ev.wall_ms:.0f} ms" + (f" ({len(k) / ev.batches:.0f} a batch)" if ev.batches else "")
            + f", median {med_us:.1f} us; {len(launches)} launch calls; thread {tid} spent {waited:.1f} ms in them")
    fewer = _fewer_launches(ev, ev.launches.graphed_ms, ev.sm_ms) if _many_a_step(ev) else None
    if fewer is None:
        return [row("launch_bound", "Many tiny kernels: the run is launch-bound", text, "cuda_graphs", b, "estimate",
                    "a graph replay costs nothing next to the launches it replaces and only the launch calls' time "
                    "is saved (the framework's work around each launch may go too: it can gain more); " + OTHERS_KEEP)]
    lm = ev.launches
    r = row("launch_bound", "Many tiny kernels: the run is launch-bound", text + _steps_text(ev), "cuda_graphs",
            fewer[0], "estimate",
            f"one graph launch replays a step's launches (the same shapes every step): a step keeps its work "
            f"before its first launch and after its last{_cold_text(lm)} and pays one launch ({lm.now_ms:.1f} ms of steps become "
            f"{lm.graphed_ms:.1f} ms){_pauses_text(lm)}; the kernels keep their measured times; the other threads keep "
            "theirs")
    r.update(touch_ms=fewer[1], gpu_ms=ev.sm_ms)
    return [r]


def gpu_bound(ev: Evidence) -> list[dict]:
    """The kernels kept the SMs busier than any thread: the GPU's work itself bounds the run."""
    if len(ev.kernels) == 0 or ev.load.empty or ev.wall_ms <= 0 or ev.acc.limiter != "gpu":
        return []  # named only when the accounting finds the SMs the busiest resource
    busiest = float(ev.load.groupby("tid")["ms"].sum().max())
    if ev.sm_ms <= busiest:
        return []
    text = (f"kernels kept the SMs busy {ev.sm_ms:.0f} ms of {ev.wall_ms:.0f} ms, more than the busiest thread's "
            f"{busiest:.0f} ms of stage time (copies {ev.copy_ms:.0f} ms apart)")
    # the copy engines keep their time under faster kernels; in a narrower type a copy moves at most
    # PRECISION_BYTES times fewer bytes
    out = []
    for lever, copies, said in (("reduce_precision", ev.copy_ms / PRECISION_BYTES,
                                 f"copies moving at most {PRECISION_BYTES}x fewer bytes (FP32 to INT8)"),
                                ("compile", ev.copy_ms, "the copies keeping their copy-engine time")):
        floor = max(busiest, copies)
        b = ev.wall_ms / floor if floor > 0 else math.inf
        out.append(row("gpu_bound", "The GPU's kernels bound the run", text, lever, b, "bound",
                       f"even kernels taking no time leave the busiest thread's stage time and {said}"))
    return out
