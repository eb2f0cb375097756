"""How the lab shows text and tables in a notebook: computed sentences as markdown, pandas
display settings (full cell text, integers without scientific notation), and labkit's own
warnings as a line in the cell."""
from __future__ import annotations

import functools
import math


def say(text: str):
    """A computed sentence, rendered as markdown in a notebook (``IPython.display.Markdown``;
    its text is ``.data``). The names it quotes come from ledgers and reports: raw HTML in it is
    escaped (outside code spans), so a crafted step name shows as text and never runs."""
    from IPython.display import Markdown

    from labkit.safe_text import markdown_no_html

    return Markdown(markdown_no_html(text))


def folded(line: str, why: str, summary: str = "Why"):
    """One computed line, and its explanation under a fold (``<details>``, closed): markdown like
    :func:`say`'s, each text's raw HTML escaped; the fold is the lab's own. No ``why``: the line alone."""
    from IPython.display import Markdown

    from labkit.safe_text import markdown_no_html

    if not why:
        return say(line)
    return Markdown(f"{markdown_no_html(line)}\n\n<details><summary>{summary}</summary>\n\n{markdown_no_html(why)}"
                    "\n\n</details>\n")


@functools.cache  # one class (pandas imported on first use, not when labbook.text is)
def _folded_frame_class():
    import pandas as pd

    class FoldedFrame(pd.DataFrame):
        """A frame shown as its short columns (``shown``), each row's long text cells under one fold
        (``folded``, closed): a frame to code like any other, a table to read at a glance."""

        _metadata = ["shown", "folded", "summary"]

        @property
        def _constructor(self):
            return FoldedFrame

        def _repr_html_(self):
            import html

            shown = [c for c in (self.shown or []) if c in self.columns] or list(self.columns)
            table = pd.DataFrame(self[shown])._repr_html_()
            long = [c for c in (self.folded or []) if c in self.columns]
            if not long or self.empty:
                return table
            items = []
            for _, row in self.iterrows():
                parts = [f"<b>{html.escape(str(c))}</b>: {html.escape(str(row[c]))}" for c in long
                         if isinstance(row[c], str) and row[c]]
                head = html.escape(str(row[shown[0]]))
                items.append(f"<li>{head}<br>{'<br>'.join(parts)}</li>" if parts else f"<li>{head}</li>")
            return (f"{table}<details><summary>{html.escape(self.summary or 'Why')}</summary><ol>{''.join(items)}"
                    "</ol></details>")

    return FoldedFrame


def folded_frame(frame, shown, folded, summary: str = "Why"):
    """``frame`` (its every column kept, for code), shown in a notebook as its ``shown`` columns
    with the ``folded`` ones (long text: evidence, assumptions) per row under one closed fold.
    Names from reports are escaped (pandas' own table; ``html.escape`` in the fold)."""
    out = _folded_frame_class()(frame)
    out.shown, out.folded, out.summary = list(shown), list(folded), summary
    return out


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
