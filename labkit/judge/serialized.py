"""A stage the threads run one at a time under a lock: what no change to the other stages removes.

Where threads queue on a lock or a condition (the OS runtime trace shows their waits:
``pthread_mutex_lock``, ``futex``, ``sem_wait``, ``pthread_cond_wait``), the stage whose ranges start
as those waits end, and whose ranges never overlap from one thread to another, runs under it: one
holder at a time. Its time in the window (items x the time it is held) stays however fast the other
stages become, so a finding about another stage is no bound once the lock is close behind: it is an
estimate, capped at ``window / held`` and saying so. The lock's own lever (``release_lock``) and
findings about the held stage itself are left as they are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.stats.calls import LOCK_OSRT, blocking_osrt, work_ranges
from labkit.stats.idle import busy_intervals

__all__ = ["Held", "held_stage", "cap"]

AFTER_WAIT_NS = 1_000_000
"""A range that starts within this of the end of its thread's wait for a lock was waiting for it."""
MIN_WAITS = 3
"""Waits followed by the stage's ranges before the stage counts as held: one is chance."""
AT_ONCE = 1.02
"""Ranges of a held stage, summed over the threads, are at most this times their union (none
overlaps another thread's, to rounding)."""
CLOSE = 0.5
"""A lock is close behind a finding where the held stage would fill at least this share of the run
the finding predicts: its waits can then lengthen that run, and past 1 it is the limit."""


@dataclass(frozen=True)
class Held:
    """The stage held under a lock: its name, time in the window (ms), the waits that preceded it, the
    threads that ran it."""

    stage: str
    held_ms: float
    waits: int
    threads: int


def held_stage(ev) -> Held | None:
    """The stage of ``ev``'s window that its threads ran one at a time after waiting for a lock, or
    None where the trace shows none (no lock wait, or the stage's ranges overlap across threads)."""
    w0, w1 = ev.window
    o = blocking_osrt(ev.rep)
    if len(o) == 0:
        return None
    locks = o[o["name"].astype(str).str.match(LOCK_OSRT) & (o["end_ns"] >= w0) & (o["start_ns"] <= w1)]
    nv = work_ranges(ev.rep)
    if len(locks) < MIN_WAITS or len(nv) == 0:
        return None
    nv = nv[(nv["end_ns"] > w0) & (nv["start_ns"] < w1) & nv["name"].isin(ev.stages)]
    after: dict[str, int] = {}
    for g, waits in locks.groupby("global_tid"):
        mine = nv[nv["global_tid"] == g].sort_values("start_ns")
        if len(mine) == 0:
            continue
        starts = mine["start_ns"].to_numpy(np.int64)
        ends = np.sort(waits["end_ns"].to_numpy(np.int64))
        i = np.searchsorted(starts, ends, side="left")  # the first range starting at or after each wait's end
        ok = i < len(starts)
        near = ok.copy()
        near[ok] = starts[i[ok]] - ends[ok] <= AFTER_WAIT_NS
        for name in mine["name"].to_numpy()[i[near]]:
            after[str(name)] = after.get(str(name), 0) + 1
    best = None
    for name, n in sorted(after.items(), key=lambda kv: -kv[1]):
        if n < MIN_WAITS:
            break
        r = nv[nv["name"] == name]
        if r["global_tid"].nunique() < 2:
            continue
        s = np.clip(r["start_ns"].to_numpy(np.int64), w0, w1)
        e = np.clip(r["end_ns"].to_numpy(np.int64), w0, w1)
        total = float(np.sum(e - s))
        us, ue = busy_intervals(s, e)
        union = float(np.sum(ue - us))
        if total > 0 and total <= AT_ONCE * union:
            best = Held(name, total / 1e6, n, int(r["global_tid"].nunique()))
            break
    return best


def cap(r: dict, ev, held: Held | None) -> None:
    """Make finding ``r`` an estimate capped at what ``held`` leaves, where the lock is close behind
    the run it predicts (:data:`CLOSE`); its assumptions say what the cap assumes."""
    if held is None or r.get("stage") == held.stage or r["lever"] == "release_lock":
        return
    w = float(ev.wall_ms)
    p = float(r["predicted_speedup"])
    after = w / p if p > 0 and math.isfinite(p) else 0.0
    if held.held_ms < CLOSE * after or held.held_ms <= 0:
        return
    limit = w / held.held_ms
    if p > limit:
        r["predicted_speedup"] = limit
        r["evidence"] += (f"; capped at {limit:.2f}x: '{held.stage}' runs under a lock, one thread at a time, "
                          f"{held.held_ms:.0f} of the {w:.0f} ms window")
    r["basis"] = "estimate"
    r["assumptions"] += (f"; '{held.stage}' runs under a lock its {held.threads} threads queued on ({held.waits} "
                         f"waits for it end where a '{held.stage}' begins): one holder at a time, its "
                         f"{held.held_ms:.0f} ms stay however fast the rest becomes and waits for it can lengthen "
                         "the run further, so this is an estimate, not a bound")
