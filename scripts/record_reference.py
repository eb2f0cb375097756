#!/usr/bin/env python
"""Record the lab's reference in budgeted calls, by a plan: run by step, resume from a tarball, return the state.

    python scripts/record_reference.py plan [--json] [--model h200|h100|cpu] [--mode record] [--steps a,b,...]
    python scripts/record_reference.py prepare [--state-dir .record] [--resume reports/reference/MACHINE]
    python scripts/record_reference.py run --out $OUT [--model h200] [--budget S] [--mode record]
        [--machine NAME] [--steps a,b,...] [--state-dir .record] [--work DIR]
    python scripts/record_reference.py fetch FOLDER [--state-dir .record] [--dest reports/reference]

``plan`` (anywhere): the calls the recording takes on a machine, from its timing model
(``labbook.record_plan``): each call's steps and modelled minutes, the total, the frames of each step.

``prepare`` (here, in the git checkout): writes ``STATE_DIR/commit.json`` (the commit and whether
the tree is dirty), which travels with the state folder to a machine that has no ``.git``. With
``--resume FOLDER`` it also puts the state of a recording committed in ``FOLDER`` into ``STATE_DIR``
(its ``record-state.tgz``, else one rebuilt from its ledger and provenance): the state folder is
git-ignored and does not outlive a session's machine, the committed folder does.

``run`` (on the machine that records): restores its state from ``STATE_DIR/state.tgz`` and
``STATE_DIR/keep.tgz`` when its work folder is new, makes the clip when the machine has none,
then runs the plan's steps one by one: the catalogue's (``labbook.runs.run_step``), then notebook
06's and 08's, resolved when their turn comes (:func:`late_steps`), while the next step's own
estimate (its timing model's seconds, scaled by what this recording measured against the model
so far) fits ``--budget`` (default: the model's call limit, 8 minutes on the H200, less the call's write-out). A step
that alone exceeds the budget runs in a call of its own. A step that fails or is skipped is a
ledger row, and the driver goes on; a step started in two calls that never finished is a failed
row. Before each step it writes ``state.tgz`` (progress, ledger, results: what comes back if the
call is killed); at the end of the call, once:

- ``state.tgz`` (at most 16 MiB): also the model and compile caches, each left out when it does not fit;
- ``keep.tgz`` (at most 16 MiB): the trimmed SQLite exports of the key profiled steps and, as they fit, their ``.nsys-rep``;
- ``reference.tgz``: the partial reference folder (``scripts/save_reference.py``'s files,
  ``provenance.json`` with the commit, and the kept reports), as ``<machine>/...``;
- ``record.log``: what this call did; the call's modelled and measured minutes; its last line
  says ``complete`` or how many steps remain.

``fetch`` (here, after each call): copies ``state.tgz`` into the state folder and ``keep.tgz`` beside
it (``.record-kept/``: the machine needs no kept report back), unpacks ``reference.tgz`` into
``reports/reference/``, puts the state without its caches beside it (``<machine>/record-state.tgz``,
a few KB, committed with the folder: what a later session resumes from), and makes the next call's
carry fit 64 MiB (the state's caches left out first), or says in one line why it cannot.
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_ATTEMPTS = 2


def _gpu_name() -> str:
    """The first GPU's name (nvidia-smi), or ``cpu`` where there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    names = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return names[0].strip() if names else "cpu"


def _folder(gpu: str) -> str:
    """The reference folder of a GPU: its model (``NVIDIA H200`` -> ``h200``), or ``cpu``."""
    import re

    m = re.search(r"\b([A-Z]{1,2}\d{2,4})\b", gpu)
    return m.group(1).lower() if m else "cpu"


def _log(out: Path, text: str) -> None:
    print(text, flush=True)
    with open(out / "record.log", "a") as f:
        f.write(text + "\n")


def commit_info(state_dir: Path) -> dict:
    """The commit that runs (:func:`labbook.record_state.commit_info`: git's over commit.json)."""
    from labbook.record_state import commit_info as read

    return read(state_dir, ROOT)


def write_reference(work: Path, out: Path, *, machine: str, provenance: dict) -> str:
    """The partial reference folder, tarred to ``out/reference.tgz``; returns a one-line note."""
    from labbook.record_state import MAX_TAR, tar

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
    if sum(f.stat().st_size for f, _ in members) > MAX_TAR:  # by construction: the reports go first
        members = [(f, a) for f, a in members if not f.name.endswith(".nsys-rep")]
        note += "; the kept reports are in keep.tgz only (reference.tgz would pass 16 MiB)"
    exports = sorted((m for m in members if m[0].suffix == ".sqlite"), key=lambda m: m[0].stat().st_size)
    left = []
    while exports and sum(f.stat().st_size for f, _ in members) > MAX_TAR:  # then the largest exports
        big = exports.pop()
        members.remove(big)
        left.append(big[0].name)
    if left:
        note += f"; left out {', '.join(left)} (reference.tgz would pass 16 MiB; its timeline stays)"
    tar(out / "reference.tgz", members)
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
    if name == optimize.NAME:  # 06: the levers that paid, at the knee's interval, under their estimate
        best = optimize.step(mode)
        _, decided = optimize.decisions(mode)
        est = optimize.estimate(decided, mode, knee=best.builds_on, flags=dict(best.flags))
        return run_step(best.name, kind=best.kind, builds_on=best.builds_on, mode=mode, **est, **best.flags)
    start = fastest(scale_out_candidates(mode), accuracy_floor=interval.floor(mode))  # 08
    return run_scaled(scale_out(start, recorded_options(start))[name], mode=mode)


class Estimates:
    """Each step's estimate from its own timing model (``labbook.record_plan``), scaled by what this
    recording measured against the model so far (bounded to 0.5-3x)."""

    def __init__(self, model: str, mode: str, plan: list[str], progress: dict):
        from labbook import record_plan as R

        self.machine = R.machine(model)
        self.mode = mode
        steps = R.planned_steps(mode, plan, gpu=self.machine.name != "cpu")
        self.model = R.estimates(self.machine, mode, steps)
        self.progress = progress

    def scale(self) -> float:
        m, s = self.progress["modelled"], self.progress["seconds"]
        done = [n for n in m if n in s and s[n] > 5]
        if not done:
            return 1.0
        return min(3.0, max(0.5, sum(s[n] for n in done) / sum(m[n] for n in done)))

    def __call__(self, name: str, *, ceiling: bool) -> float:
        """Seconds ``name`` is expected to take (with the decode-only ceiling when it is still to measure)."""
        base = self.model.get(name, max(self.model.values()))
        return (base + (self.model.get("decode_ceiling", 0.0) if ceiling else 0.0)) * self.scale()


def _one_at_a_time(work: Path) -> int:
    """A lock beside the work folder, held for the whole call: a second call at once is refused in one line."""
    from labkit.paths import hold_lock

    work.parent.mkdir(parents=True, exist_ok=True)
    try:
        return hold_lock(work.parent / f".{work.name}.lock", what=f"record_reference on {work}")
    except Exception as exc:  # LockedError, OutputError: one line
        raise SystemExit(f"record_reference: {exc}") from None


def _save_json(path: Path, data) -> None:
    """Never half a file: a temporary file and a rename (labkit.paths.atomic_write)."""
    from labkit.paths import atomic_write

    atomic_write(path, json.dumps(data, indent=1), overwrite=True)


def run(args) -> int:
    work, out, state_dir = args.work.resolve(), args.out.resolve(), args.state_dir.resolve()
    _lock = _one_at_a_time(work)  # noqa: F841 - held to the end of the call
    out.mkdir(parents=True, exist_ok=True)
    os.environ.update({"LABKIT_REPORTS": str(work / "reports"), "LABKIT_CACHE_DIR": str(work / "cache"),
                       "TORCHINDUCTOR_CACHE_DIR": str(work / "cache" / "inductor"), "LABKIT_MODE": args.mode})
    os.environ.pop("LABKIT_STRICT", None)  # a failed step is a ledger row, never the end of the call
    t0 = time.monotonic()
    from labbook.record_state import read_progress, restore, write_keep, write_state  # after the environment: labbook reads it

    restored = restore(state_dir, work)
    work.mkdir(parents=True, exist_ok=True)
    from labkit.bench.truth import ledger_ceiling
    from labkit.bench.ledger import Ledger, not_run

    from labbook import record_plan
    from labbook.runs import run_step
    from labbook.settings import LEDGER
    from labbook.steps import catalogue
    from labbook.video import sample_path, sample_video

    steps, late = catalogue(args.mode), late_steps(args.mode)
    cut = record_plan.cuts(record_plan.machine(args.model), args.mode)  # what teaches nothing there (plan's "cut")
    plan = args.steps.split(",") if args.steps else [s for s in [*steps, *late] if s not in cut]
    unknown = [s for s in plan if s not in steps and s not in late]
    if unknown:
        print(f"record_reference: unknown step(s) {', '.join(unknown)}: choose from {', '.join([*steps, *late])}",
              file=sys.stderr)
        return 2
    progress_file = work / "progress.json"
    progress = read_progress(progress_file)
    gpu = _gpu_name()
    if progress.setdefault("gpu", gpu) != gpu:  # one machine's figures per reference folder
        raise SystemExit(f"record_reference: this state was recorded on {progress['gpu']}, this machine has {gpu}: "
                         "call on the same kind of machine, or start a new recording (rm -rf .record)")
    args.machine = args.machine or _folder(gpu)
    progress["calls"] += 1
    estimate = Estimates(args.model, args.mode, plan, progress)
    machine = estimate.machine
    budget = args.budget if args.budget is not None else machine.call_limit_s - machine.call_s
    provenance = {**commit_info(state_dir), "mode": args.mode, "machine": args.machine, "gpu": gpu, "plan": plan}
    _log(out, f"call {progress['calls']}: {'state restored from ' + str(state_dir) if restored else 'work folder ' + str(work)}; "
              f"budget {budget:.0f} s of steps ({machine.name} model); commit {provenance.get('commit')}"
              f"{' (' + provenance['commit_note'] + ')' if 'commit_note' in provenance else ''}")
    modelled = machine.call_s
    if not sample_path(args.mode).exists():  # a fresh machine: the clip, made again from its seed
        c0 = time.monotonic()
        sample_video(args.mode)
        modelled += machine.clip_s
        _log(out, f"clip {sample_path(args.mode).name}: made in {time.monotonic() - c0:.0f} s")

    def save_progress() -> None:
        """Progress, ledger and results in ``out/state.tgz``: what comes back if the call is killed."""
        _save_json(progress_file, progress)
        write_state(work, out, caches=False)

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
        ceiling = ledger_ceiling(LEDGER, args.mode) is None
        need = estimate(name, ceiling=ceiling)
        elapsed = time.monotonic() - t0
        if elapsed + need > budget and (ran or need <= budget):
            _log(out, f"stopping before {name}: {elapsed:.0f} s used, {name} is estimated at {need:.0f} s, "
                      f"budget {budget:.0f} s")
            break
        progress["attempts"][name] = tries + 1
        progress["modelled"][name] = round(estimate.model.get(name, need)
                                           + (estimate.model.get("decode_ceiling", 0.0) if ceiling else 0.0), 1)
        save_progress()
        s0 = time.monotonic()
        try:
            kind = steps[name].kind if name in steps else "sweep"
            outcome = (run_step(name, mode=args.mode, profile=record_plan.profiled(name, kind, args.mode),
                                **dict(steps[name].flags))
                       if name in steps else run_late(name, args.mode))
            status, why = outcome.status, outcome.reason or ""
        except Exception as exc:  # noqa: BLE001 - never stop on a failed step: it becomes a ledger row
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            Ledger(LEDGER).append(not_run(name, status="failed", reason=why, labels=labels))
            status = "failed"
        progress["seconds"][name] = round(time.monotonic() - s0, 1)
        progress["done"].append(name)
        modelled += progress["modelled"][name]
        ran += status != "skipped"  # a skipped step costs nothing: the next one still runs
        _log(out, f"{name}: {status} in {progress['seconds'][name]:.0f} s (modelled {progress['modelled'][name]:.0f} s)"
                  f"{' (' + why + ')' if why else ''}")

    remaining = [s for s in plan if s not in progress["done"]]
    _save_json(progress_file, progress)
    kept = write_keep(work, out)
    dropped = write_state(work, out)
    if dropped:
        _log(out, f"state.tgz: left out {', '.join(dropped)} (16 MiB at most): made again where needed")
    provenance.update(complete=not remaining, steps_done=progress["done"], steps_remaining=remaining,
                      calls=progress["calls"], kept_reports=kept, call_minutes=progress["call_minutes"],
                      written=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    note = write_reference(work, out, machine=args.machine, provenance=provenance)
    _log(out, f"reference: {note}; kept reports of {', '.join(kept) or 'no step'}")
    measured = time.monotonic() - t0
    progress["call_minutes"].append({"call": progress["calls"], "modelled": round(modelled / 60, 2),
                                     "measured": round(measured / 60, 2)})
    _save_json(progress_file, progress)
    write_state(work, out)
    _log(out, f"call {progress['calls']}: modelled {modelled / 60:.2f} min, measured {measured / 60:.2f} min "
              f"({machine.name} model)")
    _log(out, "complete: every step has a ledger row" if not remaining else
         f"{len(remaining)} of {len(plan)} steps remain: make another call with this state")
    return 0


def show_plan(args) -> int:
    from labbook.record_plan import plan

    try:
        p = plan(args.model, args.mode, args.steps.split(",") if args.steps else None)
    except ValueError as exc:
        print(f"record_reference: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(p, indent=1))
        return 0
    for i, c in enumerate(p["calls"], 1):
        print(f"call {i}: {c['minutes']:.2f} min: {', '.join(c['steps'])}")
    for name, why in p["cut"].items():
        print(f"cut {name}: {why}")
    lim = p["limits"]
    print(f"total {p['total_minutes']:.2f} min in {len(p['calls'])} calls over {len(p['sessions'])} session(s) "
          f"({p['machine']} model; limits {lim['call_minutes']:g} min a call, {lim['session_minutes']:g} min of device "
          f"time a session, the state carrying over): {'fits' if p['fits'] else 'does not fit'}")
    return 0


STATE_IN_FOLDER = "record-state.tgz"
"""The recording's state (caches left out) in its committed reference folder."""


PROGRESS_IN_PROVENANCE = {"call_minutes": "call_minutes", "step_seconds": "seconds",
                          "step_modelled_seconds": "modelled"}
"""What a folder's provenance.json keeps of the state's progress.json (provenance key: progress key):
fetch writes it there, state_from_folder reads it back."""


def state_from_folder(folder: Path, state: Path) -> str:
    """Write ``state`` (a state.tgz) from the committed reference folder ``folder``: its
    ``record-state.tgz``, else progress rebuilt from ``provenance.json`` (the steps done, their
    seconds, the calls, the GPU) with ``ledger.jsonl`` (no results: each remaining step scores its
    own). Returns how; raises SystemExit in one line when the folder holds no recording."""
    if (folder / STATE_IN_FOLDER).is_file():
        shutil.copy2(folder / STATE_IN_FOLDER, state)
        return f"from {folder / STATE_IN_FOLDER}"
    try:
        prov = json.loads((folder / "provenance.json").read_text())
        done = list(prov["steps_done"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"record_reference: {folder} holds no recording to resume ({type(exc).__name__} reading "
                         "its provenance.json): name a folder that scripts/record_reference.py fetch wrote") from None
    if not (folder / "ledger.jsonl").is_file():
        raise SystemExit(f"record_reference: {folder} has no ledger.jsonl: name a folder that fetch wrote")
    progress = {"done": done, "attempts": {s: 1 for s in done}, "calls": int(prov.get("calls", 0)),
                **{mine: prov.get(key, [] if mine == "call_minutes" else {})
                   for key, mine in PROGRESS_IN_PROVENANCE.items()},
                "gpu": str(prov.get("gpu", "cpu")).split(" (")[0]}  # nvidia-smi's name, before any notes
    from labbook.record_state import tar

    with tempfile.TemporaryDirectory() as tmp:
        _save_json(Path(tmp) / "progress.json", progress)
        tar(state, [(Path(tmp) / "progress.json", "progress.json"), (folder / "ledger.jsonl", "reports/ledger.jsonl")])
    return f"rebuilt from {folder}'s provenance.json and ledger.jsonl ({len(done)} steps done, no results)"


def prepare(args) -> int:
    args.state_dir.mkdir(parents=True, exist_ok=True)
    if args.resume is not None:
        state = args.state_dir / "state.tgz"
        if state.exists():  # never replace a state this checkout already holds
            print(f"record_reference: {state} already holds a recording's state: go on with it, or move it away "
                  f"to resume from {args.resume}", file=sys.stderr)
            return 1
        print(f"record_reference: {state}: {state_from_folder(args.resume, state)}")
    (args.state_dir / "commit.json").unlink(missing_ok=True)
    info = commit_info(args.state_dir)
    _save_json(args.state_dir / "commit.json", info)
    print(f"record_reference: {args.state_dir / 'commit.json'}: {info}")
    return 0


CARRY = 64 * 2**20
"""What one device call carries at most: the working tree, ``.gpu`` and the state folder together."""


def _tree_bytes() -> int:
    """The bytes of the working tree that travel (tracked and untracked, not ignored, files)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, check=True).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        return 0
    paths = (ROOT / n.decode() for n in names if n)
    return sum(p.stat().st_size for p in paths if p.is_file())


def _without_caches(state: Path, target: Path | None = None) -> None:
    """Write ``target`` (default: ``state`` itself) as ``state`` without its model and compile
    caches (made again on the machine), atomically."""
    target = target or state
    tmp = target.with_name(target.name + ".tmp")
    with tarfile.open(state) as src, tarfile.open(tmp, "w:gz") as dst:
        for m in src.getmembers():
            if m.name != "cache" and not m.name.startswith("cache/"):
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
    os.replace(tmp, target)


def fit_carry(state_dir: Path, gpu_dir: Path) -> str:
    """Make the next call's carry (the tree, ``gpu_dir``, ``state_dir``) fit the device tool's 64 MiB:
    the state's caches go first (made again there). Returns a note, or raises SystemExit in one line."""
    fixed = _tree_bytes() + sum(f.stat().st_size for f in gpu_dir.rglob("*") if f.is_file())
    def size() -> int:
        return fixed + sum(f.stat().st_size for f in state_dir.rglob("*") if f.is_file())
    note = ""
    if size() > CARRY and (state_dir / "state.tgz").exists():
        _without_caches(state_dir / "state.tgz")
        note = "; state.tgz without its caches, to fit the next call's carry (made again there)"
    if size() > CARRY:
        raise SystemExit(f"record_reference: the next call would carry {size() / 2**20:.1f} MiB (tree, {gpu_dir.name}, "
                         f"{state_dir.name}), over the device tool's 64 MiB: carry fewer wheels in {gpu_dir.name}/wheels "
                         "(the recording needs nvtx, pycocotools and trackeval) and call again")
    return f"next call carries {size() / 2**20:.1f} MiB of 64{note}"


def _merge_provenance(provenance: Path, before: dict, state: Path) -> None:
    """The folder's provenance after a call: the call's own, with what only the state knows once the
    call's reference is written (every call's minutes, each step's seconds measured and modelled) and
    what earlier calls said that this one does not (their note)."""
    if not provenance.exists():
        return
    with tarfile.open(state) as t:
        member = t.extractfile("progress.json")
        progress = json.loads(member.read()) if member else {}
    prov = {**before, **json.loads(provenance.read_text())}
    if "note" in before and not before["note"].startswith("call "):  # an earlier call's note says which call
        prov["note"] = f"call {before.get('calls', 1)}: {before['note']}"
    for key, name in PROGRESS_IN_PROVENANCE.items():
        if name in progress:
            prov[key] = progress[name]
    provenance.write_text(json.dumps(prov, indent=1) + "\n")


def fetch(args) -> int:
    src = Path(args.folder)
    if not (src / "state.tgz").exists():
        print(f"record_reference: no state.tgz in {src}: pass the folder the call's files were copied to", file=sys.stderr)
        return 1
    args.state_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / "state.tgz", args.state_dir / "state.tgz")
    if (src / "keep.tgz").exists():  # the kept reports stay here: the machine needs none of them
        kept = args.state_dir.with_name(args.state_dir.name + "-kept")
        kept.mkdir(parents=True, exist_ok=True)
        target = kept / f"keep-{len(list(kept.glob('keep-*.tgz'))) + 1}.tgz"
        shutil.copy2(src / "keep.tgz", target)
        (args.state_dir / "keep.tgz").unlink(missing_ok=True)
        print(f"record_reference: kept reports in {target}")
    if (src / "reference.tgz").exists():
        with tarfile.open(src / "reference.tgz") as tar:
            names = tar.getnames()
            machine = names[0].split("/")[0] if names else None
            earlier = args.dest / str(machine) / "provenance.json"
            before = json.loads(earlier.read_text()) if machine and earlier.is_file() else {}
            tar.extractall(args.dest, filter="data")
        print(f"record_reference: unpacked {len(names)} files into {args.dest}")
        if machine:  # what a later session resumes from: the ignored state folder does not outlive this one
            _without_caches(src / "state.tgz", args.dest / machine / STATE_IN_FOLDER)
            _merge_provenance(args.dest / machine / "provenance.json", before, src / "state.tgz")
            print(f"record_reference: the state, for a later session, in {args.dest / machine / STATE_IN_FOLDER} "
                  "(commit it with the folder)")
    print(f"record_reference: {fit_carry(args.state_dir, args.gpu_dir)}")
    if (src / "record.log").exists():
        print((src / "record.log").read_text().rstrip().splitlines()[-1])
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument("--state-dir", type=Path, default=ROOT / ".record", help="where state.tgz, keep.tgz, commit.json lie")
    pr = sub.add_parser("prepare", parents=[state], help="record the commit (in the checkout)")
    pr.add_argument("--resume", type=Path, default=None, metavar="FOLDER",
                    help="go on with the recording committed in FOLDER (reports/reference/MACHINE)")
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--model", default="h200", choices=["h200", "h100", "cpu"],
                       help="the timing model (default h200, the machine the device tool lends)")
    model.add_argument("--mode", default="record", choices=["small", "full", "record"])
    model.add_argument("--steps", default="", help="comma-separated steps: the catalogue's, then 06's and 08's "
                       "(default: all, in that order)")
    pl = sub.add_parser("plan", parents=[model], help="the calls of the recording, from the timing model")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON")
    r = sub.add_parser("run", parents=[state, model], help="run steps within a budget")
    r.add_argument("--budget", type=float, default=None,
                   help="seconds of steps in this call (default: the model's 9 minutes less the write-out)")
    r.add_argument("--out", type=Path, default=os.environ.get("OUT"), help="where state and reference go (default $OUT)")
    r.add_argument("--machine", default=None, help="the reference folder's name (default: the GPU's model, "
                   "h100 or h200, or cpu)")
    r.add_argument("--work", type=Path, default=ROOT / ".record" / "work", help="reports, caches, progress")
    f = sub.add_parser("fetch", parents=[state], help="take a call's returned files (here)")
    f.add_argument("folder")
    f.add_argument("--dest", type=Path, default=ROOT / "reports" / "reference")
    f.add_argument("--gpu-dir", type=Path, default=ROOT / ".gpu", help="the other carried folder (its size counts)")
    args = p.parse_args(argv)
    if args.cmd == "run" and args.out is None:
        p.error("--out is required where $OUT is unset")
    from labkit.errors import LabkitError
    from labkit.record.proc import signals_as_interrupt

    try:
        with signals_as_interrupt():  # SIGTERM, SIGHUP as Ctrl-C: the step's nsys writes what it has
            return {"plan": show_plan, "prepare": prepare, "run": run, "fetch": fetch}[args.cmd](args)
    except LabkitError as exc:  # a state file not as the driver wrote it, said in one line
        print(f"record_reference: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # progress and state.tgz are written before each step
        kept = f"the steps before it are in {args.out / 'state.tgz'}" if args.cmd == "run" else "nothing half-written"
        print(f"record_reference: {exc.args[0] if exc.args else 'interrupted'}: {kept}; call again to go on",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
