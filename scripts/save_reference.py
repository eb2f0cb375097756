#!/usr/bin/env python
"""Save a finished lab run as reference results: reports/ -> reports/reference/<machine>/.

    make lab && python scripts/save_reference.py h100 [--reports reports] [--dest reports/reference]

Copies the ledger, the speed-up table and plots, the notebooks' timings (``lab_timings.json``,
from run_lab), the doctor's output, and the SQLite exports of the baseline, ``queues`` and the
fastest step that was profiled (swept steps have no profile), a few hundred KB to a few MB each,
and draws their timelines; an export over ``--max-mb`` is trimmed to ``--trim-batches`` steady-state batches
(``labkit.report.reader.trim_export``). ``labkit.speedup_table("reports/")`` reads every ``ledger.jsonl`` under reports/, so a
GPU reference saved here appears as its own column beside this machine's. A CPU reference is best
saved with ``--ledger-name ledger.reference.jsonl``: the same CPU model elsewhere would otherwise
share its column.

The saved ledger holds no absolute path of the machine that made it: paths under the reports
folder become relative to it (``profiles/baseline-....nsys-rep``), paths under the project
relative to the project (``source_code/detect_video.py``), the Python interpreter ``python``, and
any other absolute path its file name (:func:`portable`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from labkit.env import reports_dir

ROOT = Path(__file__).resolve().parents[1]


def portable(value, *, reports: Path, root: Path = ROOT, python: str = sys.executable):
    """``value`` (a ledger row or any part of it) with every absolute path made machine-neutral:
    relative to ``reports``, else to ``root``; the interpreter as ``python``; else the file name."""
    if isinstance(value, dict):
        return {k: portable(v, reports=reports, root=root, python=python) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, reports=reports, root=root, python=python) for v in value]
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    if value == python:
        return "python"
    path = Path(value)
    for base in (Path(reports).resolve(), Path(root).resolve()):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return path.name


def save_ledger(src: Path, dst: Path, *, reports: Path) -> None:
    """Copy the ledger at ``src`` to ``dst`` line by line, each row made :func:`portable`
    (corrupt lines are skipped, as ``labkit.Ledger`` reads them)."""
    from labkit import Ledger

    rows = [portable({k: v for k, v in row.items() if k not in ("ledger", "line")}, reports=reports)
            for row in Ledger(src).rows()]
    dst.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


def _latest_profile(profiles: Path, step: str) -> Path | None:
    hits = sorted(profiles.glob(f"{step}-*.sqlite"))
    return hits[-1] if hits else None


def _config(rows, step: str, key: str, default: int) -> int:
    """The step's latest recorded value of a flag (warm-up frames, batch size)."""
    col = f"config.{key}"
    values = rows.loc[rows["step"] == step, col].dropna() if col in rows else []
    return int(values.iloc[-1]) if len(values) else default


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("machine", help="folder name under reports/reference/, e.g. h100")
    p.add_argument("--reports", type=Path, default=reports_dir(ROOT / "reports"))
    p.add_argument("--dest", type=Path, default=ROOT / "reports" / "reference",
                   help="the folder of reference machines (the results go to DEST/MACHINE)")
    p.add_argument("--ledger-name", default="ledger.jsonl")
    p.add_argument("--overwrite", action="store_true", help="replace an existing reference ledger (and the files saved beside it)")
    p.add_argument("--max-mb", type=float, default=4.0, help="exports larger than this are trimmed")
    p.add_argument("--trim-batches", type=int, default=12, help="batches kept when trimming an export")
    args = p.parse_args(argv)

    import matplotlib
    matplotlib.use("Agg")
    import labkit
    from labkit.report.trim import trim_export

    src, dst = args.reports, args.dest / args.machine
    ledger = src / "ledger.jsonl"
    if not ledger.exists():
        print(f"save_reference: no {ledger}: run the lab first (make lab)", file=sys.stderr)
        return 1
    if (dst / args.ledger_name).exists() and not args.overwrite:
        print(f"save_reference: {dst / args.ledger_name} exists; pass --overwrite to replace it", file=sys.stderr)
        return 1
    dst.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in dst.iterdir()}
    save_ledger(ledger, dst / args.ledger_name, reports=src)
    written = [args.ledger_name]
    copies = {name: name for name in ("speedup.md", "speedup.png", "fps_vs_map50.png", "stages.png")}
    copies["notebooks/timings.json"] = "lab_timings.json"
    for name, target in copies.items():
        if (src / name).exists():
            shutil.copy2(src / name, dst / target)
            written.append(target)
    doctor = subprocess.run([sys.executable, "-m", "labkit", "doctor", "--probe"], capture_output=True, text=True)
    (dst / "doctor.txt").write_text(doctor.stdout + doctor.stderr)
    written.append("doctor.txt")

    rows = labkit.Ledger(ledger).read()
    table = labkit.speedup_table(ledger)
    # the fastest step that has a profile (swept steps, such as the tracker intervals, have none)
    ranked = table.speedup.iloc[:, 0].dropna().sort_values(ascending=False, kind="stable").index
    fastest = next((s for s in ranked if _latest_profile(src / "profiles", s)), None)
    for step in dict.fromkeys(s for s in ("baseline", "queues", fastest) if s):
        db = _latest_profile(src / "profiles", step)
        if db is None:
            print(f"save_reference: step '{step}' has no profile under {src / 'profiles'}; no export kept")
            continue
        rep = labkit.load_report(db)
        warm, batch = _config(rows, step, "warmup", 0), _config(rows, step, "batch_size", 1)
        target = dst / f"{step}.sqlite"
        target.unlink(missing_ok=True)
        if db.stat().st_size > args.max_mb * 2**20:
            # a long GPU run exports tens of MB: keep a steady-state slice of it
            start, end = labkit.steady_window(rep, warmup=-(-warm // batch), count=args.trim_batches)
            trim_export(db, target, start, end)
            print(f"save_reference: {target.name}: {args.trim_batches} batches of {db.name} "
                  f"({db.stat().st_size / 2**20:.1f} MB -> {target.stat().st_size / 2**20:.1f} MB)")
        else:
            shutil.copy2(db, target)
        fig = labkit.plot_timeline(rep, window=labkit.steady_window(rep, warmup=-(-warm // batch), count=3))
        fig.savefig(dst / f"timeline_{step}.png", dpi=100)
        written += [target.name, f"timeline_{step}.png"]
    print(f"save_reference: wrote {dst} ({', '.join(written)})")
    replaced = sorted(before & set(written))
    if replaced:
        print(f"save_reference: replaced files that were there before: {', '.join(replaced)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
