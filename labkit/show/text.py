"""The command line's short text: one line per finding (at most :data:`WIDTH` characters), the report's
notes before them, and ``--explain``'s evidence wrapped at the same width. Plain Python (no pandas), so
the commands that print it import nothing they do not need."""
from __future__ import annotations

import math
import textwrap

from labkit.safe_text import terminal

__all__ = ["WIDTH", "fit", "wrapped", "note_lines", "finding_line", "advise_lines", "bottleneck_lines"]

WIDTH = 100
"""The longest line a command prints in its short form (``nsys analyze`` prints short paragraphs)."""


def fit(text, width: int = WIDTH) -> str:
    """``text`` shown (control characters escaped) on one line of at most ``width`` characters, cut
    with "…" where longer."""
    line = " ".join(terminal(text).split())
    return line if len(line) <= width else line[:width - 1] + "…"


def wrapped(text, *, indent: str = "", then: str | None = None, width: int = WIDTH) -> list[str]:
    """``text`` shown and wrapped into lines of at most ``width`` characters, the first after
    ``indent``, the others after ``then`` (default: ``indent``); a word longer than a line (a
    kernel name) is broken."""
    return textwrap.wrap(" ".join(terminal(text).split()), width=width, initial_indent=indent,
                         subsequent_indent=indent if then is None else then, break_long_words=True,
                         break_on_hyphens=False) or [indent]


def note_lines(notes) -> list[str]:
    """The notes of a report (what its export lacks, a run cut short), each "note: ...", wrapped at
    :data:`WIDTH` (a note is never cut: it says what the figures after it mean)."""
    return [line for n in dict.fromkeys(str(n) for n in notes or [])
            for line in wrapped(f"note: {n}", then="      ")]


def _number(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else v


def finding_line(i: int, row: dict) -> str:
    """A finding of :func:`labkit.advise` on one line: what, where (its stage), and the predicted
    speed-up with its basis ("bound": the most the lever can give; "estimate"); the finding's
    words are cut, never the figure."""
    sp = _number(row.get("predicted_speedup"))
    basis = "bound" if row.get("basis") == "bound" else "estimate"
    figure = f"{'up to ' if basis == 'bound' else '~'}{sp:.2f}x ({basis})" if sp is not None else f"({basis})"
    stage = row.get("stage")
    where = f" [stage {terminal(stage)}]" if isinstance(stage, str) and stage and f"'{stage}'" not in str(
        row.get("finding")) else ""
    lever = f" -> {terminal(row['lever'])}" if isinstance(row.get("lever"), str) and row.get("lever") else ""
    tail = f"{where}{lever}: {figure}"
    head = f"{i}. "
    room = WIDTH - len(head) - len(tail)
    if room < 30:  # a very long stage name: cut it, keep the finding's start and the figure
        tail = fit(where, WIDTH - len(head) - 30 - len(figure) - len(lever) - 2) + f"{lever}: {figure}"
        room = WIDTH - len(head) - len(tail)
    return head + fit(row.get("finding") or row.get("rule") or "finding", room) + tail


def advise_lines(rows: list[dict], attrs: dict, notes, *, explain: bool = False) -> list[str]:
    """``advise``'s text: the notes, then one line per finding (``explain``: each with its evidence,
    lever and assumptions, and the window judged, wrapped at :data:`WIDTH`)."""
    out = note_lines(notes)
    if not rows:
        return out + wrapped(attrs.get("note") or "no findings")
    if explain:
        out += wrapped(attrs.get("note") or "")
    for i, r in enumerate(rows, 1):
        out.append(finding_line(i, r))
        if explain:
            lever = r.get("lever_text") or r.get("lever")
            out += wrapped(f"evidence: {r.get('evidence')}", indent="   ")
            out += wrapped(f"lever: {lever} ({r.get('lever')})", indent="   ")
            out += wrapped(f"assumes: {r.get('assumptions')}", indent="   ")
    return out


def _candidates(b) -> list[tuple[str, str, float]]:
    """(kind, words, busy share of the window) of everything that could limit a run: the SMs, the
    copy engines, and each thread (with its busiest stage) of the bottleneck's table."""
    out = [("gpu", "the GPU's SMs", float(b.gpu_busy_frac or 0.0)),
           ("copies", "the copy engines", float(b.copy_busy_frac or 0.0))]
    table = b.table
    if table is not None and len(table):
        seen: set = set()
        for r in table.sort_values("self_ms", ascending=False).to_dict(orient="records"):
            if r["thread"] in seen:
                continue
            seen.add(r["thread"])
            out.append(("thread:" + str(r["thread"]), f"thread {terminal(r['thread'])}, mostly '{terminal(r['stage'])}'",
                        float(r["thread_busy_frac"] or 0.0)))
    return out


def _limiter_kind(b) -> str | None:
    if b.sentence.startswith("Copies"):
        return "copies"
    if b.gpu_bound:
        return "gpu"
    if b.thread:
        return "thread:" + str(b.thread)
    return None


def bottleneck_lines(b, notes, *, explain: bool = False) -> list[str]:
    """``bottleneck``'s text: the notes, the limiter (the sentence's first clause and its busy share),
    the runner-up (the next busiest engine or thread) and the window judged; ``explain`` adds the
    whole sentence, wrapped at :data:`WIDTH`."""
    out = note_lines(notes)
    cands = _candidates(b)
    kind = _limiter_kind(b)
    wall = f" of {b.wall_ms:,.1f} ms" if b.wall_ms else ""
    if b.sentence.startswith("No thread or engine"):  # nothing limited it: name the busiest instead
        busiest = max(cands, key=lambda c: c[2])
        out.append(fit(f"limiter: none busy most of the window; the busiest, {busiest[1]}, {busiest[2]:.0%}{wall}"))
        kind = busiest[0]
        first = None
    elif b.sentence.startswith("No NVTX ranges") and ": " in b.sentence:  # the thread, with no stage to name
        first = b.sentence.split(": ", 1)[1].split(" was ")[0] + ", no stage named (no NVTX ranges)"
    else:
        first = b.sentence.split(": ")[0].split("; ")[0].rstrip(".")
    if first is not None:
        share = float(b.thread_busy_frac) if kind and kind.startswith("thread:") else \
            next((f for k, _, f in cands if k == kind), None)
        figure = f" (busy {share:.0%}{wall})" if share is not None else ""
        out.append("limiter: " + fit(first, WIDTH - 9 - len(figure)) + figure)
    rest = sorted(((f, w) for k, w, f in cands if k != kind and f > 0), reverse=True)
    if rest:
        f, w = rest[0]
        tail = f", busy {f:.0%}{wall}"
        out.append("runner-up: " + fit(w, WIDTH - 11 - len(tail)) + tail)
    else:
        out.append("runner-up: none (no other engine or thread was busy in the window)")
    if b.where:
        out.append(fit(f"window: {b.where.replace(': start-up, compilation, first iterations)', ')')}"))
    if explain:
        out += wrapped(b.sentence)
    return out


def narrow_text_columns(widths: dict, text: list, width: int | None) -> dict:
    """Narrow the widest text column, again and again, until a table of these column ``widths`` (two
    spaces between columns) fits ``width`` or no text column is wider than 12; numbers are never cut.
    Changes and returns ``widths``."""
    while width and text:
        over = sum(widths.values()) + 2 * (len(widths) - 1) - width
        widest = max(text, key=widths.get)
        if over <= 0 or widths[widest] <= 12:
            break
        widths[widest] = max(12, len(str(widest)), widths[widest] - over)
    return widths


def plain_table(columns: list[str], rows: list[list], numeric: set, *, width: int | None = None,
                places: dict | None = None) -> str:
    """:func:`labkit.cli.text_table` of plain rows (no pandas: ``summary``'s fast start), line for line
    the same text: whole numbers as integers, others in fixed point (``places``: decimals per column),
    text cut with "…" (12 characters at least) so each line fits ``width`` where the numbers leave room."""
    cells = {}
    for j, c in enumerate(columns):
        col = [r[j] for r in rows]
        if c in numeric:
            vals = [float(v) for v in col if v is not None]
            n = (places or {}).get(c, 0 if all(v == round(v) for v in vals) else
                                   1 if max((abs(v) for v in vals), default=0) >= 10 else 3)
            cells[c] = ["" if v is None else f"{float(v):.{n}f}" for v in col]
        else:
            cells[c] = [terminal(v) for v in col]
    widths = {c: max(len(terminal(c)), max((len(v) for v in cells[c]), default=0)) for c in columns}
    text = [c for c in columns if c not in numeric]
    narrow_text_columns(widths, text, width)
    for c in text:
        w = widths[c]
        cells[c] = [v if len(v) <= w else v[:w - 1] + "…" for v in cells[c]]

    def line(values) -> str:
        return "  ".join(v.rjust(widths[c]) if c in numeric else v.ljust(widths[c])
                         for c, v in zip(columns, values)).rstrip()

    return "\n".join([line([terminal(c) for c in columns])] + [line(r) for r in zip(*(cells[c] for c in columns))])
