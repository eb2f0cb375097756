"""Exceptions shared across labkit; each module defines its specific subclasses."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path


class LabkitError(Exception):
    """Base class: every message names the problem and the fix."""


class OutputError(LabkitError):
    """A folder labkit must write to is not writable, or its disk is (nearly) full."""


def output_tail(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of a program's output (progress-bar carriage returns as newlines)."""
    return "\n".join(text.replace("\r", "\n").strip().splitlines()[-lines:])


_VARIABLES = ("LABKIT_REPORTS", "LABKIT_CACHE_DIR", "TMPDIR")


def _from_env(path) -> str:
    """`` (LABKIT_REPORTS=...)`` when ``path`` lies under a folder an environment variable chose,
    so that the fix names the variable; else empty."""
    for var in _VARIABLES:
        value = os.environ.get(var)
        if not value:
            continue
        try:
            inside = Path(path).absolute().is_relative_to(Path(value).absolute())
        except (OSError, ValueError):
            inside = False
        if inside:
            return f" ({var}={value}: set {var} to another folder)"
    return ""


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def output_error(path, exc: OSError, *, need_bytes: int | None = None, what: str = "write") -> OutputError:
    """One-line :class:`OutputError` for an ``OSError`` met writing ``path``: the folder, the
    reason, the space needed (full disk) and the fix."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        free = _free(folder)
        need = f"; about {_mb(need_bytes)} is needed" if need_bytes else ""
        return OutputError(f"cannot {what} {path}: the disk holding {folder} is full ({_mb(free or 0)} free{need}): "
                           f"free some space there, or choose another folder{_from_env(path)}")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"cannot {what} {path}: {folder} is not writable ({exc.strerror}): fix its permissions "
                           f"or choose another folder{_from_env(path)}")
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return OutputError(f"cannot {what} {path}: a file is in the way (a folder is needed there): move it, or "
                           f"choose another folder{_from_env(path)}")
    return OutputError(f"cannot {what} {path}: {exc.strerror or exc}: check the folder {folder}{_from_env(path)}")


def _free(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def check_writable(folder, *, need_bytes: int = 0, what: str = "write to") -> Path:
    """Pre-flight: create ``folder`` if needed and check that it is writable and that its disk has
    ``need_bytes`` free (an estimate). Returns the folder; raises :class:`OutputError` naming it."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(folder, exc, need_bytes=need_bytes, what="create") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot {what} {folder}: it is not writable: fix its permissions or choose another "
                          f"folder{_from_env(folder)}")
    free = _free(folder)
    if free is not None and free < need_bytes:
        raise OutputError(f"cannot {what} {folder}: its disk has {_mb(free)} free and about {_mb(need_bytes)} is "
                          f"needed: free some space there, or choose another folder{_from_env(folder)}")
    return folder
