#!/usr/bin/env python
"""Record the lab's reference in budgeted calls: run by step, resume from a tarball, return the state.

    python scripts/record_reference.py prepare [--state-dir .record]
    python scripts/record_reference.py run --budget 480 --out $OUT [--mode record] [--machine h100]
        [--steps a,b,...] [--state-dir .record] [--work DIR]
    python scripts/record_reference.py fetch FOLDER [--state-dir .record] [--dest reports/reference]

``prepare`` (here, in the git checkout): writes ``STATE_DIR/commit.json`` (the commit and whether
the tree is dirty), which travels with the state folder to a machine that has no ``.git``.

``run`` (on the machine that records): restores its state from ``STATE_DIR/state.tgz`` and
``STATE_DIR/keep.tgz`` when its work folder is new, then runs the plan's steps one by one: the
catalogue's (``labbook.runs.run_step`` with their flags, ``labbook.steps``), then notebook 06's
and 08's, which build on what ran before and are resolved when their turn comes (:func:`late_steps`:
the interval sweep on ``batch<N>``, ``optimized``, ``processes<n>``, ``ranks<n>``), until the next step's
estimated time (the longest step so far) no longer fits ``--budget`` seconds. Each call runs
at least one pending step. A step that fails or is skipped is a ledger row, and the driver goes on; a step
started in two calls that never finished is a failed row. Before each step and at the end it
writes to ``--out``:

- ``state.tgz`` (at most 16 MiB): progress, ledger, results, the sample video, the model and
  compile caches (the caches and the video are left out, largest group last, when they do not fit);
- ``keep.tgz``: the nsys reports (``.nsys-rep`` and ``.sqlite``) of the baseline and of the
  fastest profiled step so far;
- ``reference.tgz``: the partial reference folder (``scripts/save_reference.py``'s files,
  ``provenance.json`` with the commit, and the kept reports), as ``<machine>/...``;
- ``record.log``: what this call did; its last line says ``complete`` or how many steps remain.

``fetch`` (here, after each call): copies ``state.tgz`` and ``keep.tgz`` from the call's returned
files into the state folder, and unpacks ``reference.tgz`` into ``reports/reference/``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from labkit.paths import atomic_write, hold_lock

ROOT = Path(__file__).resolve().parents[1]
MAX_STATE = 16 * 2**20
MAX_ATTEMPTS = 2


def _log(out: Path, text: str) -> None:
    print(text, flush=True)
    with open(out / "record.log", "a") as f:
        f.write(text + "\n")


def commit_info(state_dir: Path) -> dict:
    """The commit recorded by ``prepare``, else git's answer here, else unknown (and why)."""
    saved = state_dir / "commit.json"
    if saved.exists():
        return json.loads(saved.read_text())
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True, check=True).stdout.strip())
        return {"commit": sha, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None, "note": "no git here and no commit.json: run `prepare` in the checkout"}


def _tar(path: Path, members: list[tuple[Path, str]]) -> int:
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for src, arc in members:
            if src.exists():
                tar.add(src, arcname=arc)
    os.replace(tmp, path)
    return path.stat().st_size


def write_state(work: Path, out: Path, mode: str) -> list[str]:
    """``out/state.tgz`` of at most 16 MiB; returns the groups left out to fit."""
    from labbook.video import sample_path

    video = sample_path(mode)
    groups = [
        ("progress, ledger, results", [(work / "progress.json", "progress.json"),
                                       (work / "reports" / "ledger.jsonl", "reports/ledger.jsonl"),
                                       (work / "reports" / "results", "reports/results")]),
        ("sample video", [(video, f"data/{video.name}"), (video.with_suffix(".gt.csv"), f"data/{video.stem}.gt.csv")]),
        ("model cache", [(work / "cache" / "backends", "cache/backends")]),
        ("compile cache", [(work / "cache" / "inductor", "cache/inductor")]),
    ]
    kept: list = []
    dropped = [name for name, _ in groups]
    for name, members in groups:
        if _tar(out / "state.tgz", kept + members) > MAX_STATE and kept:
            break
        kept += members
        dropped.remove(name)
    _tar(out / "state.tgz", kept)
    return dropped


def restore(state_dir: Path, work: Path) -> bool:
    """Unpack ``state.tgz`` and ``keep.tgz`` into a new work folder; True when state was restored."""
    from labbook.settings import DATA

    if (work / "progress.json").exists() or not (state_dir / "state.tgz").exists():
        return False
    with tarfile.open(state_dir / "state.tgz") as tar:
        for m in tar.getmembers():
            if m.name.startswith("data/"):
                target = DATA / m.name.removeprefix("data/")
                if not target.exists():  # a video already here is the user's: never overwritten
                    DATA.mkdir(parents=True, exist_ok=True)
                    tar.extract(m, DATA.parent, filter="data")
            else:
                tar.extract(m, work, filter="data")
    if (state_dir / "keep.tgz").exists():
        with tarfile.open(state_dir / "keep.tgz") as tar:
            tar.extractall(work / "keep", filter="data")
        profiles = work / "reports" / "profiles"
        profiles.mkdir(parents=True, exist_ok=True)
        for f in (work / "keep").iterdir():
            shutil.copy2(f, profiles / f.name)
    return True


def _latest(profiles: Path, step: str, suffix: str) -> Path | None:
    hits = sorted(profiles.glob(f"{step}-*{suffix}"))
    return hits[-1] if hits else None


def key_steps(work: Path) -> list[str]:
    """The baseline and the fastest ok step that has a profile here."""
    from labkit.bench.ledger import Ledger

    profiles = work / "reports" / "profiles"
    rows = [r for r in Ledger(work / "reports" / "ledger.jsonl").rows() if r.get("status", "ok") == "ok"]
    profiled = [r for r in rows if _latest(profiles, r["step"], ".nsys-rep") and r.get("fps")]
    best = max(profiled, key=lambda r: r["fps"], default=None)
    return list(dict.fromkeys(s for s in ("baseline", best and best["step"]) if s and _latest(profiles, s, ".nsys-rep")))


def write_keep(work: Path, out: Path) -> list[str]:
    keep = work / "keep"
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    steps = key_steps(work)
    for step in steps:
        for suffix in (".nsys-rep", ".sqlite"):
            src = _latest(work / "reports" / "profiles", step, suffix)
            if src:
                shutil.copy2(src, keep / src.name)
    files = sorted(keep.iterdir())
    if _tar(out / "keep.tgz", [(f, f.name) for f in files]) > MAX_STATE:
        # the SQLite exports are made again from the .nsys-rep (nsys export) where they do not fit
        for f in files:
            if f.suffix == ".sqlite":
                f.unlink()
        if _tar(out / "keep.tgz", [(f, f.name) for f in sorted(keep.iterdir())]) > MAX_STATE:
            print(f"record_reference: keep.tgz is over 16 MiB ({', '.join(steps)}): it will not come back from "
                  "the device; lower the frames of the record profile", file=sys.stderr)
    return steps


def write_reference(work: Path, out: Path, *, machine: str, provenance: dict) -> str:
    """The partial reference folder, tarred to ``out/reference.tgz``; returns a one-line note."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import save_reference

    ref = work / "reference"
    shutil.rmtree(ref, ignore_errors=True)
    note = "saved"
    try:
        rc = save_reference.main([machine, "--reports", str(work / "reports"), "--dest", str(ref), "--overwrite"])
        note = "saved" if rc == 0 else f"save_reference exited {rc}"
    except Exception as exc:  # noqa: BLE001 - a partial ledger may not make a table yet; the call goes on
        note = f"save_reference failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    folder = ref / machine
    folder.mkdir(parents=True, exist_ok=True)
    for f in (work / "keep").glob("*.nsys-rep"):  # beside save_reference's <step>.sqlite (trimmed when large)
        shutil.copy2(f, folder / f"{f.name.split('-')[0]}.nsys-rep")
    (folder / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    members = [(f, f"{machine}/{f.name}") for f in sorted(folder.iterdir())]
    if _tar(out / "reference.tgz", members) > MAX_STATE:
        members = [(f, a) for f, a in members if not f.name.endswith(".nsys-rep")]
        _tar(out / "reference.tgz", members)
        note += "; the kept reports are in keep.tgz only (reference.tgz would pass 16 MiB)"
    return note


def late_steps(mode: str) -> list[str]:
    """Notebook 06's and 08's steps, in the notebooks' order: each builds on ledger rows written
    before it (the interval sweep on ``batch<N>``, ``optimized`` on the knee, the scale-out steps on
    the fastest step within the floor), so :func:`run_late` resolves it only when its turn comes."""
    from labbook.settings import settings
    from labbook.steps import SCALE_OUT

    s = settings(mode)
    return [*(f"interval{k}" for k in sorted({*s.intervals, s.interval})), "optimized",
            f"processes{SCALE_OUT}", f"ranks{SCALE_OUT}"]


def run_late(name: str, mode: str):
    """Run one of :func:`late_steps` as its notebook does; returns its ``labbook.Outcome``."""
    from labbook import interval, optimize
    from labbook.reference import fastest
    from labbook.runs import run_scaled, run_step
    from labbook.settings import settings
    from labbook.steps import flags, recorded_options, scale_out, scale_out_candidates

    if name.startswith("interval"):  # 06: the sweep, profiled at the mode's interval
        k, on = int(name.removeprefix("interval")), interval.base(mode)
        return run_step(name, builds_on=on, kind="sweep", profile=k == settings(mode).interval, mode=mode,
                        **{**flags(on, mode), "interval": k})
    if name == optimize.NAME:  # 06: the levers that paid, at the knee's interval
        best = optimize.step(mode)
        return run_step(best.name, kind=best.kind, builds_on=best.builds_on, mode=mode, **best.flags)
    start = fastest(scale_out_candidates(mode), accuracy_floor=interval.floor(mode))  # 08
    return run_scaled(scale_out(start, recorded_options(start))[name], mode=mode)


def _one_at_a_time(work: Path) -> int:
    work.parent.mkdir(parents=True, exist_ok=True)
    try:
        return hold_lock(work.parent / f".{work.name}.lock", what=f"record_reference on {work}")
    except Exception as exc:  # LockedError, OutputError: one line
        raise SystemExit(f"record_reference: {exc}") from None


def run(args) -> int:
    work, out, state_dir = args.work.resolve(), args.out.resolve(), args.state_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.update({"LABKIT_REPORTS": str(work / "reports"), "LABKIT_CACHE_DIR": str(work / "cache"),
                       "TORCHINDUCTOR_CACHE_DIR": str(work / "cache" / "inductor"), "LABKIT_MODE": args.mode})
    os.environ.pop("LABKIT_STRICT", None)  # a failed step is a ledger row, never the end of the call
    t0 = time.monotonic()
    _lock = _one_at_a_time(work)  # noqa: F841 - held to the end: a second call at once is refused in one line
    restored = restore(state_dir, work)
    work.mkdir(parents=True, exist_ok=True)
    from labkit.bench.ledger import Ledger, not_run

    from labbook.runs import run_step
    from labbook.settings import LEDGER
    from labbook.steps import catalogue

    steps, late = catalogue(args.mode), late_steps(args.mode)
    plan = args.steps.split(",") if args.steps else [*steps, *late]
    unknown = [s for s in plan if s not in steps and s not in late]
    if unknown:
        print(f"record_reference: unknown step(s) {', '.join(unknown)}: choose from {', '.join([*steps, *late])}",
              file=sys.stderr)
        return 2
    progress_file = work / "progress.json"
    progress = json.loads(progress_file.read_text()) if progress_file.exists() else \
        {"done": [], "attempts": {}, "seconds": {}, "calls": 0}
    progress["calls"] += 1
    provenance = {**commit_info(state_dir), "mode": args.mode, "machine": args.machine, "plan": plan}
    _log(out, f"call {progress['calls']}: {'state restored from ' + str(state_dir) if restored else 'work folder ' + str(work)}; "
              f"budget {args.budget:.0f} s; commit {provenance.get('commit')}")

    def save() -> list[str]:
        """Progress, state.tgz and keep.tgz in ``out``: what comes back if the call is killed."""
        atomic_write(progress_file, json.dumps(progress, indent=1), overwrite=True)  # never half a file
        kept = write_keep(work, out)
        dropped = write_state(work, out, args.mode)
        if dropped:
            _log(out, f"state.tgz: left out {', '.join(dropped)} (16 MiB at most)")
        return kept

    ran = 0
    for name in plan:
        if name in progress["done"]:
            continue
        tries = progress["attempts"].get(name, 0)
        labels = steps[name].labels() if name in steps else {}
        if tries >= MAX_ATTEMPTS:
            Ledger(LEDGER).append(not_run(name, status="failed", reason=f"started in {tries} calls and never finished "
                                          "within a call's time: give it a call of its own", labels=labels))
            progress["done"].append(name)
            _log(out, f"{name}: failed (never finished in {tries} calls)")
            continue
        estimate = max(progress["seconds"].values(), default=0.0)
        elapsed = time.monotonic() - t0
        if ran and elapsed + estimate > args.budget:
            _log(out, f"stopping before {name}: {elapsed:.0f} s used, the longest step took {estimate:.0f} s, "
                      f"budget {args.budget:.0f} s")
            break
        progress["attempts"][name] = tries + 1
        save()
        s0 = time.monotonic()
        try:
            outcome = (run_step(name, mode=args.mode, profile=steps[name].kind != "sweep", **dict(steps[name].flags))
                       if name in steps else run_late(name, args.mode))
            status, why = outcome.status, outcome.reason or ""
        except Exception as exc:  # noqa: BLE001 - never stop on a failed step: it becomes a ledger row
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            Ledger(LEDGER).append(not_run(name, status="failed", reason=why, labels=labels))
            status = "failed"
        progress["seconds"][name] = round(time.monotonic() - s0, 1)
        progress["done"].append(name)
        ran += status != "skipped"  # a skipped step costs nothing: the next one still runs
        _log(out, f"{name}: {status} in {progress['seconds'][name]:.0f} s{' (' + why + ')' if why else ''}")

    remaining = [s for s in plan if s not in progress["done"]]
    kept = save()
    provenance.update(complete=not remaining, steps_done=progress["done"], steps_remaining=remaining,
                      calls=progress["calls"], kept_reports=kept,
                      written=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    note = write_reference(work, out, machine=args.machine, provenance=provenance)
    _log(out, f"reference: {note}; kept reports of {', '.join(kept) or 'no step'}")
    _log(out, "complete: every step has a ledger row" if not remaining else
         f"{len(remaining)} of {len(plan)} steps remain: make another call with this state")
    return 0


def prepare(args) -> int:
    args.state_dir.mkdir(parents=True, exist_ok=True)
    (args.state_dir / "commit.json").unlink(missing_ok=True)
    info = commit_info(args.state_dir)
    atomic_write(args.state_dir / "commit.json", json.dumps(info) + "\n", overwrite=True)
    print(f"record_reference: {args.state_dir / 'commit.json'}: {info}")
    return 0


def fetch(args) -> int:
    src = Path(args.folder)
    if not (src / "state.tgz").exists():
        print(f"record_reference: no state.tgz in {src}: pass the folder the call's files were copied to", file=sys.stderr)
        return 1
    args.state_dir.mkdir(parents=True, exist_ok=True)
    for name in ("state.tgz", "keep.tgz"):
        if (src / name).exists():
            shutil.copy2(src / name, args.state_dir / name)
    if (src / "reference.tgz").exists():
        with tarfile.open(src / "reference.tgz") as tar:
            names = tar.getnames()
            tar.extractall(args.dest, filter="data")
        print(f"record_reference: unpacked {len(names)} files into {args.dest}")
    if (src / "record.log").exists():
        print((src / "record.log").read_text().rstrip().splitlines()[-1])
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument("--state-dir", type=Path, default=ROOT / ".record", help="where state.tgz, keep.tgz, commit.json lie")
    sub.add_parser("prepare", parents=[state], help="record the commit (in the checkout)")
    r = sub.add_parser("run", parents=[state], help="run steps within a budget")
    r.add_argument("--budget", type=float, required=True, help="seconds of steps in this call")
    r.add_argument("--out", type=Path, default=os.environ.get("OUT"), help="where state and reference go (default $OUT)")
    r.add_argument("--mode", default="record", choices=["small", "full", "record"])
    r.add_argument("--machine", default="h100", help="the reference folder's name")
    r.add_argument("--steps", default="", help="comma-separated steps: the catalogue's, then 06's and 08's "
                   "(default: all, in that order)")
    r.add_argument("--work", type=Path, default=ROOT / ".record" / "work", help="reports, caches, progress")
    f = sub.add_parser("fetch", parents=[state], help="take a call's returned files (here)")
    f.add_argument("folder")
    f.add_argument("--dest", type=Path, default=ROOT / "reports" / "reference")
    args = p.parse_args(argv)
    if args.cmd == "run" and args.out is None:
        p.error("--out is required where $OUT is unset")
    return {"prepare": prepare, "run": run, "fetch": fetch}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
