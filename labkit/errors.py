"""Exceptions shared across labkit; each module defines its specific subclasses."""
from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import math
import numbers
import os
from pathlib import Path


MANIFEST = ".labkit-written"
"""The file in the lab's reports folder that lists what labkit wrote or created directly in it
(one JSON line each): ``make reset`` removes only what it lists. Kept here, beside
:func:`check_writable`, which creates the folders it lists; :mod:`labkit.paths` writes files."""


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
        folder = Path(value)
        if var == "LABKIT_REPORTS":  # a relative value is the project's folder, as labkit reads it
            from labkit.env import reports_dir

            folder = reports_dir()
        try:
            inside = Path(path).absolute().is_relative_to(folder.absolute())
        except (OSError, ValueError):
            inside = False
        if inside:
            return f" ({var}={_cut(value)}: set {var} to another folder)"
    return ""


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long, a loop of links: not a folder labkit can use
        return False


def _cut(path, n: int = 80) -> str:
    text = str(path)
    return text if len(text) <= n else f"{text[:n - 20]}…{text[-19:]} ({len(os.fsencode(text)):,} bytes)"


def output_error(path, exc: OSError, *, need_bytes: int | None = None, what: str = "write") -> OutputError:
    """One-line :class:`OutputError` for an ``OSError`` met writing ``path``: the folder, the
    reason, the space needed (full disk) and the fix."""
    path = Path(path)
    if exc.errno == errno.ENAMETOOLONG:
        return OutputError(f"cannot {what} {_cut(path)}: a name in it is longer than the 255 bytes a file name may "
                           f"have (or the path passes 4096): choose a shorter name{_from_env(path)}")
    folder = path if _is_dir(path) else path.parent
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


def os_error(exc: OSError) -> LabkitError:
    """One-line :class:`LabkitError` for an ``OSError`` that reached the command line unworded (a
    path argument too long to look at, say): the path, the reason, the fix."""
    if exc.errno == errno.ENAMETOOLONG:
        return output_error(exc.filename or "", exc, what="use")
    name = f" {_cut(exc.filename)}" if exc.filename is not None else ""
    return LabkitError(f"cannot use{name}: {exc.strerror or exc}: check the path and its permissions")


def _free(folder: Path) -> int | None:
    try:
        import shutil  # here: its archive modules cost every command's start 4 ms

        return shutil.disk_usage(folder).free
    except OSError:
        return None


def check_writable(folder, *, need_bytes: int = 0, what: str = "write to") -> Path:
    """Pre-flight: create ``folder`` if needed and check that it is writable and that its disk has
    ``need_bytes`` free (an estimate). Returns the folder; raises :class:`OutputError` naming it."""
    folder = Path(folder)
    created = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    for p in created:
        claim_written(p, folder=True)  # listed before it exists: a full disk never leaves it unlisted
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(folder, exc, need_bytes=need_bytes, what="create") from None
    for p in created:
        record_written(p)
    if not os.access(folder, os.W_OK | os.X_OK):
        try:
            ro = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        except OSError:
            ro = False
        why = " (Read-only file system)" if ro else ""
        raise OutputError(f"cannot {what} {folder}: it is not writable{why}: fix its permissions or choose another "
                          f"folder{_from_env(folder)}")
    free = _free(folder)
    if free is not None and free < need_bytes:
        raise OutputError(f"cannot {what} {folder}: its disk has {_mb(free)} free and about {_mb(need_bytes)} is "
                          f"needed: free some space there, or choose another folder{_from_env(folder)}")
    return folder


_XATTR = "user.labkit.written"


def _stamp(st: os.stat_result) -> bytes:
    return f"{st.st_size}:{st.st_mtime_ns}".encode()


def _list(path: Path, folder: bool) -> None:
    """Add ``path`` to its folder's :data:`MANIFEST` when it lies directly in the lab's reports folder
    and is not listed yet (one line per name, however often labkit writes it). Raises OSError."""
    from labkit.env import reports_dir

    lab = reports_dir().resolve()
    if path.parent.resolve() != lab or path.name == MANIFEST:
        return
    fd = os.open(lab / MANIFEST, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if path.name in _names(os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", errors="replace")):
            return
        line = (json.dumps({"name": path.name, "kind": "folder" if folder else "file"}) + "\n").encode()
        size = os.fstat(fd).st_size
        try:
            if os.write(fd, line) != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            os.ftruncate(fd, size)  # no half line
            raise
    finally:
        os.close(fd)


def claim_written(path, *, folder: bool = False) -> None:
    """List ``path`` in the lab's :data:`MANIFEST` before labkit creates it, so that what it writes is
    never there unlisted (a full disk at the first line left the file and no line: ``make reset`` then
    refused the folder for good); :class:`OutputError` in one line when the manifest cannot be written."""
    path = Path(path)
    try:
        _list(path, folder)
    except FileNotFoundError:  # no lab folder yet: nothing can be written into it either (that write says so)
        return
    except OSError as exc:
        from labkit.env import reports_dir

        raise output_error(reports_dir() / MANIFEST, exc, what=f"list {path.name} in the lab's manifest") from None


def record_written(path) -> None:
    """Mark ``path`` (a file labkit just wrote, or a folder it created) as labkit's: an extended
    attribute on it (a file's size and mtime, so an edit since makes it the user's again: call it
    again after each write of labkit's own) and, for an entry directly in the lab's reports folder,
    its line in that folder's :data:`MANIFEST` (:func:`claim_written` lists it before it is written).
    Best effort: a file system without user attributes only means labkit asks for overwrite."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return
    is_dir = path.is_dir()
    with contextlib.suppress(OSError):
        os.setxattr(path, _XATTR, b"folder" if is_dir else _stamp(st))
    with contextlib.suppress(OSError):
        _list(path, is_dir)


def edited_since_written(path) -> bool:
    """True when ``path`` is a file labkit marked as written and that changed since (the user edited
    it: its content is theirs now, whatever its name); False for an unmarked file or a folder."""
    try:
        value, st = os.getxattr(path, _XATTR), os.stat(path)
    except OSError:
        return False
    return value != b"folder" and value != _stamp(st)


def written_by_labkit(path) -> bool:
    """True when ``path`` is a folder labkit created or, unchanged since, a file labkit wrote."""
    try:
        value, st = os.getxattr(path, _XATTR), os.stat(path)
    except OSError:
        return False
    return value == (b"folder" if Path(path).is_dir() else _stamp(st))


def manifest_names(folder) -> set[str]:
    """Names of the entries directly in the lab's reports ``folder`` that labkit recorded writing."""
    try:
        return _names((Path(folder) / MANIFEST).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return set()


def _names(text: str) -> set[str]:
    out = set()
    for line in text.splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            out.add(str(json.loads(line)["name"]))
    return out


# ----------------------------------------------------------------------------- arguments checked for sense
# Not only shape: a time limit is a finite number of seconds above 0, a count a whole number in its
# range (not NaN, not infinite, not a bool). Used by the API's entry points and, as argparse types,
# by the command line (a usage error, exit status 2).
class ArgumentError(LabkitError, ValueError):
    """An argument of the right type whose value makes no sense (NaN, infinite, negative, out of range)."""


def seconds(value, what: str, *, allow_none: bool = True) -> float | None:
    """``value`` as a finite number of seconds above 0 (None kept where ``allow_none``: no limit)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{what}={value!r:.40} is not a number of seconds: give one above 0, e.g. 60")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ArgumentError(f"{what}={v:g} is not a time limit: give a finite number of seconds above 0, e.g. 60"
                            + (" (or none, for no limit)" if allow_none else ""))
    return v


def count(value, what: str, *, minimum: int = 0) -> int:
    """``value`` as a whole number, ``minimum`` or more (a float that is whole is taken)."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(float(value)) \
        and float(value) == int(value)
    if not ok:
        raise ArgumentError(f"{what}={value!r:.40} is not a whole number: give one of {minimum} or more")
    if int(value) < minimum:
        raise ArgumentError(f"{what}={int(value)} is below {minimum}: give {minimum} or more")
    return int(value)


def seconds_arg(text: str) -> float:
    """An argparse type for a time limit in seconds (``--timeout``): argparse's one-line usage error otherwise."""
    try:
        return seconds(float(text), "--timeout", allow_none=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if isinstance(exc, ArgumentError)
                                         else f"{text!r} is not a number of seconds") from None
