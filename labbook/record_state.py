"""What a recording call of ``scripts/record_reference.py`` carries to the next: its state (progress,
ledger, results, then the model and compile caches, each group left out when it does not fit) and
the kept profiles (trimmed exports), each tarball at most 16 MiB by construction.

Its state files are input, as any file read back: :func:`read_progress` and :func:`commit_info`
read them with a schema (a file cut short or of the wrong types is one line naming it and the fix),
and the commit comes from git where the checkout has one (a ``commit.json`` that says otherwise is
noted, not believed).

The clip never travels: it is made again, deterministically, from its seed on a fresh machine
(``labbook.video.sample_video``; a machine still warm from the call before has it).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from labkit.errors import LabkitError

MAX_TAR = 16 * 2**20
"""The most the device tool returns per file."""
TRIM_MB = 4.0
TRIM_BATCHES = 12
"""An export over ``TRIM_MB`` is kept as ``TRIM_BATCHES`` steady-state batches (as ``scripts/save_reference.py``)."""


class StateFileError(LabkitError):
    """A state file of the recording (progress.json, commit.json) that is not what the driver wrote."""


_NUMBER = (int, float)
PROGRESS = {"done": (list, str), "attempts": (dict, int), "seconds": (dict, _NUMBER), "modelled": (dict, _NUMBER),
            "calls": (int, None), "call_minutes": (list, dict), "gpu": (str, None)}
"""progress.json's keys: (container type, type of each item or value; None for a plain value)."""


_KINDS = {list: ("a list", "lists"), dict: ("an object", "objects"), str: ("text", "step names"),
          int: ("a whole number", "whole numbers"), _NUMBER: ("a number", "numbers")}


def _json(path: Path, fix: str):
    try:
        return json.loads(path.read_text())
    except UnicodeDecodeError:
        raise StateFileError(f"{path}: not text: {fix}") from None
    except ValueError as exc:  # cut short (a full disk, a killed write) or edited
        raise StateFileError(f"{path}: cut short or not JSON ({exc.msg} at line {exc.lineno}): {fix}") from None
    except OSError as exc:
        raise StateFileError(f"{path}: cannot read it ({exc.strerror or exc}): {fix}") from None


def read_progress(path: Path) -> dict:
    """The recording's ``progress.json`` (empty when absent), every key of :data:`PROGRESS` present
    with its type; raises StateFileError in one line naming the key, else the driver would match a
    step by substring (``"fp16" in "fp16_cuda_graphs"``) or stop with a traceback mid-call."""
    fix = f"move it away to start this recording's progress again (rm {path}), or resume from the committed folder"
    data = _json(path, fix) if path.exists() else {}
    if not isinstance(data, dict):
        raise StateFileError(f"{path}: holds {type(data).__name__}, not an object of the recording's progress: {fix}")
    for key, (outer, inner) in PROGRESS.items():
        if key not in data:
            if key != "gpu":
                data[key] = outer()
            continue
        value = data[key]
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        ok = isinstance(value, outer) and not isinstance(value, bool) and (
            inner is None or all(isinstance(v, inner) and not isinstance(v, bool) for v in items))
        if ok and outer is dict:
            ok = all(isinstance(k, str) for k in value)
        if not ok:
            want = _KINDS[outer][0] + (f" of {_KINDS[inner][1]}" if inner else "")
            raise StateFileError(f"{path}: {key!r} is {json.dumps(value)[:60]}, not {want}: {fix}")
    return data


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def commit_info(state_dir: Path, root: Path) -> dict:
    """The commit the recording runs: git's (``rev-parse HEAD`` of ``root``) where ``root`` is a
    checkout, with a ``commit_note`` when ``state_dir/commit.json`` names another; else that file's,
    read with its schema; else unknown, and why."""
    saved = state_dir / "commit.json"
    fix = "run `python scripts/record_reference.py prepare` in the checkout to write it again"
    recorded = None
    if saved.exists():
        recorded = _json(saved, fix)
        if not (isinstance(recorded, dict) and isinstance(recorded.get("commit"), (str, type(None)))
                and isinstance(recorded.get("dirty"), (bool, type(None)))):
            raise StateFileError(f"{saved}: not a commit and a dirty flag ({json.dumps(recorded)[:60]}): {fix}")
    try:
        info = {"commit": _git(root, "rev-parse", "HEAD"),
                "dirty": bool(_git(root, "status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        if recorded is not None:
            return {"commit": recorded["commit"], "dirty": recorded["dirty"]}
        return {"commit": None, "dirty": None, "note": "no git here and no commit.json: run `prepare` in the checkout"}
    if recorded is not None and recorded["commit"] != info["commit"]:
        info["commit_note"] = (f"{saved} names {str(recorded['commit'])[:12]}, git's checkout is at "
                               f"{info['commit'][:12]}: git's is the commit that ran")
    return info


def tar(path: Path, members: list[tuple[Path, str]]) -> int:
    """Write ``path`` (gzip) of the members that exist, atomically; returns its size."""
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as t:
        for src, arc in members:
            if src.exists():
                t.add(src, arcname=arc)
    os.replace(tmp, path)
    return path.stat().st_size


def _size(members: list[tuple[Path, str]]) -> int:
    total = 0
    for src, _ in members:
        if src.is_file():
            total += src.stat().st_size
        elif src.is_dir():
            total += sum(f.stat().st_size for f in src.rglob("*") if f.is_file())
    return total


def state_groups(work: Path, *, caches: bool) -> list[tuple[str, list[tuple[Path, str]]]]:
    """The state's groups in order of need: progress, ledger and results first; with ``caches``,
    the converted models (ONNX, INT8) and torch.compile's cache."""
    groups = [("progress, ledger, results", [(work / "progress.json", "progress.json"),
                                             (work / "reports" / "ledger.jsonl", "reports/ledger.jsonl"),
                                             (work / "reports" / "results", "reports/results")])]
    if caches:
        groups += [("model cache", [(work / "cache" / "backends", "cache/backends")]),
                   ("compile cache", [(work / "cache" / "inductor", "cache/inductor")])]
    return groups


def write_state(work: Path, out: Path, *, caches: bool = True) -> list[str]:
    """``out/state.tgz`` of at most 16 MiB: each group in order, a group whose files (uncompressed)
    would take the tarball past 16 MiB left out and the next one tried. Returns the groups left out."""
    kept: list = []
    dropped: list[str] = []
    for name, members in state_groups(work, caches=caches):
        if kept and _size(kept + members) > MAX_TAR:
            dropped.append(name)
            continue
        kept += members
    tar(out / "state.tgz", kept)
    return dropped


def restore(state_dir: Path, work: Path) -> bool:
    """Unpack ``state.tgz`` and ``keep.tgz`` into a new work folder; True when state was restored.
    The kept profiles go to ``reports/profiles`` (where the reference's exports are looked for)."""
    if (work / "progress.json").exists() or not (state_dir / "state.tgz").exists():
        return False
    work.mkdir(parents=True, exist_ok=True)
    with tarfile.open(state_dir / "state.tgz") as t:
        t.extractall(work, filter="data")
    if (state_dir / "keep.tgz").exists():
        with tarfile.open(state_dir / "keep.tgz") as t:
            t.extractall(work / "keep", filter="data")
        profiles = work / "reports" / "profiles"
        profiles.mkdir(parents=True, exist_ok=True)
        for f in (work / "keep").iterdir():
            shutil.copy2(f, profiles / f.name)
    return True


def latest(profiles: Path, step: str, suffix: str) -> Path | None:
    hits = sorted(p for p in profiles.glob(f"{step}-*{suffix}") if not p.name.endswith(f".trimmed{suffix}"))
    return hits[-1] if hits else None


def key_steps(work: Path) -> list[str]:
    """The profiled steps whose reports the reference keeps: the baseline, the queued pipeline and
    the fastest ok step that has a profile here, then any other profiled step."""
    from labkit.bench.ledger import Ledger

    profiles = work / "reports" / "profiles"
    rows = [r for r in Ledger(work / "reports" / "ledger.jsonl").rows() if r.get("status", "ok") == "ok"]
    profiled = [r for r in rows if latest(profiles, r["step"], ".sqlite") and r.get("fps")]
    best = max(profiled, key=lambda r: r["fps"], default=None)
    first = [s for s in ("baseline", "queues", best and best["step"]) if s]
    return [s for s in dict.fromkeys([*first, *(r["step"] for r in profiled)]) if latest(profiles, s, ".sqlite")]


def trimmed(db: Path, step: str, work: Path) -> Path:
    """``db`` itself when small, else its steady-state slice (made once, beside it)."""
    if db.stat().st_size <= TRIM_MB * 2**20:
        return db
    target = db.with_name(f"{db.stem}.trimmed.sqlite")
    if target.exists():
        return target
    import labkit
    from labkit.report.trim import trim_export

    from labbook.steps import recorded_options

    try:
        opts = recorded_options(step)
    except ValueError:
        opts = {}
    rep = labkit.load_report(db)
    warm = -(-int(opts.get("warmup", 0)) // int(opts.get("batch_size", 1)))
    start, end = labkit.steady_window(rep, warmup=warm, count=TRIM_BATCHES)
    return trim_export(db, target, start, end)


def write_keep(work: Path, out: Path) -> list[str]:
    """``out/keep.tgz``: the trimmed export of each key step (:func:`key_steps`) and, while the
    files (uncompressed) stay under 16 MiB, its ``.nsys-rep``; written once per call. Returns the
    steps kept."""
    keep = work / "keep"
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    profiles = work / "reports" / "profiles"
    steps, used = [], 0
    reps = []
    for step in key_steps(work):
        db = trimmed(latest(profiles, step, ".sqlite"), step, work)
        if used + db.stat().st_size > MAX_TAR:
            continue
        shutil.copy2(db, keep / f"{step}-kept.sqlite")
        used += db.stat().st_size
        steps.append(step)
        rep = latest(profiles, step, ".nsys-rep")
        if rep is not None:
            reps.append((step, rep))
    for step, rep in reps:  # the reports after every export: an export is what the notebooks read
        if used + rep.stat().st_size <= MAX_TAR:
            shutil.copy2(rep, keep / f"{step}-kept.nsys-rep")
            used += rep.stat().st_size
    tar(out / "keep.tgz", [(f, f.name) for f in sorted(keep.iterdir())])
    return steps
