"""Shared tools of the fault tests: real tmpfs mounts and a real non-root user (root needed:
tests skip with the reason where it is not)."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
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
    for _ in range(5):  # another worker of the suite may be making it (useradd locks /etc/passwd)
        if _exists(USER):
            return USER
        res = subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], capture_output=True, text=True)
        if not res.returncode:
            return USER
        time.sleep(1)
    if _exists(USER):
        return USER
    pytest.skip(f"cannot create a user here: {res.stderr.strip()}")


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _readable_by_all(path: Path) -> bool:
    """Whether every user can reach ``path`` (each folder above it searchable by others) and read it."""
    for p in [path, *path.parents]:
        mode = p.stat().st_mode
        if not mode & 0o001 or (p == path and not mode & 0o004):
            return False
    return True


_COPY: list[Path] = []


def readable_checkout() -> Path:
    """This checkout's packages where every user can read them: the checkout itself, or (a clone inside a
    0700 folder, such as pytest's own temporary folders) a copy of labkit/, labbook/ and source_code/ under
    /tmp made once per session, so a module imported after the drop to another user is found."""
    if _readable_by_all(ROOT / "source_code"):
        return ROOT
    if not _COPY:
        import atexit
        import shutil
        import tempfile

        copy = Path(tempfile.mkdtemp(prefix="labkit-checkout-", dir="/tmp"))
        for pkg in ("labkit", "labbook", "source_code"):
            shutil.copytree(ROOT / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run(["chmod", "-R", "a+rX", str(copy)], check=True)
        atexit.register(shutil.rmtree, copy, True)
        _COPY.append(copy)
    return _COPY[0]


# What the application imports before its first check, loaded while still root (the interpreter's own
# library sits under root's 0700 home here, so a module first imported after the drop is not found).
APP_PRELOAD = ("source_code.detect_video,source_code.pipeline,source_code.checks,source_code.backends.artifacts,"
               "source_code.scenes")


def run_as(user: str, code: str, env: dict | None = None, preload: str = "labkit.record.nsys") -> subprocess.CompletedProcess:
    """Run Python ``code`` as ``user`` (a real uid, no root rights left), with this worktree's
    packages first on the path (:func:`readable_checkout`: a copy where the user cannot read the checkout).
    The interpreter lives under root's 0700 home here, so it starts as
    root, imports ``preload`` (comma-separated modules), then drops to the user for good."""
    pw = pwd.getpwnam(user)
    boot = (f"import os, sys, json, sqlite3, hashlib, subprocess, {preload}\n"
            f"os.setgroups([]); os.setgid({pw.pw_gid}); os.setuid({pw.pw_uid})\n"
            f"assert os.geteuid() != 0\n")
    full = {**os.environ, "PYTHONPATH": str(readable_checkout()), "HOME": "/nonexistent", **(env or {})}
    full.pop("LABKIT_CACHE_DIR", None) if env is not None and "LABKIT_CACHE_DIR" not in env else None
    return subprocess.run([sys.executable, "-c", boot + code], capture_output=True, text=True, cwd="/",
                          env=full, timeout=600)


# What nsys 2022.4 printed when it ended before its program ran (its start-up races beside other nsys
# sessions), as seen on the VM and in CI (the last one: CI of 2026-12-02, notebook 01's by-hand profile).
START_FAILURES = {
    "sem_open": "ProcessWaiter: sem_open failed: No such file or directory",
    "endpoint": ("/build/agent/work/323cb361ab84164c/QuadD/Common/ProtobufComm/Client/ClientProxy.cpp(381): "
                 "Throw in function QuadDProtobufComm::Endpoint QuadDProtobufComm::Client::ClientProxy::"
                 "GetLocalEndpoint() const\\nDynamic exception type: boost::wrapexcept<QuadDCommon::RuntimeException>"
                 "\\nstd::exception::what: RuntimeException\\n[QuadDCommon::tag_message*] = Local Endpoint is not "
                 "available."),
}


def racing_nsys(folder: Path, failure: str, real: str) -> Path:
    """``folder/nsys``: its first profile start (a command line with ``--output``) prints nsys's
    message of ``failure`` (a key of START_FAILURES) and exits 1 as nsys does; every other call runs
    the real nsys. Returns the path; START_FAILURES[failure]'s last line is what the log then holds."""
    folder.mkdir(parents=True, exist_ok=True)
    shim, flag = folder / "nsys", folder / "raced"
    shim.write_text(f"#!/bin/sh\ncase \"$*\" in *--output*) if [ ! -e '{flag}' ]; then touch '{flag}'; "
                    f"printf '%b\\n' '{START_FAILURES[failure]}' >&2; exit 1; fi;; esac\nexec '{real}' \"$@\"\n")
    shim.chmod(0o755)
    return shim
