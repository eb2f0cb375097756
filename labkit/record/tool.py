"""The nsys executable: finding it, asking what it supports, and the errors nsys raises."""
from __future__ import annotations

import functools
import os
import subprocess

from labkit.env import nsys_version
from labkit.errors import LabkitError

__all__ = ["supports_option", "NsysError", "NsysNotFoundError"]


class NsysError(LabkitError):
    """nsys failed; the message carries its own output."""


class NsysNotFoundError(NsysError):
    """No usable nsys executable."""


def _nsys_or_raise(nsys: str | None = None) -> str:
    from labkit.env import find_nsys

    path = nsys or find_nsys()
    where = os.environ.get("LABKIT_NSYS") or os.environ.get("NSYS")
    if not path or not os.path.isfile(path):
        hint = f" (LABKIT_NSYS/NSYS is set to {where!r}, which is not an executable)" if where else ""
        raise NsysNotFoundError(f"nsys not found{hint}: install it with scripts/install-nsys, or set LABKIT_NSYS "
                                f"to the nsys executable")
    if nsys_version(path) is None:  # e.g. LABKIT_NSYS=/bin/false: it runs, but is no nsys
        given = f"nsys={nsys!r}" if nsys else (f"LABKIT_NSYS/NSYS={where!r}" if where else f"{path} on PATH")
        raise NsysNotFoundError(f"{path} (from {given}) is not a working nsys: `{path} --version` printed no "
                                f"Nsight Systems version: point LABKIT_NSYS at the nsys executable "
                                f"(scripts/install-nsys installs one)")
    return path


@functools.lru_cache(maxsize=8)
def supports_option(exe: str, option: str) -> bool:
    """Whether this nsys's ``nsys profile --help`` lists ``option`` (2022.4 has --cuda-graph-trace)."""
    try:
        out = subprocess.run([exe, "profile", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in out.stdout + out.stderr
