"""One rule for untrusted text at every exit: a step, range, host or file name read from a report or
a ledger (someone else's, maybe) is data, never markup, a formula, a terminal command or mathtext.

Every place labkit shows such text passes it through one of these, chosen by where it goes:

- :func:`html` for HTML (the class view's Styler, a widget): ``<img onerror=...>`` stays text;
- :func:`markdown_cell` for one cell or one line of markdown (a table row, a warning in a cell):
  ``|`` cannot forge a column, a newline cannot start a row, HTML and backticks show as typed;
  :func:`markdown_no_html` for a whole markdown text of ours that quotes names (raw HTML escaped
  outside code spans);
- :func:`csv_field` / :func:`csv_frame` for CSV: a field starting ``= + - @`` TAB or CR gets a
  leading ``'`` (OWASP's advice against formula injection in spreadsheets), and its control
  characters but newline, tab and carriage return are shown as :func:`terminal` shows them;
- :func:`terminal` for a terminal: control characters (and bidirectional overrides) shown as
  ``\\xNN``/``\\uNNNN``, never obeyed; :func:`terminal_lines` the same for a whole text of lines
  (newline, tab and carriage return kept): what the command line writes to stdout and stderr;
- :func:`mathtext` for matplotlib: ``$`` escaped, so a name is never parsed as mathtext, and
  control characters but newline shown as ``\\xNN``.
"""
from __future__ import annotations

import re

__all__ = ["html", "markdown_cell", "markdown_no_html", "csv_field", "csv_frame", "terminal", "terminal_lines",
           "mathtext", "has_control"]

# C0 and C1 controls, DEL, and the invisible direction controls that reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_CONTROL_IN_LABELS = re.compile(_CONTROL.pattern.replace("\x00-\x1f", "\x00-\x09\x0b-\x1f"))
_CONTROL_IN_LINES = re.compile(_CONTROL.pattern.replace("\x00-\x1f", "\x00-\x08\x0b\x0c\x0e-\x1f"))


def _escape(text: str, quote: bool) -> str:
    """``html.escape``, imported on first use (html's entity table is 2 ms of every command's start)."""
    import html

    return html.escape(text, quote=quote)


def _show(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def _str(text) -> str:
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    text = str(text)
    # lone surrogates (a non-UTF-8 file name decoded with surrogateescape) cannot be encoded for output
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") \
        if re.search("[\ud800-\udfff]", text) else text


def terminal(text) -> str:
    """``text`` with every control character shown as ``\\xNN`` (``\\uNNNN`` above 0xff): one line,
    no escape sequence a terminal would obey, nothing reordered."""
    return _CONTROL.sub(lambda m: _show(m.group()), _str(text))


def has_control(text) -> bool:
    """True when ``text`` holds a character :func:`terminal` would show as ``\\xNN``/``\\uNNNN``
    (C0 or C1 control, DEL, a bidirectional control, a line or paragraph separator)."""
    return _CONTROL.search(_str(text)) is not None


def terminal_lines(text) -> str:
    """:func:`terminal`'s rule for a text of several lines: newline, tab and carriage return kept
    (a table, CSV, a progress bar), every other control character shown as ``\\xNN``."""
    return _CONTROL_IN_LINES.sub(lambda m: _show(m.group()), _str(text))


def html(text) -> str:
    """``text`` escaped for HTML (element content and quoted attributes)."""
    return _escape(_str(text), quote=True)


_MD_SPECIAL = re.compile(r"([\\`|\[\]])")


def markdown_cell(text) -> str:
    """``text`` as one markdown cell or line: control characters (newlines included) shown as
    ``\\xNN``, ``& < >`` as entities, and ``\\ ` | [ ]`` backslash-escaped, so it renders as the
    text it is and never splits a row, forges a column, opens a link or code span, or runs HTML."""
    return _MD_SPECIAL.sub(r"\\\1", _escape(terminal(text), quote=False))


_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def markdown_no_html(text) -> str:
    """A markdown text of ours that quotes names: raw HTML (``& < >``) escaped outside code spans,
    where markdown would pass it to the browser; the markdown itself is kept."""
    text, out, pos = _str(text), [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_escape(text[pos:m.start()], quote=False))
        out.append(m.group())
        pos = m.end()
    out.append(_escape(text[pos:], quote=False))
    return "".join(out)


def csv_field(value):
    """A CSV field that a spreadsheet shows as text: a string starting with ``= + - @``, TAB or CR
    gets a leading ``'`` (OWASP, CSV injection), and control characters but newline, tab and
    carriage return are shown as ``\\xNN`` (an escape sequence printed with the CSV is never
    obeyed by the terminal); other values unchanged."""
    if not isinstance(value, str):
        return value
    value = terminal_lines(value)
    return "'" + value if value.startswith(_FORMULA) else value


def csv_frame(df):
    """A copy of a DataFrame whose text cells and headers went through :func:`csv_field`."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    out = df.copy()
    for c in out.columns:
        if not is_numeric_dtype(out[c]) or is_bool_dtype(out[c]):
            out[c] = out[c].astype(object).map(csv_field)
    out.columns = [csv_field(str(c)) if isinstance(c, str) else c for c in out.columns]
    return out


def mathtext(text) -> str:
    """``text`` for a matplotlib label: ``$`` escaped, so data is never parsed as mathtext (a
    crafted name would raise at draw time or render as formulas), and control characters but
    newline shown as :func:`terminal` shows them (no font has a glyph for them: a box and a
    warning each)."""
    return _CONTROL_IN_LABELS.sub(lambda m: _show(m.group()), _str(text)).replace("$", r"\$")
