"""A stage's fixed cost per call, and what running it on fewer items leaves of its time: the set-up
ranges nested in its calls (their names hold one of :data:`SETUP_WORDS`), or the caller's fit
(``advise(call_cost=)``). The skip-work finding (:func:`skipped`) and the batching rules read it."""
from __future__ import annotations

from labkit.judge.evidence import Evidence
from labkit.stats import stages

__all__ = ["SETUP_WORDS", "is_setup", "setup_ms", "setup_ranges", "skipped"]

SETUP_WORDS = ("setup", "launch", "overhead", "prepare", "init", "alloc")
"""A range nested in each call of a stage whose name holds one of these is that call's fixed cost:
batching pays it once per batch instead of once per call."""


def is_setup(name) -> bool:
    """Whether a range's name says it is a call's set-up (:data:`SETUP_WORDS`)."""
    n = str(name).lower()
    return any(w in n for w in SETUP_WORDS)


def skipped(ev: Evidence, group, k: int) -> tuple[dict, str, str]:
    """({tid: ms removed}, the assumption, the evidence's words) when the stages of ``group`` run on
    1 item in ``k``.

    A stage's fixed cost per call is the caller's fit (``advise(call_cost=)``) or else the mean of
    the set-up ranges nested in its calls (:func:`setup_ms`). Without one, a stage's time scales
    with its items: 1/k of it stays. With one, the calls keep their batches of consecutive items
    (as a stream muxer forms them), so a call still runs while its batch holds an item to run: of
    calls of b items, min(1, b/k) stay (every window of b consecutive items holds a k-th one when
    k <= b; when k > b no batch holds two). Those calls pay the fixed cost; each item run keeps
    its time.
    """
    st = ev.model.stages
    removed: dict = {}
    kept_calls = []
    for stage in group:
        own = st[st["stage"] == stage].groupby("tid")["own_ms"].sum()
        total = float(own.sum())
        if total <= 0:
            continue
        t = ev.table[ev.table["stage"] == stage] if not ev.table.empty else ev.table
        fixed, whose = float(ev.call_cost.get(stage) or 0), "the caller's fit"
        if not fixed > 0:
            fixed, whose = setup_ms(ev, stage) or 0.0, "its nested set-up ranges"
        calls, items = (int(t["instances"].sum()), float(t["items"].sum())) if len(t) else (0, 0.0)
        if fixed > 0 and calls and items > 0:
            b = items / calls
            keep = min(1.0, b / k)
            fixed_ms = min(fixed * calls, total)
            after = fixed_ms * keep + (total - fixed_ms) / k
            kept_calls.append(f"'{stage}' {keep:.0%} of its calls of {b:.3g} items, {fixed:.1f} ms each ({whose})")
        else:
            after = total / k
        for tid, ms in (own / total * (total - after)).items():
            removed[tid] = removed.get(tid, 0.0) + float(ms)
    if kept_calls:
        how = ("calls keep their batches of consecutive items, so a call still runs while its batch holds an item to "
               "run, paying a fixed cost per call (" + "; ".join(kept_calls) + "), and each item run keeps its "
               "measured time")
        said = f"{', '.join(group)} would keep the fixed cost of the calls still made and 1/{k} of their items' time"
    else:
        how = "each stage keeps its measured time per item (no fixed cost per call was given: a call costs its items)"
        said = f"{', '.join(group)} would take 1/{k} of their time"
    return removed, how, said


def setup_ranges(ev: Evidence, tid: int | None = None):
    """(the set-up ranges nested in a call (:data:`SETUP_WORDS`) inside the window, on ``tid`` or any
    thread, and their parents)."""
    nv = ev.rep.nvtx
    w0, w1 = ev.window
    r = nv[(nv["kind"] != "mark") & (nv["parent"] >= 0) & (nv["start_ns"] >= w0) & (nv["end_ns"] <= w1)]
    if tid is not None:
        r = r[r["global_tid"] == tid]
    r = r[r["name"].map(is_setup).astype(bool)]
    return r, nv.loc[r["parent"].to_numpy()]


def setup_ms(ev: Evidence, stage: str) -> float | None:
    """The measured fixed cost of one call of ``stage`` (ms): the mean of the set-up ranges nested in
    its calls, or None where its calls have none."""
    if len(ev.rep.nvtx) == 0:
        return None
    r, parents = setup_ranges(ev)
    mine = (stages.stage_labels(parents) == stage).to_numpy() if len(parents) else []
    return float(r["duration_ns"].to_numpy()[mine].mean()) / 1e6 if len(r) and mine.any() else None
