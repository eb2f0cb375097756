"""The end of the arc: one optimized pipeline, "the best within the accuracy floor", built from
the levers that paid on this machine (notebook 06 runs it; 07 and 08 build on it).

A lever *paid* when its catalogue step measured faster than the step it builds on beyond the
noise: the low end of the speed-up's 95 % interval above 1.0 where the rows have intervals,
else above ``labkit.judge.advice.MIN_GAIN``. INT8 steps are left out (an accuracy decision of its own,
notebook 05), as are rows faster than their own decoding. The paid steps are combined fastest
first, each adding its change over the step it builds on unless it conflicts with what is
already set (two backends or devices) or the application refuses it with what is set
(``source_code.options.refused``: a torch-only option on another backend, ``--compile`` with
``--cuda-graphs``, the application's own data); the interval is the
knee's (``labbook.interval.floor``), so the step stays within the floor by construction, and its
own MOTA is checked against the floor once it ran.
"""
from __future__ import annotations

import pandas as pd
from labkit.judge.advice import MIN_GAIN

from labbook.interval import FLOOR_ACCURACY, accuracy_floor, base, interval_rows
from labbook.predict import change_of, ratio_interval
from labbook.reference import ledger
from labbook.settings import MODE
from labbook.steps import Step, catalogue

NAME = "optimized"


def gains(mode: str = MODE) -> pd.DataFrame:
    """Each catalogue step (not a sweep value, not INT8) that ran here, with its speed-up over the
    step it builds on, that speed-up's interval and whether it ``paid``; fastest first."""
    cat = catalogue(mode)
    names = [n for n, st in cat.items() if st.builds_on and st.kind in ("cumulative", "alternative")
             and st.flags.get("precision") != "int8"]
    rows = ledger([*names, *{cat[n].builds_on for n in names}])
    if len(rows) == 0 or "fps" not in rows:
        return pd.DataFrame(columns=["step", "builds_on", "fps", "speedup", "low", "high", "paid"])
    by = {r["step"]: r for r in rows.to_dict("records") if r.get("status", "ok") in ("ok", None)
          and r.get("fps") == r.get("fps") and r.get("above_decode_ceiling") is not True}
    out = []
    for n in names:
        me, on = by.get(n), by.get(cat[n].builds_on)
        if me is None or on is None or not on["fps"] > 0:
            continue
        x = me["fps"] / on["fps"]
        ci = ratio_interval(me, on)
        low, high = ci if ci else (x, x)
        out.append({"step": n, "builds_on": cat[n].builds_on, "fps": me["fps"], "speedup": x, "low": low,
                    "high": high, "paid": (low > 1.0) if ci else (x > MIN_GAIN)})
    return pd.DataFrame(out).sort_values("fps", ascending=False).reset_index(drop=True) if out else \
        pd.DataFrame(columns=["step", "builds_on", "fps", "speedup", "low", "high", "paid"])


def _conflicts(flags: dict, changed: dict) -> bool:
    if any(k in flags and flags[k] != v for k, v in changed.items()):
        return True
    from source_code.options import refused

    return refused({**flags, **changed}) is not None


def step(mode: str = MODE, *, knee: pd.Series | None = None) -> Step:
    """The optimized step: :func:`labbook.interval.base`'s flags, plus each lever that paid here
    (see the module doc), plus the knee's interval; a cumulative step built on the knee's row."""
    cat = catalogue(mode)
    if knee is None:
        rows = interval_rows(mode)
        knee = accuracy_floor(rows, accuracy=FLOOR_ACCURACY)
    flags = dict(cat[base(mode)].flags)
    for r in gains(mode).itertuples():
        if not r.paid or r.step == base(mode):
            continue
        # what it sets over the base (fp16 brings the GPU options of the step it builds on too)
        changed = {k: v for k, v in change_of(cat[r.step].flags, cat[base(mode)].flags).items() if v is not None}
        if not _conflicts(flags, changed):
            flags.update(changed)
    k = int(knee["interval"])
    if k > 1:
        flags["interval"] = k
    return Step(NAME, flags, str(knee["step"]), "cumulative")


def paid_levers(mode: str = MODE) -> list[str]:
    """The steps whose lever paid here (see the module doc)."""
    g = gains(mode)
    return [] if g.empty else list(g.loc[g["paid"], "step"])
