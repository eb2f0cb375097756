"""Exceptions shared across labkit; each module defines its specific subclasses."""


class LabkitError(Exception):
    """Base class: every message names the problem and the fix."""
