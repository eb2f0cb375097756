"""Shared tools of the fault tests: real tmpfs mounts and a real non-root user (root needed:
tests skip with the reason where it is not)."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER = "labkit-fault"


@pytest.fixture
def mount(tmp_path):
    """``mount(size, ro=False)``: a fresh tmpfs of that size (a real small or read-only disk)."""
    points = []

    def make(size: str, ro: bool = False, at: Path | None = None) -> Path:
        point = at or tmp_path / f"mnt{len(points)}"
        point.mkdir(exist_ok=True)
        opts = f"size={size},mode=1777" + (",ro" if ro else "")
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(point)], capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode}): needs root")
        points.append(point)
        return point

    yield make
    for point in reversed(points):
        if subprocess.run(["umount", str(point)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(point)], check=True)


def fill(folder: Path, leave: int = 0) -> None:
    """Write into ``folder`` until its disk has about ``leave`` bytes free."""
    import shutil

    with open(folder / "filler", "wb") as f:
        try:
            while shutil.disk_usage(folder).free > leave + (1 << 20):
                f.write(b"\0" * (1 << 20))
                f.flush()
            while shutil.disk_usage(folder).free > leave:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError:
            pass


@pytest.fixture
def open_tmp():
    """A fresh folder under /tmp that every user may enter and read (pytest's tmp_path is 0700)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="labkit-fault-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def user() -> str:
    """A real non-root user (created once with useradd; skip without root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a non-root user")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        res = subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], capture_output=True, text=True)
        if res.returncode:
            pytest.skip(f"cannot create a user here: {res.stderr.strip()}")
    return USER


def run_as(user: str, code: str, env: dict | None = None, preload: str = "labkit.record.nsys") -> subprocess.CompletedProcess:
    """Run Python ``code`` as ``user`` (a real uid, no root rights left), with this worktree's
    labkit first on the path. The interpreter lives under root's 0700 home here, so it starts as
    root, imports ``preload`` (comma-separated modules), then drops to the user for good."""
    pw = pwd.getpwnam(user)
    boot = (f"import os, sys, json, sqlite3, hashlib, subprocess, {preload}\n"
            f"os.setgroups([]); os.setgid({pw.pw_gid}); os.setuid({pw.pw_uid})\n"
            f"assert os.geteuid() != 0\n")
    full = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": "/nonexistent", **(env or {})}
    full.pop("LABKIT_CACHE_DIR", None) if env is not None and "LABKIT_CACHE_DIR" not in env else None
    return subprocess.run([sys.executable, "-c", boot + code], capture_output=True, text=True, cwd="/",
                          env=full, timeout=600)
