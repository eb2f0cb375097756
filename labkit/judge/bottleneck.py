"""The bottleneck sentence: which stage, thread or engine limited a run's throughput."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from labkit.judge.accounting import account, chosen_window, thread_label
from labkit.stats.blocked import blocked_in, blocked_intervals
from labkit.stats.calls import is_wait, osrt_traced, runtime_threads, work_ranges
from labkit.stats.idle import busy_in, busy_intervals, engine_busy
from labkit.report.window import windowed
from labkit.stats.stages import _warmup_mask, domains, stage_labels

__all__ = ["bottleneck", "Bottleneck"]

IDLE_MOST = 0.5
"""A thread busy less than half the window did not bound it: something else held the run the rest."""
BETWEEN_SAID = 0.1
"""The limiting thread's latency between its ranges is said when it holds at least this share of the window."""




# ----------------------------------------------------------------------------- bottleneck
@dataclass(frozen=True)
class Bottleneck:
    """The stage and thread that bound throughput; ``str()`` gives the sentence."""

    sentence: str
    stage: str | None
    thread: str | None
    tid: int | None
    thread_busy_frac: float
    """The share of the window the thread was occupied: its work, and its latency in and between its ranges."""
    stage_ms: float
    wall_ms: float
    gpu_busy_frac: float
    table: pd.DataFrame
    copy_busy_frac: float = 0.0
    gpu_bound: bool = False
    where: str = ""
    """The window the sentence is about, and why (empty: the one asked for, or the whole trace)."""

    def __str__(self) -> str:
        return self.sentence


def _busy_ns(ranges: pd.DataFrame, blocked) -> int:
    """Time covered by ``ranges`` (one thread's) during which that thread was not blocked."""
    s, e = busy_intervals(ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy())
    total = int(np.sum(e - s))
    if blocked is None or total == 0:
        return total
    return total - int(blocked_in(pd.DataFrame({"global_tid": 0, "start_ns": s, "end_ns": e}), {0: blocked}).sum())


def _untraced_most(rep, w0: int, w1: int) -> str:
    """Where the time the ranges do not show went: the thread with the most time in no range, CUDA call
    or traced wait (the accounting's ``untraced_ms``), where that holds most of the window and the OS
    runtime was traced (else it may be a wait nsys did not record); otherwise the places it can be."""
    unknown = "another process, a thread without ranges, or time between ranges"
    if not osrt_traced(rep) or w1 <= w0:
        return unknown
    t = account(rep, window=(w0, w1)).threads
    t = t[~t["global_tid"].isin(runtime_threads(rep))]
    if t.empty or float(t["untraced_ms"].max()) < IDLE_MOST * (w1 - w0) / 1e6:
        return unknown
    top = t.loc[t["untraced_ms"].idxmax()]
    ms = float(top["untraced_ms"])
    ranged = set(work_ranges(rep)["global_tid"].astype("int64"))
    who = f"{top['thread']}, between its ranges," if int(top["global_tid"]) in ranged else \
        f"{top['thread']}, a thread without ranges,"
    return (f"{who} spent {ms:.0f} ms ({ms / ((w1 - w0) / 1e6):.0%}) where nsys traced no range, CUDA call or wait: "
            "work nobody annotated, or waits nsys does not trace")


def _spread_stage(work: pd.DataFrame, per: pd.DataFrame, wall_ns: int):
    """(stage, ms, threads, how) for a stage run on several threads whose ranges cover most of the
    window (:data:`IDLE_MOST`) where no thread was busy most of it: threads one after another, or
    short-lived ones (most live under half the window: a worker started per item, or a few per
    batch, and waited for). ``ms``: the time its ranges cover; ``how`` says which. None otherwise
    (long-lived threads that run it at once, a pool none of whose threads is busy most of the time,
    do not limit the run)."""
    by = per.groupby("stage", sort=False).agg(ns=("self_ns", "sum"), n=("global_tid", "nunique"))
    top = by["ns"].idxmax()
    if by.at[top, "n"] < 2 or by.at[top, "ns"] < IDLE_MOST * wall_ns:
        return None
    r = work[work["stage"] == top]
    s, e = busy_intervals(r["start_ns"].to_numpy(), r["end_ns"].to_numpy())
    covered = int(np.sum(e - s))
    if covered < IDLE_MOST * wall_ns:
        return None
    apart = covered >= 0.9 * np.sum(r["end_ns"].to_numpy() - r["start_ns"].to_numpy())
    life = r.groupby("global_tid")["end_ns"].max() - r.groupby("global_tid")["start_ns"].min()
    short = float(life.median()) < 0.5 * wall_ns
    if not (apart or short):
        return None
    how = ("one after another" if apart else "partly at once") + (", each short-lived" if short else "")
    return str(top), covered / 1e6, int(by.at[top, "n"]), how


def bottleneck(rep, *, warmup: int = 0, window=None, within=None, steady: bool = True) -> Bottleneck:
    """Name the stage and the thread that bound throughput (:func:`_bottleneck` says how), over the
    window :func:`labkit.advise` reads: ``window=(start_ns, end_ns)`` or ``within="range"`` as given;
    otherwise, with ``steady=True`` (the default) and no ``warmup``, the steady window past start-up
    (:func:`labkit.judge.accounting.chosen_window`), which the sentence then names and
    ``where`` holds; ``steady=False`` keeps the whole trace."""
    chosen, why = chosen_window(rep, window=window, within=within, steady=steady, warmup=warmup)
    b = _bottleneck(rep, warmup=warmup, window=chosen, within=within)
    return replace(b, sentence=f"{b.sentence} Over the {why}.", where=why) if why and chosen is not None else b


@windowed
def _bottleneck(rep, *, warmup: int = 0) -> Bottleneck:
    """Name the stage and the thread that bound throughput, over the report as given.

    With ``warmup``, where ranges carry batch indices (payloads), only those past it count, the
    wall span is theirs and it starts when the last warm-up batch has left the pipeline; without,
    every range counts over the span of all (as in :func:`stage_table`). The busiest thread is the one whose work (ranges, minus waiting ranges such as
    ``wait``/``queue``/``sync``, counted once where nested: self time) covers the largest share of
    the wall span; its stage with the most self time is the bottleneck. A range over half the span
    during which other ranges (of any thread) ran is an envelope (``main``, ``run``) and left
    out; one with no range inside it is the deepest range, the work itself, and counts. Stages in different NVTX domains stay apart (``domain:name``).
    The GPU is named only when kernels kept the SMs busier than any thread was busy; copy-engine
    time is reported apart (``copy_busy_frac``) and never counts as GPU busy.

    Returns: :class:`Bottleneck` (``str()`` is a sentence with the numbers; ``table`` has per
    thread and stage: thread, tid, stage, domain, self_ms, thread_busy_frac).
    """
    nv = rep.nvtx
    ranges = nv["kind"] != "mark"  # push/pop and start/end (a start/end range counts on the thread that opened it)
    pp = nv[ranges & ~_warmup_mask(nv, warmup)] if warmup else nv[ranges]
    pay = pp["payload"].astype("float64")
    if warmup and pay.notna().any():
        # steady state: the span of the batch-indexed ranges past warm-up, and every range inside
        # it (setup such as an engine build happens before and says nothing about throughput)
        # it starts when the last warm-up batch has left the pipeline (queued stages run ahead)
        steady = pp[pay.notna() & (pay >= warmup)]
        allpay = nv.loc[ranges, "payload"].astype("float64")
        warm = nv[ranges][allpay.notna() & (allpay < warmup)]
        w0, w1 = (int(steady["start_ns"].min()), int(steady["end_ns"].max())) if len(steady) else (0, 0)
        if len(warm) and len(steady):
            w0 = max(w0, int(warm["end_ns"].max()))
        pp = pp[(pp["start_ns"] >= w0) & (pp["end_ns"] <= w1) & ~(pay.notna() & (pay < warmup))]
    else:
        w0, w1 = (int(pp["start_ns"].min()), int(pp["end_ns"].max())) if len(pp) else (0, 0)
    wall_ns = w1 - w0
    empty = pd.DataFrame(columns=["thread", "tid", "stage", "domain", "self_ms", "thread_busy_frac"])
    if len(pp) == 0 or wall_ns <= 0:
        acc = account(rep, steady=False)  # no ranges: what the threads did, from the accounting
        b = acc.busiest
        if b is None:
            return Bottleneck("Nothing traced: no NVTX ranges, CUDA or OS runtime calls in this window.", None, None,
                              None, 0.0, 0.0, acc.window_ms, 0.0, empty)
        blocked = b["blocked_ms"] / b["extent_ms"] if b["extent_ms"] else 0.0
        state = (f"blocked {blocked:.0%} of its {b['extent_ms']:.0f} ms (sleeps, reads, waits: not work)"
                 if blocked >= 0.5 else f"busy {b['busy_frac']:.0%} of {acc.window_ms:.0f} ms")
        copy_frac = acc.copy_ms / acc.window_ms if acc.window_ms else 0.0
        gpu = acc.limiter == "gpu"
        quiet = f"no NVTX ranges, so no stage to name: thread {b['thread']} was {state}"
        head = (f"The GPU bound throughput: kernels kept the SMs busy {acc.sm_frac:.0%} of {acc.window_ms:.1f} ms, "
                f"more than any thread was busy ({quiet})" if gpu else
                f"Copies bound throughput: the copy engines were busy {copy_frac:.0%} of {acc.window_ms:.1f} ms, "
                f"more than the SMs ({acc.sm_frac:.0%}) or any thread ({quiet})" if acc.limiter == "copies" else
                quiet[0].upper() + quiet[1:])
        return Bottleneck(f"{head}; annotate the stages (labkit.annotate) and profile again to name one.", None,
                          str(b["thread"]), int(b["tid"]), float(b["busy_frac"]), 0.0, acc.window_ms, acc.sm_frac,
                          empty, copy_frac, gpu)
    # self time: own duration minus direct children's durations, and minus the time the thread was
    # blocked inside it and not inside a child (a sleep, a lock, a sync: waiting is not work)
    # a thread waiting on a peer (a lock, a queue, the GPU) is not what limits the run; a thread blocked
    # on its input (sleeps, reads: latency) is occupied by it, and the sentence says which it was
    blocked = blocked_intervals(rep, kind="peer")
    latency = blocked_intervals(rep, kind="latency")
    own_blocked = pd.Series(blocked_in(pp, blocked), index=pp.index)
    child = pp[pp["parent"] >= 0].groupby("parent")[["duration_ns"]].sum()
    child_blocked = own_blocked[pp["parent"] >= 0].groupby(pp.loc[pp["parent"] >= 0, "parent"]).sum()
    self_ns = (pp["duration_ns"] - child["duration_ns"].reindex(pp.index).fillna(0).to_numpy()
               - (own_blocked - child_blocked.reindex(pp.index).fillna(0)).clip(lower=0).to_numpy())
    work = pp.assign(self_ns=self_ns.to_numpy(), wait=pp["name"].map(is_wait).to_numpy(),
                     stage=stage_labels(pp).to_numpy(), domain=domains(pp).to_numpy())
    # envelopes such as "main" or "run" span most of the run and hold the work of others; a long
    # range with nothing nested in it is the work itself
    long = work.index[work["duration_ns"] >= 0.5 * wall_ns]
    st, en = work["start_ns"].to_numpy(), work["end_ns"].to_numpy()
    holds = [int(((st >= work.at[i, "start_ns"]) & (en <= work.at[i, "end_ns"])).sum()) > 1 for i in long]
    envelope = work.index.isin([i for i, h in zip(long, holds) if h])
    # a start/end range ended on another thread is a span across threads, not one thread's work
    egt = work["end_global_tid"].astype("float64") if "end_global_tid" in work.columns else None
    crossed = (work["kind"] != "push_pop") & egt.notna() & (egt >= 0) & (egt != work["global_tid"]) \
        if egt is not None else False
    work = work[~work["wait"] & ~envelope & ~crossed]
    work = work.assign(thread=thread_label(work["thread_name"], work["tid"]))
    per = work.groupby(["global_tid", "thread", "tid", "stage", "domain"], sort=False)["self_ns"].sum().reset_index()
    # a thread's busy time: the union of its work ranges (start/end ranges may overlap on one thread)
    # minus the time it was blocked inside them
    busy = pd.Series({g: _busy_ns(w, blocked.get(int(g))) for g, w in work.groupby("global_tid", sort=False)},
                     dtype="int64")
    waited = pd.Series({g: int(_busy_ns(w, None) - _busy_ns(w, latency.get(int(g))))
                        for g, w in work.groupby("global_tid", sort=False)}, dtype="int64")
    per["thread_busy_frac"] = per["global_tid"].map(busy) / wall_ns
    per["self_ms"] = per["self_ns"] / 1e6
    per = per.sort_values("self_ns", ascending=False, ignore_index=True)
    table = per[["thread", "tid", "stage", "domain", "self_ms", "thread_busy_frac"]]
    sm, se = engine_busy(rep, "sm")
    cs, ce = engine_busy(rep, "copy")
    gpu_frac = busy_in(sm, se, w0, w1) / wall_ns
    copy_frac = busy_in(cs, ce, w0, w1) / wall_ns
    wall_ms = wall_ns / 1e6
    copies = f"; copies kept the copy engines busy {copy_frac:.0%} (apart: not GPU busy)" if copy_frac else ""
    sm = f"SM busy {gpu_frac:.0%}" if (gpu_frac or copy_frac) else "no GPU work"
    if len(per) == 0:
        return Bottleneck("Only waiting ranges or envelopes were found; no stage did measurable work"
                          f" ({sm}{copies}).", None, None, None,
                          0.0, 0.0, wall_ms, gpu_frac, table, copy_frac, False)
    # a thread is occupied by its work, its latency inside its ranges (both in busy) and its latency
    # between them (an unannotated read of its input): all of it holds the run
    between = pd.Series({g: max(busy_in(*latency[int(g)], w0, w1) - float(waited.get(g, 0)), 0.0)
                         if latency.get(int(g)) is not None else 0.0 for g in busy.index}, dtype="float64")
    occupied = busy + between
    top_tid = occupied.idxmax()
    frac, occ = float(busy[top_tid] / wall_ns), float(occupied[top_tid] / wall_ns)
    row = per[per["global_tid"] == top_tid].iloc[0]
    gpu_bound = gpu_frac > occ and gpu_frac >= copy_frac
    if copy_frac > max(occ, gpu_frac):
        sentence = (f"Copies bound throughput: the copy engines were busy {copy_frac:.0%} of {wall_ms:.1f} ms, more "
                    f"than the SMs ({gpu_frac:.0%}) or any thread (busiest: {row['thread']} at {frac:.0%}, mostly "
                    f"'{row['stage']}').")
    elif gpu_bound:
        sentence = (f"The GPU bound throughput: kernels kept the SMs busy {gpu_frac:.0%} of {wall_ms:.1f} ms, more "
                    f"than any thread was busy (busiest: {row['thread']} at {frac:.0%}, mostly '{row['stage']}')"
                    f"{copies}.")
    elif occ < IDLE_MOST and (spread := _spread_stage(work, per, wall_ns)) is not None:
        stage, ms, n, how = spread
        sentence = (f"Stage '{stage}', run on {n} threads {how}, bound throughput: its ranges held {ms:.1f} ms "
                    f"({ms * 1e6 / wall_ns:.0%}) of {wall_ms:.1f} ms, while no thread was busy most of it (the busiest, "
                    f"{row['thread']}, {frac:.0%}, mostly '{row['stage']}'); {sm}{copies}.")
        return Bottleneck(sentence, stage, None, None, occ, ms, wall_ms, gpu_frac, table, copy_frac, False)
    elif occ < IDLE_MOST:
        sentence = (f"No thread or engine was busy most of the {wall_ms:.1f} ms: the busiest, {row['thread']}, was busy "
                    f"{frac:.0%} (mostly '{row['stage']}', {row['self_ns'] / 1e6:.1f} ms), so the run waits on work its "
                    f"ranges do not show: {_untraced_most(rep, w0, w1)}; {sm}{copies}.")
    else:
        lat = float(waited.get(top_tid, 0)) / max(float(busy[top_tid]), 1.0)
        out = float(between[top_tid]) / wall_ns
        how = (f"occupied {frac:.0%} of {wall_ms:.1f} ms, {lat:.0%} of it blocked in sleeps, reads or polls "
               f"(latency, not work)" if lat >= 0.5 else f"busy {frac:.0%} of {wall_ms:.1f} ms")
        if out >= BETWEEN_SAID:
            how = (f"occupied {occ:.0%} of {wall_ms:.1f} ms: blocked {out:.0%} between its ranges in sleeps, reads or "
                   f"polls (latency: it waits on its input there), and in its ranges {how}")
        stage_share = row["self_ns"] / wall_ns
        sentence = (f"Thread {row['thread']} bound throughput, mostly waiting on its input: that thread was {how}; "
                    f"its busiest stage, '{row['stage']}', {row['self_ns'] / 1e6:.1f} ms ({stage_share:.0%}); "
                    f"{sm}{copies}." if out > stage_share else
                    f"Stage '{row['stage']}' on thread {row['thread']} bound throughput: that thread was {how}, "
                    f"'{row['stage']}' itself {row['self_ns'] / 1e6:.1f} ms ({stage_share:.0%}); {sm}{copies}.")
    return Bottleneck(sentence, str(row["stage"]), str(row["thread"]), int(row["tid"]), occ,
                      float(row["self_ns"] / 1e6), wall_ms, gpu_frac, table, copy_frac, gpu_bound)
