"""One boundary for names and paths, and one mechanism for every file labkit writes.

Names that become files (a profile, a step's run, a report, an output) pass :func:`check_name`:
any name a Linux file system takes and labkit can show is accepted; ``""``, ``.``, ``..``, a
separator, NUL or another control character (C1 and the bidirectional overrides too: a name
``report\\u202egnp.exe`` that ``ls`` shows reversed), a name that is not valid UTF-8 (from a
``surrogateescape``-decoded argv) and a name whose file would pass ``NAME_MAX`` (255 bytes) end in one
:class:`NameError_`-line naming the fix. :func:`report_files` is what ``nsys profile -o`` writes
for a name (``model.fp16`` -> ``model.fp16.nsys-rep``: a suffix added, never replaced), and
:func:`nsys_output` escapes ``%`` (nsys expands ``%p``, ``%h``, ``%q{ENV}``, ``%%`` in ``-o``), so
what labkit reserves is exactly what nsys writes. :func:`check_input` refuses an input that is
not a readable regular file (a FIFO or a device would block or never end) in one line.

Every file labkit writes goes through :func:`atomic_write` (a temporary file in the same
folder, then ``rename``): a reader never sees half a file, and a file labkit did not write is
never replaced without ``overwrite=True`` (``--overwrite``). What labkit wrote carries a mark
(:func:`labkit.errors.record_written`: an extended attribute with its size and mtime, so a file
edited since is the user's again) and, directly in the lab's reports folder, a line in its
manifest (:data:`MANIFEST`), which is all ``make reset`` removes.
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from labkit.errors import (MANIFEST, LabkitError, OutputError, claim_written, manifest_names, output_error,
                           record_written, written_by_labkit)

__all__ = ["NAME_MAX", "MANIFEST", "NameError_", "OutputExistsError", "check_name", "report_base", "report_files",
           "bounded_name", "nsys_output",
           "check_input", "check_output", "atomic_write", "written_by_labkit", "record_written", "manifest_names"]

NAME_MAX = 255
"""Bytes in one file name (Linux ``NAME_MAX`` on ext4, xfs, tmpfs, btrfs)."""
REPORT_SUFFIXES = (".nsys-rep", ".sqlite", ".log")


class NameError_(LabkitError, ValueError):
    """A name cannot become a file name (empty, ``.``/``..``, a separator, too long, not UTF-8)."""


class OutputExistsError(OutputError):
    """The output path holds a file labkit did not write, and overwrite was not asked for."""


def _shown(name) -> str:
    from labkit.safe_text import terminal

    return repr(terminal(name))


def check_name(name, *, what: str = "name", suffix: str = ".nsys-rep") -> str:
    """``name`` when it can be a file name in one folder with ``suffix`` added; else
    :class:`NameError_` in one line (what is wrong, and the fix)."""
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if not isinstance(name, str):
        raise NameError_(f"the {what} must be text, not {type(name).__name__}: pass a name such as 'baseline'")
    fix = "choose a name of letters, digits, '-', '_' and '.' (e.g. 'baseline')"
    if name in ("", ".", ".."):
        raise NameError_(f"the {what} {name!r} cannot be a file name: {fix}")
    if "/" in name or os.sep in name:
        raise NameError_(f"the {what} {_shown(name)} holds a path separator, so its files would land outside "
                         f"their folder: {fix} (give the folder separately: outdir=)")
    if re.search("[\ud800-\udfff]", name):
        raise NameError_(f"the {what} {_shown(name)} is not valid UTF-8 (bytes from a file name in another "
                         f"encoding): rename it to UTF-8 or {fix}")
    from labkit.safe_text import has_control  # the terminal's rule: what it would show as \xNN is no name

    if has_control(name):
        raise NameError_(f"the {what} {_shown(name)} holds a control character (a newline, a tab, NUL, a "
                         f"right-to-left override...): {fix}")
    size = len(os.fsencode(name + suffix))
    if size > NAME_MAX:
        raise NameError_(f"the {what} is {size} bytes long with its suffix {suffix!r}, more than the {NAME_MAX} "
                         f"a file name may have here: choose a shorter name")
    return name


NSYS_REPLACES = (".nsys-rep", ".qdrep", ".qdstrm", ".sqlite", ".json", ".h5", ".txt")
"""Endings ``nsys profile -o`` replaces with ``.nsys-rep`` instead of adding it (nsys 2022.4, measured
here 2026-12-01: ``-o z.sqlite`` writes ``z.nsys-rep``; ``.csv``, ``.log``, ``.fp16`` get it added)."""
NSYS_MAY_REPLACE = (".arrow", ".parquetdir")
"""Export types of newer nsys whose handling in ``-o`` was not measured: a name ending so is refused."""


def report_base(name: str) -> str:
    """The name nsys really records under for ``-o name``: ``base.nsys-rep`` or ``base.sqlite`` writes
    ``base.nsys-rep`` (:data:`NSYS_REPLACES`), so its base is ``base``; any other name is its own base.
    A name ending in :data:`NSYS_MAY_REPLACE` is :class:`NameError_` (nsys might write either name)."""
    if not isinstance(name, str):
        return name
    for end in NSYS_REPLACES:
        if name.endswith(end):
            return name[:-len(end)]
    if name.endswith(NSYS_MAY_REPLACE):
        raise NameError_(f"the report name {_shown(name)} ends in {os.path.splitext(name)[1]!r}, an export type "
                         f"nsys may replace with .nsys-rep: choose a name without it (e.g. {_shown(name.replace('.', '-'))})")
    return name


def report_files(outdir, name: str) -> dict[str, Path]:
    """``{suffix: path}`` of what recording ``name`` in ``outdir`` writes (``.nsys-rep``,
    ``.sqlite``, ``.log``): the suffix added to the whole name, as nsys does (to the name without the
    ``.nsys-rep``, ``.sqlite``... it ends in, which nsys replaces: :func:`report_base`)."""
    base = report_base(name)
    check_name(base, what="report name")
    return {s: Path(outdir) / f"{base}{s}" for s in REPORT_SUFFIXES}


def bounded_name(stem: str, suffix: str = "", *, spare: int = 0) -> str:
    """``stem + suffix`` when it fits in one file name (:data:`NAME_MAX` bytes); else ``stem`` cut
    (on a character boundary) with ``-`` and 10 hex digits of its SHA-1 before ``suffix``: a name that
    labkit derives from a legal one (a cache folder, a partial export) always fits and stays unique.
    ``spare``: bytes left free for what another program appends (SQLite's ``-journal``: 8)."""
    import hashlib

    if len(os.fsencode(stem + suffix)) + spare <= NAME_MAX:
        return stem + suffix
    tag = "-" + hashlib.sha1(os.fsencode(stem)).hexdigest()[:10]
    room = NAME_MAX - spare - len(os.fsencode(tag + suffix))
    cut = stem
    while len(os.fsencode(cut)) > room:  # by characters: one may take up to four bytes
        cut = cut[:-1]
    return cut + tag + suffix


def nsys_output(base) -> str:
    """``base`` for ``nsys profile -o``: ``%`` doubled, so nsys writes that very name."""
    return os.fspath(base).replace("%", "%%")


def check_input(path, *, what: str = "input file") -> Path:
    """``path`` when it is a readable regular file; else :class:`LabkitError` in one line (missing,
    a folder, a FIFO or device, unreadable)."""
    import stat

    p = Path(os.fsdecode(path) if isinstance(path, bytes) else path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise LabkitError(f"the {what} {_shown(p)} does not exist: check the path") from None
    except OSError as exc:
        raise LabkitError(f"the {what} {_shown(p)} cannot be read ({exc.strerror}): check the path and its "
                          "permissions") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a special file (FIFO, device or socket)"
        raise LabkitError(f"the {what} {_shown(p)} is {kind}, not a file: pass a regular file")
    if not os.access(p, os.R_OK):
        raise LabkitError(f"the {what} {_shown(p)} is not readable: fix its permissions (chmod u+r)")
    return p


def check_output(path, *, overwrite: bool = False, what: str = "file") -> Path:
    """``path`` when :func:`atomic_write` may write it (call it before long work, so a refusal comes
    first): not a folder, not a name too long, and absent, labkit's own or ``overwrite``; else
    OutputExistsError / OutputError in one line."""
    path = Path(path)
    try:
        is_dir, exists = path.is_dir(), os.path.lexists(path)
    except OSError as exc:  # a name longer than NAME_MAX
        raise output_error(path, exc, what=f"write the {what}") from None
    if is_dir:
        raise OutputError(f"cannot write the {what} {_shown(path)}: it is a folder: pass a file path")
    if exists and not overwrite and not written_by_labkit(path):
        raise OutputExistsError(f"{_shown(str(path))} already exists and labkit did not write it: pass --overwrite "
                                f"(overwrite=True) to replace it, or choose another path")
    return path


def atomic_write(path, data: str | bytes, *, overwrite: bool = False, what: str = "file", mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through a temporary file in its folder and a rename.

    An existing ``path`` is replaced only when labkit wrote it (unchanged since) or ``overwrite``;
    otherwise :class:`OutputExistsError` names it and the fix. Returns the path.
    Raises: OutputExistsError, OutputError (folder missing or not writable, disk full).
    """
    path = check_output(path, overwrite=overwrite, what=what)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    folder = path.parent
    claim_written(path)  # in the manifest before it exists (make reset never meets it unlisted)
    try:
        random = "XXXXXXXX.tmp"  # what mkstemp adds: 8 characters and the suffix
        fd, tmp = tempfile.mkstemp(prefix=bounded_name(f".{path.name}", f".{random}")[:-len(random)], suffix=".tmp",
                                   dir=folder)
    except OSError as exc:
        raise output_error(path, exc, need_bytes=len(raw), what=f"write the {what}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, mode & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise output_error(path, exc, need_bytes=len(raw), what=f"write the {what}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    record_written(path)
    return path


class LockedError(LabkitError):
    """Another process holds the lock: the same work is under way already."""


def hold_lock(path, *, what: str = "this") -> int:
    """Take the exclusive lock of ``path`` (created if needed, ``flock``) for as long as the
    process lives or until ``os.close`` of the returned descriptor; :class:`LockedError` in one
    line when another process holds it (two runs of one job at once would both do every step)."""
    import fcntl

    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise output_error(path, exc, what="create the lock file") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LockedError(f"{what} is running already (another process holds {path}): wait for it to finish, "
                          "or stop it") from None
    return fd
