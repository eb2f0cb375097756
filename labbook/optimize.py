"""The end of the arc: one optimized pipeline, "the best within the accuracy floor", built from
what each lever measured on this machine (notebook 06 runs it; 07 and 08 build on it).

Every catalogue step that changes one thing over the step it builds on (the cumulative path's
``queues`` and ``no_osd``, the alternatives, INT8 over its FP32 counterpart) is judged by its
speed-up and that speed-up's 95 % interval (where the rows have one; else the usual noise,
``labkit.judge.advice.MIN_GAIN``):

- **paid**: faster beyond the noise (the interval's low end above 1.0): its change is taken;
- **cost**: slower beyond the noise (the high end below 1.0): a change of the cumulative path is
  dropped, unless a lever that is taken needs it (:data:`NEEDS`), and then the decision says so;
- **noise**: neither: left as the path has it.

INT8 is taken only when it paid *and* its MOTA is within the floor (``labbook.interval.floor``);
the decision shows both figures. The paid changes are combined fastest first, each unless it
conflicts with what is already set (two backends or devices) or the application refuses it with
what is set (``source_code.options.refused``: a torch-only option on another backend,
``--compile`` with ``--cuda-graphs``). The interval is the knee's, so the step stays within the
floor by construction, and its own MOTA is checked against the floor once it ran. Rows faster than
their own decoding are no measurement and are left out.
"""
from __future__ import annotations

import pandas as pd
from labkit.judge.advice import MIN_GAIN

from labbook.interval import FLOOR_ACCURACY, accuracy_floor, base, interval_rows, within_floor
from labbook.predict import change_of, ratio_interval
from labbook.reference import fastest, ledger
from labbook.settings import MODE
from labbook.steps import Step, catalogue
from source_code.stages import DETECTOR_STAGES

NAME = "optimized"
NEEDS = {}
"""option -> the options that need it set (none in this application: batching, the backends and
the interval all run with or without ``--queues``); a dropped change that a taken one needs stays."""
COLUMNS = ["step", "builds_on", "fps", "speedup", "low", "high", "verdict", "mota", "decision", "why"]


def gains(mode: str = MODE) -> pd.DataFrame:
    """Each catalogue step that changes one thing over the step it builds on (not a sweep value)
    and ran here, with its speed-up over that step, the interval and ``verdict`` (paid, cost or
    noise: see the module doc), and its MOTA; fastest first."""
    cat = catalogue(mode)
    names = [n for n, st in cat.items() if st.builds_on and st.kind in ("cumulative", "alternative")]
    rows = ledger([*names, *{cat[n].builds_on for n in names}])
    if len(rows) == 0 or "fps" not in rows:
        return pd.DataFrame(columns=COLUMNS[:8])
    by = {r["step"]: r for r in rows.to_dict("records") if r.get("status", "ok") in ("ok", None)
          and r.get("fps") == r.get("fps") and r.get("above_decode_ceiling") is not True}
    out = []
    for n in names:
        me, on = by.get(n), by.get(cat[n].builds_on)
        if me is None or on is None or not on["fps"] > 0:
            continue
        x = me["fps"] / on["fps"]
        ci = ratio_interval(me, on)
        low, high = ci if ci else (x / MIN_GAIN, x * MIN_GAIN)
        verdict = "paid" if low > 1.0 else "cost" if high < 1.0 else "noise"
        out.append({"step": n, "builds_on": cat[n].builds_on, "fps": me["fps"], "speedup": x, "low": low,
                    "high": high, "verdict": verdict, "mota": me.get("mota")})
    if not out:
        return pd.DataFrame(columns=COLUMNS[:8])
    return pd.DataFrame(out).sort_values("fps", ascending=False).reset_index(drop=True)


def _refused(flags: dict, changed: dict) -> str | None:
    """Why ``changed`` cannot join ``flags`` (another value already set, or the application refuses
    the two together), or None."""
    clash = [k for k, v in changed.items() if k in flags and flags[k] != v]
    if clash:
        return f"conflicts with {', '.join(f'{k}={flags[k]!r}' for k in clash)}, already taken from a faster step"
    from source_code.options import refused

    pair = refused({**flags, **changed})
    return f"the application refuses {' with '.join(sorted(pair))}" if pair else None


def decisions(mode: str = MODE, *, floor: float | None = None) -> tuple[dict, pd.DataFrame]:
    """(the optimized flags before the interval, one row per lever with its ``decision``: taken,
    included (already part of a lever taken), dropped, kept, left out, and ``why``, in numbers). ``floor``: the MOTA floor INT8 must stay
    within (default: notebook 06's, :func:`labbook.interval.floor`)."""
    from labbook.interval import floor as floor_of

    cat = catalogue(mode)
    start = base(mode)
    floor = floor_of(mode) if floor is None else floor
    flags = dict(cat[start].flags)
    g = gains(mode)
    rows = []
    path = set()  # the cumulative path's changes up to START
    at = start
    while cat[at].builds_on:
        path.add(at)
        at = cat[at].builds_on
    for r in g.itertuples():
        st = cat[r.step]
        changed = change_of(st.flags, cat[st.builds_on].flags)
        figures = f"{r.speedup:.2f}x over '{r.builds_on}' (95 % interval {r.low:.2f}-{r.high:.2f}x)"
        if r.step in path:
            if r.verdict == "cost":
                needed = [k for k in changed if any(flags.get(o) for o in NEEDS.get(k, ()))]
                if needed:
                    decision, why = "kept", f"slower, {figures}, but {', '.join(needed)} is needed by a lever taken"
                else:
                    for k, v in changed.items():  # back to what it builds on
                        before = cat[st.builds_on].flags.get(k)
                        if before is None:
                            flags.pop(k, None)
                        else:
                            flags[k] = before
                    decision, why = "dropped", f"slower beyond the noise: {figures}"
            else:
                decision, why = "kept", f"on the path: {figures}" + ("" if r.verdict == "paid" else ", within noise")
            rows.append({**r._asdict(), "decision": decision, "why": why})
            continue
        if r.verdict != "paid":
            rows.append({**r._asdict(), "decision": "left out", "why": f"did not pay beyond the noise: {figures}"})
            continue
        int8 = st.flags.get("precision") == "int8"
        if int8 and (floor is None or not within_floor(r.mota, floor)):
            said = "no floor yet (run 06's sweep first)" if floor is None else (
                f"MOTA {r.mota:.3f} below the floor {floor:.3f}" if r.mota == r.mota and r.mota is not None
                else "no MOTA in its row")
            rows.append({**r._asdict(), "decision": "left out", "why": f"paid ({figures}) but {said}"})
            continue
        want = {k: v for k, v in change_of(st.flags, cat[start].flags).items() if v is not None}
        if all(flags.get(k) == v for k, v in want.items()):
            rows.append({**r._asdict(), "decision": "included",
                         "why": f"paid ({figures}); its change is part of a faster lever already taken"})
            continue
        why_not = _refused(flags, want)
        if why_not:
            rows.append({**r._asdict(), "decision": "left out", "why": f"paid ({figures}) but {why_not}"})
            continue
        flags.update(want)
        extra = f"; MOTA {r.mota:.3f} within the floor {floor:.3f}" if int8 else ""
        rows.append({**r._asdict(), "decision": "taken", "why": f"paid: {figures}{extra}"})
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "Index"]) if rows else pd.DataFrame(columns=COLUMNS)
    return flags, table


def step(mode: str = MODE, *, knee: pd.Series | None = None) -> Step:
    """The optimized step: :func:`decisions`' flags plus the knee's interval; a cumulative step
    built on the knee's row."""
    if knee is None:
        rows = interval_rows(mode)
        knee = accuracy_floor(rows, accuracy=FLOOR_ACCURACY)
    flags, _ = decisions(mode, floor=float(knee[FLOOR_ACCURACY]))
    k = int(knee["interval"])
    if k > 1:
        flags["interval"] = k
    return Step(NAME, flags, str(knee["step"]), "cumulative")


def _stage_ms(row) -> dict:
    return {k[9:]: float(v) for k, v in row.items() if k.startswith("stage_ms.") and v == v and v is not None}


def frame_ms(stage_ms: dict, *, queued: bool, cores: int) -> float:
    """A frame's time in the pipeline from its stages' times per frame (the ledger's ``stage_ms``,
    timed in-process): their sum when the stages run one after another; with queues, the slowest
    stage, and no less than their sum shared over the machine's cores."""
    times = [v for v in stage_ms.values() if v == v]
    if not times:
        return float("nan")
    return max(max(times), sum(times) / max(cores, 1)) if queued else sum(times)


def estimate(decided: pd.DataFrame, mode: str = MODE, *, knee: str | None = None, flags: dict | None = None) -> dict:
    """The estimate ``optimized`` runs under, over the knee's step ``knee`` (``run_step``'s
    ``predicted_speedup`` and ``finding``). Each lever taken changes each stage's time per frame as
    it measured from :func:`labbook.interval.base` to its own step (its chain of builds_on, the
    ledger's in-process ``stage_ms``) in the detector's stages (``DETECTOR_STAGES``: the others'
    changes between two runs are the machine's, not the lever's), applied to the knee's stage times, as if the levers were
    independent. Each path change dropped gives back what it cost, stage by stage: each stage's
    time scales as it measured from the change's own step back to the step it builds on (queues
    on 2 cores made every stage slower: the threads took turns on the cores). A frame's time is
    :func:`frame_ms`, on the knee row's cores: queued or not as the knee ran, before; as ``flags``
    say, after. Without stage times, the levers' measured speed-ups multiplied. Nothing taken or
    dropped: no estimate."""
    cat = catalogue(mode)
    g = decided.set_index("step") if len(decided) else decided  # decisions(): one row per gains() row
    start = base(mode)
    dropped = [s for s in decided.loc[decided["decision"] == "dropped", "step"] if s in cat] if len(decided) else []
    wanted = [start, knee, *decided["step"], *[cat[s].builds_on for s in dropped]]
    rows = {r["step"]: r for r in ledger(list(dict.fromkeys(wanted))).to_dict("records")} if knee else {}
    here = _stage_ms(rows.get(knee, {})) if knee else {}
    s0 = _stage_ms(rows.get(start, {}))
    scale, undo, x, parts = {}, {}, 1.0, []
    for r in decided.itertuples():
        if r.decision == "taken":
            at, chain = r.step, 1.0
            while at != start and at in g.index:
                chain *= float(g.loc[at, "speedup"])
                at = cat[at].builds_on
            x *= chain
            mine = _stage_ms(rows.get(r.step, {}))
            for k, v in mine.items():  # the detector's stages: what precision, backend and layout change
                if k in DETECTOR_STAGES and s0.get(k, 0) > 0:
                    scale[k] = scale.get(k, 1.0) * v / s0[k]
            parts.append(f"{r.step} ({chain:.2f}x over {start}" + (
                f"; 'infer' {scale['infer']:.2f} of its time" if "infer" in scale else "") + ")")
        elif r.decision == "dropped":
            x /= float(r.speedup)
            mine, before = _stage_ms(rows.get(r.step, {})), _stage_ms(rows.get(cat[r.step].builds_on, {}))
            for k, v in mine.items():  # every stage: the change's cost is the machine's time, not one stage's
                if v > 0 and before.get(k, 0) > 0:
                    undo[k] = undo.get(k, 1.0) * before[k] / v
            parts.append(f"dropping {r.step} ({1 / float(r.speedup):.2f}x" + (
                f"; 'infer' {undo['infer']:.2f} of its time" if "infer" in undo else "") + ")")
    if not parts:
        return {"predicted_speedup": None, "finding": "none: no lever taken or path change dropped over the knee"}
    if here and (scale or undo):
        queued = bool((flags or {}).get("queues"))
        was = rows.get(knee, {}).get("config.queues")
        was_queued = bool(was) and was == was  # NaN: the knee ran without queues
        c = rows.get(knee, {}).get("env.cpu_count")
        cores = int(c) if isinstance(c, (int, float)) and c == c and c >= 1 else 1
        after = {k: v * scale.get(k, 1.0) * undo.get(k, 1.0) for k, v in here.items()}
        est = frame_ms(here, queued=was_queued, cores=cores) / frame_ms(after, queued=queued, cores=cores)
        take = (lambda q: f"its slowest stage or the stages' time over {cores} cores" if q
                else "the sum of its stages' times")
        return {"predicted_speedup": round(est, 3),
                "finding": (f"the knee's stage times, scaled as the levers measured them, as if independent: "
                            f"{'; '.join(parts)}; a frame takes {take(queued)}"
                            + ("" if queued == was_queued else f" (at the knee: {take(was_queued)})"))}
    return {"predicted_speedup": round(x, 3),
            "finding": f"levers measured one by one, combined as if independent: {' x '.join(parts)}"}


def paid_levers(mode: str = MODE) -> list[str]:
    """The steps whose lever paid here (see the module doc)."""
    g = gains(mode)
    return [] if g.empty else list(g.loc[g["verdict"] == "paid", "step"])


def against_fastest(name: str = NAME):
    """One sentence checking ``name`` (``optimized``) against the fastest measured step within the
    accuracy floor (``labbook.reference.fastest`` over every lab step of the ledger, exercises left
    out): which won, each with its frames/s and 95 % interval, and whether the gap is beyond that
    interval (``labbook.predict.ratio_interval``). A sentence saying why not where ``name`` has no row."""
    from labbook.interval import floor
    from labbook.text import say

    rows = ledger()
    if not len(rows) or name not in set(rows["step"]):
        return say(f"`{name}` has no row in this ledger yet: nothing to check against the fastest step.")
    ok = rows["status"].fillna("ok").eq("ok") if "status" in rows else True
    lab_steps = rows[ok & rows["kind"].isin(["cumulative", "alternative", "sweep"])]["step"].tolist()
    fl = floor()
    top = fastest(lab_steps, accuracy_floor=fl)
    by = rows.drop_duplicates("step", keep="last").set_index("step")
    def fig(st):
        r = by.loc[st]
        return f"`{st}` {r['fps']:.1f} frames/s ({r.get('fps_ci_low', float('nan')):.1f}-{r.get('fps_ci_high', float('nan')):.1f})"
    within = f" within the MOTA floor {fl:.3f}" if fl is not None else ""
    if top == name:
        return say(f"{fig(name)} is the fastest measured step{within}.")
    ci = ratio_interval(by.loc[top].to_dict(), by.loc[name].to_dict())
    gap = ("beyond the noise" if ci and ci[0] > 1.0 else "within the noise of it" if ci else "one measurement each")
    return say(f"{fig(name)} is not the fastest measured step{within}: {fig(top)} is "
               f"({by.loc[top, 'fps'] / by.loc[name, 'fps']:.2f}x, {gap}). Build on the faster one.")
