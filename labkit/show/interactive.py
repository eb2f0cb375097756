"""Interactive timeline of a report in JupyterLab: zoom, pan, and a hover naming each NVTX range,
kernel, copy and CUDA API call with its duration.

    labkit.plot_timeline(report, interactive=True)      # or labkit.interactive_timeline(report)

The rows and colours are the static timeline's (:func:`labkit.show.timeline.layout` and
:func:`labkit.show.timeline.colours`): a row per thread (with its tid) and NVTX domain and nesting
level, a CUDA API row above each GPU stream's row.

Built on Bokeh: it renders offline (BokehJS goes inline into the notebook, no CDN), in
JupyterLab 4 without an extension, and draws a few hundred thousand bars on a canvas with
hit-testing for the hover. Large reports stay quick: past ``max_bars`` bars, each row's events
of one name closer than a gap are merged into one bar (the gap doubles until the figure fits),
and the figure's title says how many events became how many bars.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.stats.idle import busy_intervals
from labkit.show.layout import colour_key, colours, layout

__all__ = ["interactive_timeline", "InteractiveTimeline"]

_KIND = {"name": "NVTX range", "osrt": "OS runtime call", "api": "CUDA API call", "category": None}


class InteractiveTimeline:
    """A Bokeh timeline that shows itself in a notebook cell; ``figure`` is the Bokeh figure,
    ``rows`` the row labels top to bottom, ``events`` how many events it covers and ``bars``
    how many bars it draws (fewer when merged), ``gap_ns`` the merge gap (0: nothing merged)."""

    def __init__(self, figure, rows, events: int, bars: int, gap_ns: int, *, names, whats, hexes):
        self.figure, self.rows, self.events, self.bars, self.gap_ns = figure, rows, events, bars, gap_ns
        self._lists = (names, whats)

    def table(self) -> pd.DataFrame:
        """The bars drawn, as the hover names them: name, what, row, start_ms, duration_ms,
        colour (hex) and events (1, or how many a merged bar holds)."""
        d = self.figure.renderers[0].data_source.data
        names, whats = self._lists
        labels = self.rows[::-1]
        return pd.DataFrame({
            "name": [names[i] for i in d["name"]], "what": [whats[i] for i in d["what"]],
            "row": [labels[i] for i in d["y"]], "start_ms": d["left"], "duration_ms": d["dur"],
            "colour": [f"#{int(c) >> 8:06x}" for c in d["color"]],
            "events": d["count"] if "count" in d else np.ones(len(d["left"]), dtype=np.int64)})

    def html(self) -> str:
        """A standalone HTML page of the figure, BokehJS inline (opens offline in any browser)."""
        from bokeh.embed import file_html
        from bokeh.resources import INLINE

        return file_html(self.figure, INLINE, title=self.figure.title.text)

    def save(self, path, *, overwrite: bool = False) -> None:
        """Write :meth:`html` to ``path`` atomically; a file labkit did not write is replaced only
        with ``overwrite=True`` (else OutputExistsError)."""
        from labkit.paths import atomic_write

        atomic_write(path, self.html(), overwrite=overwrite, what="timeline page")

    def _ipython_display_(self):
        # BokehJS inline with every display, so that a cell re-run after a page reload still draws
        from bokeh.io import output_notebook, show
        from bokeh.resources import INLINE

        output_notebook(INLINE, hide_banner=True)
        show(self.figure)

    def __repr__(self) -> str:
        return f"InteractiveTimeline({len(self.rows)} rows, {self.events} events, {self.bars} bars)"


def _bars(rows, cmap, w0, w1, gap_ns):
    """Per row and colour key, the events (or, with gap_ns > 0, merged runs of them) as columns."""
    cols = {k: [] for k in ("left", "right", "y", "color", "name", "what", "dur", "count")}
    for i, row in enumerate(rows):
        df, how = row.events, row.how
        y = len(rows) - 1 - i
        s = np.clip(df["start_ns"].to_numpy(np.int64), w0, w1)
        e = np.clip(df["end_ns"].to_numpy(np.int64), w0, w1)
        keys = colour_key(df, how)
        names = keys if how in ("name", "osrt") else df["name"].astype(str).to_numpy(dtype=object)
        what = df["category"].astype(str).to_numpy(dtype=object) if how == "category" \
            else np.full(len(df), _KIND[how], dtype=object)
        dur = df["duration_ns"].to_numpy(np.float64) / 1e6
        if gap_ns > 0:
            ms_all, me_all, nm, wh, du, ct, col = [], [], [], [], [], [], []
            for key in pd.unique(names):
                sel = names == key
                o = np.argsort(s[sel], kind="stable")
                ss, ee = s[sel][o], e[sel][o]
                ms, me = busy_intervals(ss, ee + gap_ns)
                me = np.maximum(me - gap_ns, ms)
                first = np.searchsorted(ss, ms, side="left")
                count = np.diff(np.append(first, len(ss)))
                ms_all.append(ms), me_all.append(me), ct.append(count)
                nm.append(np.full(len(ms), key, dtype=object))
                wh.append(np.full(len(ms), what[sel][0], dtype=object))
                busy = np.add.reduceat(dur[sel][o], first) if len(first) else np.empty(0)
                du.append(busy)
                col.append(np.full(len(ms), cmap.get(keys[sel][0], "#888888"), dtype=object))
            s, e = np.concatenate(ms_all), np.concatenate(me_all)
            names, what, dur = np.concatenate(nm), np.concatenate(wh), np.concatenate(du)
            count, colour = np.concatenate(ct), np.concatenate(col)
        else:
            count = np.ones(len(s), dtype=np.int64)
            colour = pd.Series(keys, dtype=object).map(cmap).fillna("#888888").to_numpy(dtype=object)
        cols["left"].append((s - w0) / 1e6)
        cols["right"].append((e - w0) / 1e6)
        cols["y"].append(np.full(len(s), y, dtype=np.float64))
        cols["color"].append(colour)
        cols["name"].append(names)
        cols["what"].append(what)
        cols["dur"].append(dur)
        cols["count"].append(count)
    return {k: np.concatenate(v) if v else np.empty(0) for k, v in cols.items()}


def interactive_timeline(report, *, window=None, max_depth: int = 2, max_bars: int = 250_000,
                         width: int = 1100, title: str | None = None) -> InteractiveTimeline:
    """The report's timeline as a zoomable Bokeh figure (same rows and colours as
    :func:`labkit.plot_timeline`), shown by a notebook cell that returns it.

    Args:
        report: a :class:`labkit.report.Report`.
        window: (start_ns, end_ns) on the report clock, or None for everything.
        max_depth: deepest NVTX nesting level drawn per thread and domain.
        max_bars: the most bars drawn; past it, events of one name in one row closer than a gap
            are merged (the title says so, and the hover gives each bar's event count).
        width: the figure's width in pixels (it stretches to the cell's width).
    Returns: an :class:`InteractiveTimeline` (``.figure`` is the Bokeh figure; ``.save(path)``
        writes a standalone HTML file).
    Raises: labkit.show.timeline.NothingToDraw when the window holds nothing to draw.
    """
    from bokeh.models import ColumnDataSource, CustomJSHover, FixedTicker, HoverTool
    from bokeh.plotting import figure

    rows, w0, w1 = layout(report, window=window, max_depth=max_depth)
    cmap = colours(rows)
    events = sum(len(r.events) for r in rows)
    gap = 0
    if events > max_bars:  # merge: start from the span over max_bars, double the gap until it fits
        gap = max(1, (w1 - w0) // max_bars)
        while True:
            cols = _bars(rows, cmap, w0, w1, gap)
            if len(cols["left"]) <= max_bars:
                break
            gap *= 2
    else:
        cols = _bars(rows, cmap, w0, w1, 0)
    bars = len(cols["left"])
    name = str(getattr(report, "path", "")).split("/")[-1]
    head = title or f"{name}: {events:,} events"
    if gap:
        head += (f" (merged into {bars:,} bars: events of one name in one row less than {gap / 1e3:,.0f} us "
                 f"apart are one bar; pass window= to see each)")
    height = min(max(24 * len(rows) + 90, 200), 900)
    fig = figure(width=width, height=height, title=head, x_range=((0.0), (w1 - w0) / 1e6),
                 y_range=(-0.6, len(rows) - 0.4), tools="xpan,xwheel_zoom,xbox_zoom,reset,save",
                 active_scroll="xwheel_zoom", active_drag="xpan", sizing_mode="stretch_width",
                 x_axis_label="time (ms from window start)", output_backend="canvas")
    # texts as codes into short lists, colours as packed RGBA: every column travels as binary
    name_codes, names = pd.factorize(cols["name"])
    what_codes, whats = pd.factorize(cols["what"])
    colour_codes, hexes = pd.factorize(cols["color"])
    rgba = np.array([int(h[1:7], 16) << 8 | 0xFF for h in hexes], dtype=np.uint32)
    data = {"left": cols["left"], "right": cols["right"], "y": cols["y"].astype(np.int32),
            "color": rgba[colour_codes] if len(rgba) else np.empty(0, np.uint32),
            "name": name_codes.astype(np.int32), "what": what_codes.astype(np.int8),
            "dur": cols["dur"].astype(np.float64)}
    if gap:
        data["count"] = cols["count"].astype(np.int32)
    src = ColumnDataSource(data)
    fig.hbar(y="y", left="left", right="right", height=0.8, fill_color="color", line_color="color", line_width=1,
             source=src)  # a bar too short for a pixel still shows (and hovers): its 1-pixel outline
    labels = [r.label for r in rows][::-1]  # by y
    look = {k: CustomJSHover(args={"items": [str(x) for x in items]}, code="return items[value]")
            for k, items in (("@name", names), ("@what", whats), ("@y", labels))}
    tips = [("", "@name{custom}"), ("what", "@what{custom}"), ("row", "@y{custom}"),
            ("start", "@left{0,0.000} ms"), ("duration", "@dur{0,0.000} ms")]
    if gap:  # a merged bar: its events' summed duration, and how many they are
        tips[-1] = ("duration (its events, summed)", "@dur{0,0.000} ms")
        tips.append(("events", "@count"))
    fig.add_tools(HoverTool(tooltips=tips, formatters=look, renderers=[fig.renderers[-1]]))
    fig.yaxis.ticker = FixedTicker(ticks=list(range(len(rows))))
    fig.yaxis.major_label_overrides = {len(rows) - 1 - i: r.label for i, r in enumerate(rows)}
    fig.ygrid.grid_line_color = None
    fig.toolbar.logo = None
    return InteractiveTimeline(fig, [r.label for r in rows], events, bars, gap, names=list(names),
                               whats=list(whats), hexes=list(hexes))
