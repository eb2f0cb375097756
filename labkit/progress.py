"""Progress that renders where it is shown: one place decides how labkit shows progress.

A widget in Jupyter (``tqdm.notebook``, with ipywidgets), one updating line on a terminal, and
nothing elsewhere (a log file, CI, a notebook without ipywidgets): never a line per update on
stderr, which a notebook would show as a pink box.
"""
from __future__ import annotations

import sys


def bar(desc: str, *, enabled: bool = True, **kwargs):
    """A tqdm bar (``total``, ``bar_format``... as tqdm takes them) that renders here, or a
    disabled one that shows nothing; usable as a context manager and an iterator wrapper alike."""
    from tqdm import tqdm

    if enabled:
        try:
            if "ipykernel" in sys.modules:
                import ipywidgets  # noqa: F401  (without it tqdm.notebook falls back to a line per update)
                from tqdm.notebook import tqdm as notebook_tqdm

                return notebook_tqdm(desc=desc, leave=False, **kwargs)
            if sys.stderr.isatty():
                return tqdm(desc=desc, leave=False, file=sys.stderr, **kwargs)
        except Exception:  # progress display must never break a run
            pass
    return tqdm(desc=desc, disable=True, **kwargs)
