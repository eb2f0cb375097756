"""The rules of :func:`labkit.advise`: each a function of the :class:`~labkit.judge.evidence.Evidence`
returning finding rows (none when it does not apply, or when its measured cost is zero).

The rules here read the stages and threads (the what-if model); the batching rules live in
:mod:`labkit.judge.batch_rules`, and the GPU-side rules, which read the CUDA API and GPU activity as
``nsys analyze``'s do, in :mod:`labkit.judge.gpu_rules`. :data:`labkit.judge.advice.RULES` lists them
all.
"""
from __future__ import annotations

from labkit.report.reader import pid_of
from labkit.stats import stages
from labkit.stats.calls import osrt_traced
from labkit.judge.call_cost import is_setup, skipped
from labkit.judge.whatif import IN_FLIGHT
from labkit.judge.evidence import CHAIN_THREADS, DOMINANT_SHARE, MIN_GAIN, ONE_AT_A_TIME, TURNS_SHARE, Evidence, row

STAGE_TIMES = ("stage times were measured under the run's own contention for cores and change when the run "
               "changes, so this is an estimate")


# ----------------------------------------------------------------------------- stages
# Stage findings read the what-if model (labkit.judge.whatif): each predicts the model's run length
# before over after its change, so a change to a thread that does not limit the run predicts nothing.
HELPERS = ("a thread without ranges of its own in the stage's process (a library's worker pool) works for the stage "
           "whose ranges it overlaps, and its time there changes with that stage's (its reads, polls and sleeps are "
           "waits for work); one in another process (a data loader's worker) keeps its time")
"""The what-if model's assumption about unannotated threads (labkit.judge.whatif.WhatIf.helpers)."""
POOLS = ("threads of one process that run the same stages at once (a pool taking items from one queue) share "
         "their work evenly")
"""The what-if model's assumption about pools (labkit.judge.whatif.WhatIf.pools)."""
MODEL = ("every other thread and engine keeps its measured time, and the threads' CPU time shares the cores the "
         "profiled run had; " + HELPERS + "; " + POOLS + "; " + STAGE_TIMES)
BOUND_MODEL = ("every other thread and engine keeps its measured time (measured under the run's own contention for "
               "cores), and the threads' CPU time shares the cores the profiled run had; " + HELPERS + "; " + POOLS)
"""The model's assumptions said with a bound: the same as :data:`MODEL`'s, without calling it an estimate."""
BALANCED = 1.10
"""Threads whose own times are within 10 % of each other are balanced: no stage finding is made on the
limiting one. Own times are measured under the run's contention: three threads given 20 ms a step
each read 7 % apart in their trace on the 2-core VM."""
PATH_SHARE = 0.25
"""A stage holding at least this share of the critical path, off the limiting thread, gets a finding
of its own (:func:`on_path`): below it the stage is one of several the path passes through."""
LONE_NEXT = 0.1
"""A stage alone on the limiting thread has no other stage to dominate; it is a finding only where
other host work would then limit: another thread's own time that is a limit of its own (not a pool's
inside the stage's ranges) of at least this share of the limiting thread's, so that a cheaper stage
gains at most 1/LONE_NEXT (10x) before that thread limits. With less beside it the stage is the
program (a report whose one 'step' range spans the run: a 265x "bound" on making the whole program
cheaper) and no stage lever is news; where the next limit is the GPU's, the GPU rules speak. A loader
process working two thirds of the time the lone stage takes is such a limit: the stage is a finding,
bounded by the loader."""
HOLDS_WINDOW = 0.8
"""A thread whose stages, one after another, hold at least this share of the window (their own time
and their waits on peers) is the run's sequence even where another thread has more own time: the
serial-stages finding speaks of it (:func:`_holder`). Below it the thread also idles between its
stages, and the gaps, not its stages' order, are what its trace shows."""
BATCH_TO = 16  # the batch size the batching estimate assumes where the calls carry fewer items


def _limiting(ev: Evidence):
    """(model, the limiting thread's row, its stages with own time), or None when no thread limits the
    run by more than the noise of the model's own figures (:data:`BALANCED` over the runner-up)."""
    m = ev.model
    lim = m.limiter
    if lim is None or lim["own_ms"] <= 0:
        return None
    span = (m.window[1] - m.window[0]) / 1e6
    if m.lifetime_ms(int(lim["tid"])) < 0.5 * span:  # a worker for one item (see chain): it limits nothing
        return None
    own = m.independent_ms()  # a worker pool's time inside stages is theirs, not a rival limit
    pool = m.pool_of(int(lim["tid"]))  # a pool's threads share its work: the pool limits, as one
    second = max(_runner_up(m, int(lim["tid"]))["ms"], m.floor_ms)
    mine = float(own.reindex(pool).fillna(0.0).mean()) if len(pool) > 1 else float(lim["own_ms"])
    if mine < BALANCED * second:  # balanced: changing one thread cannot pay beyond the noise
        return None
    if len(pool) > 1:
        lim = lim.copy()
        lim["thread"] = f"{lim['thread']} (one of a pool of {len(pool)} threads that run the same stages)"
    st = m.stages_of(int(lim["tid"]))
    return m, lim, st[st["own_ms"] > 0]


def _runner_up(m, tid: int) -> dict:
    """The thread, outside ``tid``'s pool, with the most own time that is a limit of its own
    (:meth:`~labkit.judge.whatif.WhatIf.independent_ms`): ``{"ms": its time, "thread": its name}``
    (0 and None where there is none): the next to limit when ``tid`` gets cheaper."""
    own = m.independent_ms()
    others = own[~own.index.isin(m.pool_of(tid))]
    if not len(others) or float(others.max()) <= 0:
        return {"ms": 0.0, "thread": None}
    top = int(others.idxmax())
    name = str(m.threads.set_index("tid").at[top, "thread"])
    if pid_of(top) != pid_of(tid):
        name += " (another process)"
    return {"ms": float(others.max()), "thread": name}


def _given(ev: Evidence, stage: str) -> bool:
    """Whether the caller named a concrete lever for ``stage`` (removable, or skipped with a K it gave):
    that lever's finding then stands for the stage, not the generic cheaper-stage limit."""
    return stage in ev.removable or (ev.skip_given and (not ev.skip_with or stage in ev.skip_with))


def _holder(m, lim) -> tuple[dict, float] | None:
    """The thread, other than the limiting one's pool, whose stages hold at least :data:`HOLDS_WINDOW`
    of the window, own time and waits on peers together, with that share: the thread the run goes
    through one stage after another while the limiting thread works for one of them (a pool's worker
    process inside its caller's 'map', the caller reducing while the worker idles). None where
    there is none."""
    span = (m.window[1] - m.window[0]) / 1e6
    st = m.stages
    if span <= 0 or st.empty:
        return None
    holds = (st["own_ms"] + st["wait_ms"]).groupby(st["tid"]).sum()
    holds = holds[~holds.index.isin(m.pool_of(int(lim["tid"])))]
    if not len(holds) or float(holds.max()) < HOLDS_WINDOW * span:
        return None
    tid = int(holds.idxmax())
    t = m.threads.set_index("tid").loc[tid]
    return dict(t, tid=tid), float(holds.max()) / span


def serial(ev: Evidence) -> list[dict]:
    """Several stages one after another on the limiting thread, or on the thread whose stages hold
    the window while the limiting one works for one of them (:func:`_holder`): give each its own
    thread."""
    lim = _limiting(ev)
    if lim is None:
        return []
    m, t, _ = lim
    out = _serial_on(m, t, f"{t['thread']}, the thread with the most own time ({t['own_ms']:.0f} ms, waits on "
                           "other threads left out)")
    if not out and (h := _holder(m, t)) is not None:
        h, share = h
        out = _serial_on(m, h, f"{h['thread']}, whose stages hold {share:.0%} of the window while {t['thread']}, "
                               f"the thread with the most own time ({t['own_ms']:.0f} ms), works for one of them")
    return out


def _serial_on(m, t, who: str) -> list[dict]:
    """serial's finding on thread ``t`` (its row; ``who``: the words that name it), or none."""
    tid = int(t["tid"])
    # a stage holds the thread for its own time and for its waits on other threads or processes (a
    # pool's map, a request to a worker): the one that holds it longest stays, the others move, and
    # the moved work then runs while the kept stage waits
    seq = m.stages_of(tid)
    seq = seq.assign(holds_ms=seq["own_ms"] + seq["wait_ms"])
    seq = seq[seq["holds_ms"] > 0].sort_values("holds_ms", ascending=False)
    if len(seq) < 2:
        return []
    keep = seq.iloc[0]
    moved = seq.iloc[1:]
    moved = moved[moved["own_ms"] > 0]
    if moved.empty:
        return []
    p = m.speedup({tid: float(moved["own_ms"].sum())}, list(moved["own_ms"]))
    # threads of one Python process take turns on its GIL while they run Python code: if all the
    # stages' own time holds it, the moved work runs only while the kept stage is blocked (on a peer,
    # or in reads and sleeps: its latency)
    blocked = float(keep["wait_ms"]) + float(keep["latency_ms"])
    turns = min(float(moved["own_ms"].sum()), blocked)
    p_turns = min(m.speedup({tid: turns}, [turns] if turns > 0 else []), p)
    stage = str(moved.iloc[0]["stage"])
    work = float(keep["own_ms"]) - float(keep["latency_ms"])
    waits = (f" ({work:.0f} ms of work and {blocked:.0f} ms blocked on other threads, processes or the outside "
             "world, in which the moved stages then run)" if blocked > work else "")
    text = (f"{len(seq)} stages ({', '.join(seq['stage'].astype(str))}) run one after another on {who}; the one "
            f"that holds it longest, '{keep['stage']}', holds it {keep['holds_ms']:.0f} ms{waits}, so with each of "
            f"the others on its own thread that thread works {t['own_ms'] - moved['own_ms'].sum():.0f} ms")
    return [dict(row("serial_stages", "The stages run one after another on one thread", text, "overlap_stages", p,
                     "estimate", f"each stage keeps its time on its own thread, queues between them, and the threads "
                     "work at once (threads of one Python process take turns on its GIL in Python code: if all the "
                     f"stages' own time held it, the gain would be {p_turns:.2f}x; separate processes, or code that "
                     "releases the GIL, keep the estimate; one_at_a_time finds turns in the changed run's profile); "
                     f"{MODEL}", stage),
                 touch_ms=float(moved["own_ms"].sum()))]


def latency(ev: Evidence) -> list[dict]:
    """The limiting thread waits on the outside world (sleeps, reads): keep several requests in flight."""
    lim = _limiting(ev)
    if lim is None:
        return []
    m, t, st = lim
    lat = float(t["latency_ms"])
    if lat <= 0 or lat < 0.3 * float(t["own_ms"]):
        return []
    tid = int(t["tid"])
    cores = m.cores or 1
    if len(st) and st["latency_ms"].max() > 0:  # the stage that waits is what runs several at once
        s = st.loc[st["latency_ms"].idxmax()]
        stage, s_own, s_lat = str(s["stage"]), float(s["own_ms"]), float(s["latency_ms"])
        after = max(s_own / IN_FLIGHT, (s_own - s_lat) / cores)  # its CPU part still needs the cores
        # the requests in flight run beside the thread's other stages (prefetch threads, tasks of an
        # event loop): the thread's loop takes the longer of those stages and the overlapped one
        rest = float(t["own_ms"]) - s_own
        how = (f"{IN_FLIGHT} at a time, it takes {after:.0f} ms of {s_own:.0f}, beside the thread's other "
               f"{rest:.0f} ms")
        after = max(after - rest, 0.0)  # what stays of it on the loop: the part the others do not cover
    else:  # no stage waits: the time between the thread's ranges (its input, read where no range
        # says) runs several at once on other threads; its ranges stay on it, one after another
        stage, s_own, s_lat = None, float(t["own_ms"]), lat
        kept = float(st["own_ms"].sum()) if len(st) else 0.0
        after = max(kept, (s_own - kept) / IN_FLIGHT, (s_own - s_lat) / cores)
        how = (f"with the time between its ranges {IN_FLIGHT} at a time on other threads, its loop takes "
               f"{after:.0f} ms of {s_own:.0f}" + (f" (its ranges' {kept:.0f} ms stay on it)" if kept else ""))
    p = m.speedup({tid: s_own - after})
    text = (f"{t['thread']} has the most own time ({t['own_ms']:.0f} ms) and {lat:.0f} ms of it ({lat / t['own_ms']:.0%}) "
            f"is latency: blocked in sleeps, reads or polls" + (f", mostly in '{stage}'" if stage else "")
            + f"; {how}")
    return [dict(row("latency_bound", "The limiting thread waits on its input (latency)", text, "parallel_input", p,
                     "estimate", f"{IN_FLIGHT} requests in flight at once (parallel reads, prefetch threads), their "
                     f"CPU part sharing the {cores} core(s) the profiled run had"
                     + (", while the thread runs its other stages" if stage else "")
                     + ("" if stage else "; the thread's own ranges stay on it, one after another") + f"; {MODEL}",
                     stage),
                 touch_ms=s_own - after)]


def on_path(ev: Evidence) -> list[dict]:
    """A stage that holds a large share of the critical path (:data:`PATH_SHARE`) outside the limiting
    thread's stages, or anywhere where no thread limits: the run waits on it although the thread running
    it is not the busiest (a synchronous hand-off, a worker started per item and joined, threads
    taking turns, a limit that moves from one thread to another during the run). A cheaper stage
    shortens the path: the prediction is the model's run length with the stage costing nothing (a
    bound)."""
    m = ev.model
    ps = m.path_stages()
    span = (m.window[1] - m.window[0]) / 1e6
    if ps.empty or span <= 0:
        return []
    lim = _limiting(ev)
    theirs = set(map(str, lim[2]["stage"])) if lim is not None else set()  # dominant and serial say those
    out = []
    for top in ps[ps["path_ms"] >= PATH_SHARE * span].itertuples():
        stage, on, n, turns = str(top.stage), float(top.path_ms), int(top.threads), int(top.turns)
        if stage in theirs or is_setup(stage) or _given(ev, stage):
            continue
        gone = m.stages[m.stages["stage"] == stage].groupby("tid")["own_ms"].sum().to_dict()
        if not sum(gone.values()):  # not a stage (an envelope such as a loop's iteration), or no own time
            continue
        if turns >= 2:
            title, who = f"Threads take turns in '{stage}'", f"run by {turns} threads in turn: while one runs it the others wait"
        elif n > 1:
            title, who = f"'{stage}' holds the critical path", f"the path passing through {n} of the threads that run it"
        else:
            who = "on " + str(m.threads.set_index("tid")["thread"].get(next(iter(gone), -1), "one thread"))
            title = f"'{stage}' holds the critical path"
        busiest = ("no thread's own time limits the run (they are within "
                   f"{BALANCED - 1:.0%} of each other)" if lim is None else
                   f"the busiest thread, {lim[1]['thread']}, does not run it")
        text = (f"{busiest}, but '{stage}' holds {on:.0f} ms of the {span:.0f} ms critical path ({on / span:.0%}), "
                f"{who}; the prediction is the most a cheaper '{stage}' can give: '{stage}' taking no time at all")
        out.append(dict(row("on_path", title, text, "cheaper_stage", m.speedup(gone, stages=[stage]), "bound",
                            f"'{stage}' costs nothing; {BOUND_MODEL}", stage),
                        touch_ms=on, helpers_ms={**gone, **{h: gone.get(h, 0.0) + ms for h, ms in
                                                            m.helped(gone, [stage]).items()}}))
    return out


def taking_turns(ev: Evidence) -> list[dict]:
    """One stage, run by several threads in turn (a lock held for it, a resource one at a time), holds
    most of the critical path: the threads running it at once would shorten it (an estimate; a cheaper
    stage is :func:`on_path`'s finding, or the limiting thread's)."""
    m = ev.model
    ps = m.path_stages()
    span = (m.window[1] - m.window[0]) / 1e6
    if ps.empty or span <= 0:
        return []
    top = ps.iloc[0]
    stage, on_path, n = str(top["stage"]), float(top["path_ms"]), int(top["turns"])
    if n < 2 or on_path < DOMINANT_SHARE * span or is_setup(stage):
        return []
    held = f"'{stage}', run by {n} threads in turn, holds {on_path:.0f} ms of the {span:.0f} ms critical path"
    p = m.without_turns()  # the way out of the turns: let the threads run the stage at once
    if p < MIN_GAIN or one_at_a_time(ev):  # that rule already answers turns taken inside stages
        return []
    return [dict(row(
        "taking_turns", f"Threads take turns in '{stage}'",
        f"{held}; if they could run it at once (a lock held over it for longer than it needs, as over I/O), "
        f"each thread keeps its own time: the longest takes {float(m.threads['own_ms'].max()):.0f} ms",
        "release_lock", p, "estimate", f"the threads no longer wait on each other in '{stage}' (what it does "
        f"needs no resource that serves one at a time: not one disk, device or connection); each keeps its own "
        f"time; {MODEL}", stage), touch_ms=on_path)]


def chain(ev: Evidence) -> list[dict]:
    """The items pass one at a time through short-lived workers (a thread or process started per item
    and waited for): the critical path hops from one to the next, so no thread is busy for long, and
    the run is their chain. With several items in flight each worker keeps its own time and they
    share the cores."""
    m = ev.model
    span = (m.window[1] - m.window[0]) / 1e6
    path = m.critical()
    if path is None or span <= 0:
        return []
    work = path[~path["waiting"] & (path["tid"] >= 0)]
    on = ((work["end_ns"] - work["start_ns"]) / 1e6).groupby(work["tid"]).sum()
    short = [int(g) for g in on.index if 0 < m.lifetime_ms(int(g)) < 0.5 * span]
    held = float(on.loc[short].sum()) if short else 0.0
    if len(short) < CHAIN_THREADS or held < DOMINANT_SHARE * span:
        return []
    cores = int(m.cores or 1)
    # the path's waits where no traced thread worked: a worker's start before its first traced event
    # (a process's exec, its interpreter), work that shares the cores too once items overlap
    untraced = float(((path["end_ns"] - path["start_ns"]) / 1e6)[path["waiting"]].sum())
    th = m.threads
    work_ms = float(th["own_ms"].sum()) + untraced
    cpu_ms = work_ms - float(th["latency_ms"].sum())  # sleeps and reads overlap without a core
    after = max(cpu_ms / cores, work_ms / IN_FLIGHT, float(th["own_ms"].max()), m.floor_ms)
    p = span / after if after > 0 else float(IN_FLIGHT)
    if p < MIN_GAIN:
        return []
    procs = len({g >> 24 for g in short})
    life = sorted(m.lifetime_ms(g) for g in short)[len(short) // 2]
    text = (f"the critical path passes through {len(short)} short-lived threads"
            + (f" in {procs} processes" if procs > 1 else "") + f", one after another: {held:.0f} ms of the "
            f"{span:.0f} ms window (each lives {life:.0f} ms, the median); a worker started for each item and waited "
            f"for, so the items run one at a time; their work, {work_ms:.0f} ms (the threads' own time and "
            f"{untraced:.0f} ms of the path where no traced thread worked; {cpu_ms:.0f} ms of it not blocked in "
            f"sleeps or reads), shares {cores} core(s) when several are in flight")
    return [dict(row("chain", "The items run one at a time, each in a worker of its own", text, "in_flight", p,
                     "estimate", f"up to {IN_FLIGHT} items in flight instead of one: each thread keeps its own time, "
                     f"the path's time where no traced thread worked (a worker's start before its first traced event) "
                     f"is work too, all of it but the sleeps and reads sharing the {cores} core(s) the profiled run "
                     f"had, and nothing else waits in turn; {MODEL}"),
                 touch_ms=held)]


def one_at_a_time(ev: Evidence) -> list[dict]:
    """Threads that work one at a time although the machine has cores for them, each waiting on the
    others inside its own stages: a lock they take in turn (Python's GIL around pure-Python work, or a
    lock of the program's). Without the turns each keeps its own time and they share the cores."""
    m = ev.model
    span = (m.window[1] - m.window[0]) / 1e6
    cores = int(m.cores or 1)
    st = m.stages
    if cores < 2 or span <= 0 or st.empty:
        return []
    per = st.groupby("tid").agg(own=("own_ms", "sum"), wait=("wait_ms", "sum"))
    turns = per[(per["own"] >= TURNS_SHARE * span) & (per["wait"] >= TURNS_SHARE * (per["own"] + per["wait"]))]
    if len(turns) < 2:
        return []
    th = m.threads.set_index("tid").loc[turns.index]
    total = float(th["own_ms"].sum())
    if not ONE_AT_A_TIME[0] * span <= total <= ONE_AT_A_TIME[1] * span:
        return []  # they overlapped (or did something else most of the window)
    p = m.without_turns()
    if p < MIN_GAIN:
        return []
    names = th["thread"].astype(str).tolist()
    mine = st[st["tid"].isin(turns.index)].groupby("stage")["wait_ms"].sum().sort_values(ascending=False)
    stage = str(mine.index[0]) if len(mine) and mine.iloc[0] >= DOMINANT_SHARE * mine.sum() else None
    longest = float(th["own_ms"].max())
    text = (f"{len(turns)} threads ({', '.join(names)}) worked {total:.0f} ms in the {span:.0f} ms window "
            f"({total / span:.0%} of it, on {cores} cores): one at a time. Each waited on the others inside its own "
            f"stages ({turns['wait'].sum():.0f} ms in all" + (f", mostly in '{stage}'" if stage else "") + "): a lock "
            f"they take in turn, such as Python's GIL around pure-Python work; without the turns the longest thread "
            f"takes {longest:.0f} ms and the {total:.0f} ms share {cores} cores")
    return [dict(row("one_at_a_time", "Threads work one at a time", text, "release_lock", p, "estimate",
                     "the threads no longer wait on each other inside their stages; each keeps its own time; " + MODEL,
                     stage),
                 touch_ms=float(turns["wait"].sum()))]


def dominant(ev: Evidence) -> list[dict]:
    """One stage holds most of the limiting thread's own time: its own levers matter most."""
    lim = _limiting(ev)
    if lim is None:
        return []
    m, t, st = lim
    if len(st) == 0:
        return []
    tid = int(t["tid"])
    nxt = _runner_up(m, tid)
    lone = len(m.stages.groupby(["tid", "stage"])) < 2
    if lone and nxt["ms"] < LONE_NEXT * float(t["own_ms"]):  # one stage on one thread, little beside it
        return []
    top = st.iloc[0]
    stage, ms = str(top["stage"]), float(top["own_ms"])
    share = ms / float(t["own_ms"])
    if share < DOMINANT_SHARE or is_setup(stage):
        return []
    text = (f"'{stage}' is {ms:.0f} ms of the {t['own_ms']:.0f} ms of own time of {t['thread']}, the thread with "
            f"the most ({share:.0%}), in {ev.wall_ms:.0f} ms" +
            (f"; it is the only stage, and beside it {nxt['thread']} works {nxt['ms']:.0f} ms on its own, the next "
             "limit" if lone else ""))
    out = []
    if not _given(ev, stage):
        tb = ev.table.assign(label=stages.stage_labels(ev.table.rename(columns={"stage": "name"})))
        on_gpu = float(tb.loc[tb["label"] == stage, "gpu_ms"].sum()) > 0
        lever = "gpu_offload" if len(ev.kernels) and not on_gpu else "cheaper_stage"
        out.append(dict(row("dominant_stage", f"One stage, '{stage}', dominates", text + "; the prediction is the "
                            f"most a cheaper '{stage}' can give: '{stage}' taking no time at all", lever,
                            m.speedup({tid: ms}, stages=[stage]), "bound", f"'{stage}' costs nothing; {BOUND_MODEL}",
                            stage), touch_ms=ms, helpers_ms=m.helped({tid: ms}, [stage])))
    group = ([stage] + [g for g in ev.skip_with if g != stage]) if stage in ev.skip_with else [stage]
    k = ev.skip_every
    removed, how, said = skipped(ev, group, k)
    out.append(dict(row("skip_work", f"Stage '{stage}' could run on fewer items", text + f"; run on 1 item in {k}, "
                        f"{said}", "skip_work", m.speedup(removed, stages=group), "estimate",
                        f"the stages {', '.join(group)} run on 1 item in {k} (K={k}); {how}; {MODEL}", stage),
                    touch_ms=float(sum(removed.values())), helpers_ms=m.helped(removed, group)))
    return out


def outside_ranges(ev: Evidence) -> list[dict]:
    """The limiting thread's own time lies mostly outside its ranges, CUDA calls and waits, where nsys
    traced nothing (the accounting's ``untraced_ms``): work nobody annotated (a thread without ranges,
    preprocessing between the ranges). No stage names it, so this finding does; its bound is that time
    costing nothing. A thread without ranges whose time lies inside another thread's stage while that
    thread waits on it (:meth:`~labkit.judge.whatif.WhatIf.served`: a pool's worker process inside its
    caller's 'map') works for that stage, and the finding names it. Only where the OS runtime was
    traced (:func:`labkit.stats.calls.osrt_traced`): without, that time may be any wait."""
    lim = _limiting(ev)
    if lim is None or not osrt_traced(ev.rep):
        return []
    m, t, _ = lim
    tid = int(t["tid"])
    acc = ev.acc.threads
    mine = acc[acc["global_tid"] == tid]
    own = float(t["own_ms"])
    ms = min(float(mine["untraced_ms"].iloc[0]), own) if len(mine) else 0.0
    if own <= 0 or ms < DOMINANT_SHARE * own:
        return []
    st = m.stages_of(tid)
    where = ("it has no ranges" if st.empty else
             f"its ranges ({', '.join(st['stage'].astype(str))}) hold {float(st['own_ms'].sum()):.0f} ms of it")
    # a thread without ranges whose work lies inside another thread's stage (a pool's worker process
    # inside its caller's 'map'): that stage is what the work is for, and what the finding names
    serves = m.served(tid, DOMINANT_SHARE * ms) if st.empty else None
    stage, names = None, ""
    if serves is not None:
        stage, owner = serves[0], m.threads.set_index("tid")["thread"].get(serves[1], "another thread")
        names = f"; {serves[2]:.0f} ms of it lies inside the '{stage}' ranges of {owner}: the work '{stage}' stands for"
    text = (f"{ms:.0f} ms of the {own:.0f} ms of own time of {t['thread']}, the thread with the most, in "
            f"{ev.wall_ms:.0f} ms, lies outside its ranges, CUDA calls and waits, where nsys traced nothing "
            f"({where}{names}): work nobody annotated, or waits nsys does not trace; annotate it "
            "(labkit.annotate.range) to see which work it is, or profile with context switches to tell its work "
            "from its waits")
    return [dict(row("outside_ranges", "The limiting thread's time is outside its ranges", text, "cheaper_stage",
                     m.speedup({tid: ms}), "bound", f"the untraced time costs nothing; {BOUND_MODEL}", stage),
                 touch_ms=ms)]


def removable(ev: Evidence, names) -> list[dict]:
    """Stages the caller says the output does not need (``removable=``): their whole time is the gain."""
    out = []
    st = ev.model.stages
    for stage in names:
        mine = st[st["stage"] == stage]
        ms = float(mine["own_ms"].sum())
        if ms < 0.005 * ev.wall_ms:  # under half a percent of the window: nothing to switch off
            continue
        text = f"'{stage}' takes {ms:.0f} ms of its threads' own time and the output does not need it"
        gone = mine.groupby("tid")["own_ms"].sum().to_dict()
        out.append(dict(row("removable_stage", f"Stage '{stage}' can be switched off", text, "remove_stage",
                            ev.model.speedup(gone, stages=[stage]), "estimate",
                            f"the other stages keep their times; {MODEL}", stage), touch_ms=ms,
                        helpers_ms=ev.model.helped(gone, [stage])))
    return out
