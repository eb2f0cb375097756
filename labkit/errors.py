"""Exceptions shared across labkit; each module defines its specific subclasses."""


class LabkitError(Exception):
    """Base class: every message names the problem and the fix."""


def output_tail(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of a program's output (progress-bar carriage returns as newlines)."""
    return "\n".join(text.replace("\r", "\n").strip().splitlines()[-lines:])
