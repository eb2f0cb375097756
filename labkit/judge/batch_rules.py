"""The batching rules of :func:`labkit.advise`: what calling a stage on more items at once would save,
from the fixed cost each call pays (a set-up range nested in each call, the caller's fit over runs
at two or more batch sizes, or a fit over calls of different sizes). Each is a function of the
:class:`~labkit.judge.evidence.Evidence` returning finding rows, as the rules of
:mod:`labkit.judge.rules` are."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from labkit.judge.evidence import UNDERFILL, Evidence, row
from labkit.judge.call_cost import setup_ranges
from labkit.judge.rules import BATCH_TO, MODEL, STAGE_TIMES, _limiting
from labkit.stats import stages


def per_call(ev: Evidence) -> list[dict]:
    """Each call of a stage pays a fixed cost (a nested range named as set-up): batch the calls."""
    lim = _limiting(ev)
    nv = ev.rep.nvtx
    if lim is None or len(nv) == 0:
        return []
    m, t, _ = lim
    tid = int(t["tid"])
    r, parents = setup_ranges(ev, tid)
    if len(r) < 2:
        return []
    items = stages._items_per_range(nv)[parents.index.to_numpy()]
    stage = str(stages.stage_labels(parents).mode().iloc[0])
    per_call_items = float(np.median(items)) if len(items) else 1.0
    if per_call_items >= BATCH_TO:
        return []
    n_items = float(np.maximum(items, 1).sum())
    calls = len(r)
    needed = math.ceil(n_items / BATCH_TO)
    fixed = float(r["duration_ns"].mean()) / 1e6
    saved = fixed * max(calls - needed, 0)
    if saved <= 0:
        return []
    text = (f"'{stage}' ran {calls} calls of {per_call_items:g} item(s) each on {t['thread']}; each paid "
            f"{fixed:.1f} ms of '{r['name'].iloc[0]}' (a fixed cost per call), so {needed} calls of {BATCH_TO} would "
            f"save {saved:.0f} ms")
    return [dict(row("per_call_overhead", f"Every call of '{stage}' pays a fixed cost", text, "batch",
                     m.speedup({tid: saved}), "estimate", f"calls of {BATCH_TO} items pay the fixed cost once and each "
                     f"item its measured time; {MODEL}", stage), touch_ms=saved)]


def fitted_batch(ev: Evidence) -> list[dict]:
    """Batching with the caller's fitted cost of a call (``advise(call_cost={stage: fixed_ms},
    batch_to=B)``): each call of the stage pays ``fixed_ms`` whatever it carries (as fitted over runs
    at two or more batch sizes), so calls of ``B`` items save the fixed part of the calls they make
    unnecessary, on the stage's thread."""
    if not ev.call_cost or not ev.batch_to or ev.table.empty:
        return []
    out = []
    st = ev.model.stages
    for stage, fixed in ev.call_cost.items():
        t = ev.table[ev.table["stage"] == stage]
        mine = st[st["stage"] == stage]
        if t.empty or mine.empty or not fixed > 0:
            continue
        calls, n = int(t["instances"].sum()), int(t["items"].sum())
        needed = math.ceil(n / ev.batch_to)
        own = mine.groupby("tid")["own_ms"].sum()
        saved = min(float(fixed) * max(calls - needed, 0), float(own.sum()))
        if saved <= 0:
            continue
        removed = (own / own.sum() * saved).to_dict()
        text = (f"'{stage}' ran {calls} calls on {n} items; a call costs {fixed:.1f} ms whatever it carries (the "
                f"caller's fit), so {needed} calls of {ev.batch_to} would save {saved:.0f} ms of its own time")
        out.append(dict(row("fitted_batch", f"Calls of '{stage}' in batches of {ev.batch_to}", text, "batch",
                            ev.model.speedup(removed, stages=[stage]), "estimate", f"a call of '{stage}' costs the "
                            f"fitted fixed part once and each item its measured time; {MODEL}", stage), touch_ms=saved,
                        helpers_ms=ev.model.helped(removed, [stage])))
    return out


def underfilled(ev: Evidence) -> list[dict]:
    """A stage's calls carry fewer items than its largest call: fill them (no padding assumed).

    Calls are not padded, so a call's cost is fitted as a fixed part plus a part per item
    (least squares over the calls); filling the batches saves the fixed part of the calls that
    full batches make unnecessary. Without two different call sizes the fixed part cannot be
    measured and no prediction is made."""
    if not ev.batch_size or ev.table.empty:
        return []
    nv = ev.rep.nvtx
    items = stages._items_per_range(nv)
    lab = stages.stage_labels(nv)
    out = []
    for t in ev.table.itertuples():
        label = lab[(nv["name"] == t.stage) & (stages.domains(nv) == t.domain)]
        if t.instances == 0 or t.items <= 0 or len(label) == 0:
            continue
        stage = label.iloc[0]
        calls, n = int(t.instances), int(t.items)
        fill = n / (calls * ev.batch_size)
        if fill >= UNDERFILL:
            continue
        r = nv[(lab == stage) & (nv["kind"] != "mark")]
        r = r.assign(items=items[r.index.to_numpy()])
        if ev.batches:
            r = r[r["payload"].astype("float64") >= ev.warmup]
        r = r[r["items"] > 0]  # a call on no items (an end-of-stream marker) is no batch
        if r["items"].nunique() < 2 or r["items"].max() <= 1:
            continue  # one call size, or a stage that never took more than one item a call: no fit
        slope, fixed = np.polyfit(r["items"].to_numpy(float), r["duration_ns"].to_numpy(float) / 1e6, 1)
        needed = math.ceil(n / ev.batch_size)
        saved = fixed * (calls - needed)
        if fixed <= 0 or slope < 0 or saved <= 0:
            continue  # an item cannot cost less than nothing: the calls do not follow the model
        mine = ev.load[ev.load["stage"] == stage]
        if mine.empty:
            continue
        change = pd.DataFrame({"tid": [mine.groupby("tid")["ms"].sum().idxmax()], "ms": [-saved]})
        text = (f"'{stage}' ran {calls} calls on {n} items at batch size {ev.batch_size}: {fill:.0%} full "
                f"({n / calls:.1f} items a call); a call costs {fixed:.1f} ms plus {slope:.1f} ms an item (fit over "
                f"{len(r)} calls, no padding), so {needed} full calls would save {saved:.0f} ms")
        out.append(row("underfilled_batches", f"The batches of '{stage}' are mostly empty", text, "batch",
                       ev.bound(change), "estimate", "a call costs a fixed part plus a part per item, as fitted; "
                       f"items can wait to fill a batch; {STAGE_TIMES}", stage))
    return out
