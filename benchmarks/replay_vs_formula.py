"""Benchmark: the replay's prediction (labkit.judge.replay) against today's formula (labkit.judge.whatif,
through ``labkit.advise``) on every recorded known-answer profile whose fix was measured.

For each: the program, its class (the first line of its docstring), the formula's prediction for the
fix's finding (``tests/known_answers.py: fix_finding``) with its basis, the replay of the same
finding's lever (``labkit.judge.replay.lever_for``) with its range, and what the fix measured, with each
prediction's ratio to it. A finding the replay has no lever for says so (no number).

    python benchmarks/replay_vs_formula.py [--json] [--live all|a,b --repeats 3 --out DIR]

By default it reads only files in the repository (no profiling, no GPU): tests/fixtures/known_switches,
tests/fixtures/known_gpu (their known_answers*.jsonl) and tests/fixtures/known_paths (fed_pool, its
fix measured 1.954x in that CI run: tests/fixtures/README.md). ``--live`` adds the CPU programs of
tests/programs/known (``all``, or names), each profiled and measured here as the known-answer harness
does (tests/known_answers.py: profile, measure; about 20 s each on the 2-core VM), profiles under DIR.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the known-answer harness, tests/known_answers.py, imported by its name
import known_answers as ka  # noqa: E402
FIXTURES = ROOT / "tests" / "fixtures"
FED_POOL_CI_MEASURED = 1.954
"""fed_pool's fix as measured in the CI run that profiled known_paths/fed_pool.ci.nsys2022.4.sqlite
(tests/fixtures/README.md, known_paths/); its noise was not kept."""


def recorded() -> list[dict]:
    """Every recorded known-answer profile with its fix's measured speed-up: program, args, path,
    measured_x, noise."""
    out = []
    for folder, name in (("known_switches", "known_answers.jsonl"), ("known_gpu", "known_answers.h200.jsonl")):
        for line in (FIXTURES / folder / name).read_text().splitlines():
            r = json.loads(line)
            out.append({"program": r["program"], "args": r.get("args", []), "path": FIXTURES / folder / r["profile"],
                        "measured_x": r["measured_x"], "noise": r.get("noise", 0.0)})
    out.append({"program": "fed_pool", "args": [], "path": FIXTURES / "known_paths" / "fed_pool.ci.nsys2022.4.sqlite",
                "measured_x": FED_POOL_CI_MEASURED, "noise": 0.0})
    return out


def program_class(ka, program: str) -> str:
    """The program's class: its docstring's first sentence, without its letter."""
    doc = (ka.KNOWN / ka.PROGRAMS[program].script).read_text().split('"""')[1].strip()
    first = doc.split(":")[0].split(".")[0]
    return first.split(") ", 1)[-1] if first.startswith("(") else first


def row(ka, rec: dict, rep=None) -> dict:
    """One table row for a recorded profile (see the module docstring); ``rep``: the profile, loaded
    (default: from ``rec["path"]``)."""
    import labkit
    from labkit.judge.graph import run_graph
    from labkit.judge.replay import lever_for, predict

    prog = ka.PROGRAMS[rec["program"]]
    rep = rep if rep is not None else labkit.load_report(rec["path"])
    adv = labkit.advise(rep, **prog.advise)
    fix = ka.fix_finding(prog, adv)
    meas = float(rec["measured_x"])
    out = {"program": "-".join([rec["program"]] + [a.strip("-") for a in rec["args"]]),
           "class": program_class(ka, rec["program"]), "lever": fix["lever"] if fix else "(none)",
           "stage": (fix.get("stage") or "") if fix else "", "formula_x": None, "basis": "",
           "replay_x": None, "replay_low": None, "replay_high": None, "measured_x": meas, "noise": rec["noise"],
           "recorded_ms": None, "replayed_ms": None}
    if fix is None:
        return out
    out["formula_x"], out["basis"] = round(float(fix["predicted_speedup"]), 3), fix.get("basis", "")
    graph = run_graph(rep, adv.attrs["window"])
    lever = lever_for(rep, graph, fix, skip_every=prog.advise.get("skip_every"))
    if lever is not None:
        p = predict(graph, lever)
        out.update(replay_x=round(p.speedup, 3), replay_low=round(p.low, 3), replay_high=round(p.high, 3),
                   recorded_ms=round(p.recorded_ms, 1), replayed_ms=round(p.replayed_ms, 1))
    return out


def _off(x, meas) -> str:
    return "" if x is None else f"{100 * (x / meas - 1):+.0f} %"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON row per program instead of the table")
    ap.add_argument("--live", default="", help="also profile and measure these CPU programs here ('all', or a,b)")
    ap.add_argument("--repeats", type=int, default=3, help="plain runs of each variant (--live)")
    ap.add_argument("--out", default="reports/replay-vs-formula", help="where --live keeps its profiles")
    args = ap.parse_args(argv)
    rows = [row(ka, r) for r in recorded()]
    live = ka.CPU_PROGRAMS if args.live == "all" else [n for n in args.live.split(",") if n]
    for name in live:
        measured = ka.measure(name, repeats=args.repeats)
        rep = ka.profile(name, Path(args.out) / name)
        rows.append(row(ka, {"program": name, "args": [], "path": None, "measured_x": measured["speedup"],
                             "noise": measured["noise"]}, rep))
        if not args.json:
            print(f"# {name}: measured {measured['speedup']:.2f}x", file=sys.stderr, flush=True)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"{'program':29} {'class':44} {'lever':14} {'formula':>15} {'replay [range]':>24} {'measured':>9}")
    for r in rows:
        f = f"{r['formula_x']:.2f}x {r['basis'][:5]} {_off(r['formula_x'], r['measured_x'])}" if r["formula_x"] else "-"
        p = (f"{r['replay_x']:.2f}x [{r['replay_low']:.2f}-{r['replay_high']:.2f}] {_off(r['replay_x'], r['measured_x'])}"
             if r["replay_x"] is not None else "no lever")
        print(f"{r['program']:29} {r['class'][:44]:44} {r['lever']:14} {f:>15} {p:>24} {r['measured_x']:>8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
