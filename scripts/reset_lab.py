#!/usr/bin/env python
"""Back to a fresh lab, keeping caches (`make reset`; `make clean-reports` is the same).

    python scripts/reset_lab.py [--dry-run]

Removes what the lab wrote in its reports folder (``$LABKIT_REPORTS``, else ``reports/``; resolved
by ``labkit.env.reports_dir``, as the kernels and ``run_lab`` resolve it): the entries listed in
the folder's manifest (``.labkit-written``, kept by labkit as it writes: the ledger, profiles,
results, videos, executed notebooks, JupyterLab checkpoints and notebook 07's table and figures),
naming each. A folder that holds anything else is refused whole (nothing removed, the strangers
named): ``LABKIT_REPORTS`` at a folder of your own never loses your files. A file the lab wrote
that you edited since (its written-by mark no longer matches it) is kept and named, whatever its name. The project's own
``reports/`` also takes the lab's names from before the manifest. Kept: the committed reference
results (``reference/``, ``browser/``, ``README.md``), the sample
clips in ``data/`` and the converted models in the cache (``$LABKIT_CACHE_DIR``, else
``~/.cache/labkit``), so the next `make lab` does not rebuild them. The notebooks themselves are
not touched: ``git checkout notebooks/`` restores the lab's own copies of them.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB_OUTPUTS = ("ledger.jsonl", "ledger.jsonl.*", "profiles", "results", "videos", "notebooks", "checkpoints",
               "jupyterlab-settings", "speedup.md", "*.png", "*.mp4", "*.mp4.*")
"""Names (glob patterns) of what the lab writes directly under its reports folder."""
KEPT = ("reference", "browser", "README.md")
"""Committed under reports/: never removed."""


def reports_folder(env: dict | None = None) -> Path:
    from labkit.env import reports_dir

    return reports_dir(ROOT / "reports", env=env).resolve()  # one rule, labkit's


def plan(folder: Path) -> tuple[list[Path], list[Path]]:
    """(what a reset removes, what it leaves) among ``folder``'s entries: the manifest's entries
    (and, in the project's own reports/, the lab's names); the manifest itself goes last."""
    from labkit.errors import MANIFEST, manifest_names

    if not folder.is_dir():
        return [], []
    ours = manifest_names(folder)
    own_folder = folder == (ROOT / "reports").resolve()
    gone, left = [], []
    for p in sorted(folder.iterdir()):
        if p.name in KEPT or p.name == MANIFEST:
            continue
        lab = p.name in ours or (own_folder and any(fnmatch.fnmatch(p.name, pat) for pat in LAB_OUTPUTS))
        (gone if lab else left).append(p)
    if gone and (folder / MANIFEST).exists():
        gone.append(folder / MANIFEST)
    return gone, left


def edited(path: Path) -> list[Path]:
    """The files at or under ``path`` (an entry the lab wrote) that the user edited since: their
    written-by mark no longer matches them (labkit.errors.edited_since_written), so they are theirs."""
    from labkit.errors import edited_since_written

    if path.is_symlink() or not path.is_dir():
        return [path] if not path.is_symlink() and edited_since_written(path) else []
    return sorted(p for p in _files(path) if edited_since_written(p))


def _files(folder: Path) -> list[Path]:
    """Every file under ``folder``, links not followed (a link to the user's home is no lab folder)."""
    return [Path(top) / f for top, _, files in os.walk(folder) for f in files
            if not os.path.islink(os.path.join(top, f))]


def remove(path: Path, keep: list[Path]) -> None:
    """Remove ``path``, all but the files in ``keep`` (and the folders that hold them). Raises OSError."""
    if not keep:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        return
    if path in keep:
        return
    for top, dirs, files in os.walk(path, topdown=False):  # links are removed, never followed
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            if Path(top, name) not in keep:
                os.unlink(os.path.join(top, name))
        if not any(k.is_relative_to(top) for k in keep):
            os.rmdir(top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    args = p.parse_args(argv)
    folder = reports_folder()
    gone, left = plan(folder)
    if left and folder != (ROOT / "reports").resolve():
        names = ", ".join(p.name for p in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        print(f"reset: nothing removed: {folder} (LABKIT_REPORTS) also holds what the lab did not write ({names}): "
              f"point LABKIT_REPORTS at a folder of the lab's own, or move those out and run make reset again",
              file=sys.stderr)
        return 1
    from labkit.errors import MANIFEST

    kept_entries = []  # the lab's entries that still hold what the user edited: listed again after the reset
    for path in gone:
        keep = [] if path.name == MANIFEST else edited(path)
        for k in keep:
            print(f"reset: {k} was edited since the lab wrote it: kept (it is yours now)")
        if keep:
            kept_entries.append(path)
        if path.name == MANIFEST and not args.dry_run and kept_entries:
            _relist(folder, kept_entries)
            continue
        if path in keep:
            continue
        print(f"reset: {'would remove' if args.dry_run else 'removing'} {path}")
        if not args.dry_run:
            try:
                remove(path, keep)
            except OSError as e:
                print(f"reset: cannot remove {path} ({e.strerror}): check its permissions, then run make reset again",
                      file=sys.stderr)
                return 1
    for path in left:
        print(f"reset: {path} is not the lab's output: left as it is")
    cache = os.environ.get("LABKIT_CACHE_DIR") or "~/.cache/labkit"
    print(f"reset: {'nothing to remove: ' if not gone else ''}a fresh lab in {folder} "
          f"(kept: reference results, data/ clips, the model cache in {cache})")
    return 0


def _relist(folder: Path, entries: list[Path]) -> None:
    """The manifest after a reset that kept edited files: it lists only the lab's entries that hold them."""
    import json

    from labkit.errors import MANIFEST
    from labkit.paths import atomic_write

    lines = "".join(json.dumps({"name": p.name, "kind": "folder" if p.is_dir() else "file"}) + "\n" for p in entries)
    atomic_write(folder / MANIFEST, lines, overwrite=True, what="manifest")


if __name__ == "__main__":
    sys.exit(main())
