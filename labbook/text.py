"""How the lab shows text and tables in a notebook: computed sentences as markdown, pandas
display settings (full cell text, integers without scientific notation), and labkit's own
warnings as a line in the cell."""
from __future__ import annotations

import math


def say(text: str):
    """A computed sentence, rendered as markdown in a notebook (``IPython.display.Markdown``;
    its text is ``.data``). The names it quotes come from ledgers and reports: raw HTML in it is
    escaped (outside code spans), so a crafted step name shows as text and never runs."""
    from IPython.display import Markdown

    from labkit.safe_text import markdown_no_html

    return Markdown(markdown_no_html(text))


def number(x) -> str:
    """A table cell: whole numbers as integers with thousands separators, others with 4
    significant digits, never in scientific notation (pandas mixed ``1.2e+07`` with integers)."""
    if not math.isfinite(x):
        return str(x)
    if x == int(x) or abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}" if abs(x) >= 1e-4 else f"{x:.2e}"


def configure_pandas() -> None:
    """Show every cell in full (doctor's and the backends' fix text was cut at 50 characters)
    and floats through :func:`number`."""
    import pandas as pd

    pd.set_option("display.max_colwidth", None)
    pd.set_option("display.float_format", number)


def warnings_in_cells() -> None:
    """In a kernel, labkit's and labbook's own warnings (a flagged benchmark, flagged rows left
    out of a table, a report with no GPU activity) show as a markdown line in the cell that
    raised them, where a learner reads them, instead of a stderr box quoting a source line
    (which ipykernel often gets wrong). Other warnings keep Python's way; nothing outside a kernel."""
    import warnings

    from IPython import get_ipython

    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None or hasattr(warnings.showwarning, "labbook"):
        return
    python_way = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__module__.split(".")[0] not in ("labkit", "labbook"):
            return python_way(message, category, filename, lineno, file, line)
        from IPython.display import display

        from labkit.safe_text import markdown_cell

        display(say(f"**{category.__name__}:** {markdown_cell(message)}"))  # one line, its names as text

    show.labbook = True
    warnings.showwarning = show


class Status:
    """One line in a notebook cell that a long step updates in place (``IPython.display``
    with a display id), so the cell is not a silent ``[*]``; nothing outside a kernel."""

    def __init__(self, text: str):
        from IPython import get_ipython

        shell = get_ipython()
        self.handle = None
        if shell is not None and getattr(shell, "kernel", None) is not None:
            from IPython.display import display

            self.handle = display(say(text), display_id=True)

    def update(self, text: str) -> None:
        if self.handle is not None:
            self.handle.update(say(text))
