"""Issue 33, untrusted text: a name from someone else's ledger or report is data at every exit
(HTML in a real headless Chromium, markdown, CSV, terminal tables, matplotlib), never markup, a
formula, a row, a terminal command or mathtext. Each test failed before labkit.safe_text."""
from __future__ import annotations

import csv
import io
import os
import shutil
import sqlite3
import sys
import warnings
from pathlib import Path

import pytest

from labkit import safe_text
from labkit.bench.ledger import Ledger
from labkit.bench.tables import class_view, speedup_table

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "annotated.nsys2022.4.sqlite"
IMG = "<img src=x onerror=\"document.title='pwned'\">"
SCRIPT = "<script>document.title='pwned2'</script>"
FORMULA = "=cmd|' /C calc'!A0"


def _hostile_class(folder: Path) -> Path:
    folder.mkdir()
    env = {"gpu": None, "cpu": "x", "host": IMG}
    led = Ledger(folder / "alice.jsonl")
    for step, fps in (("baseline", 10.0), (SCRIPT, 20.0), ("queues|99.99x|fake", 30.0)):
        led.append({"step": step, "env": env, "metrics": {"fps": fps}, "provenance": {"mode": SCRIPT}})
    return folder


def test_safe_text_rules():
    assert safe_text.html(IMG) == "&lt;img src=x onerror=&quot;document.title=&#x27;pwned&#x27;&quot;&gt;"
    assert safe_text.markdown_cell("a|b\nc`d`<b>") == "a\\|b\\\\x0ac\\`d\\`&lt;b&gt;"
    assert [safe_text.csv_field(v) for v in ("=1+1", "+1", "-1", "@x", "\tx", "\rx", "ok", -1.5)] == \
        ["'=1+1", "'+1", "'-1", "'@x", "'\tx", "'\rx", "ok", -1.5]
    assert safe_text.terminal("a\x1b[2Jb\nc\u202ed") == "a\\x1b[2Jb\\x0ac\\u202ed"
    assert safe_text.mathtext("$x^2$") == r"\$x^2\$"
    assert safe_text.markdown_no_html("**<b>x</b>** `<i>`") == "**&lt;b&gt;x&lt;/b&gt;** `<i>`"
    assert safe_text.terminal("caf\udce9") == "caf\\xe9"  # a non-UTF-8 name decoded with surrogateescape


@pytest.mark.alone  # headless Chromium, as the browser tests
def test_class_view_html_runs_no_script_in_chromium(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import browser_lab

    html = class_view(_hostile_class(tmp_path / "class"))._repr_html_()
    assert "<img" not in html and "<script" not in html
    why = browser_lab.missing()
    if why:
        if os.environ.get("LABKIT_REQUIRE_BROWSER"):
            pytest.fail(f"LABKIT_REQUIRE_BROWSER is set but {why}", pytrace=False)
        pytest.skip(why)
    md = speedup_table(tmp_path / "class" / "alice.jsonl").to_markdown()
    import mistune  # markdown rendered with raw HTML passed through, as a trusted notebook output is

    page = tmp_path / "page.html"
    page.write_text(f"<html><head><title>safe</title></head><body>{html}{mistune.html(md)}</body></html>")
    with browser_lab.chromium() as driver:
        driver.get(page.as_uri())
        assert driver.execute_script("return document.readyState") == "complete"
        assert driver.title == "safe"
        assert driver.execute_script("return document.querySelectorAll('img, script').length") == 0
        text = driver.execute_script("return document.body.innerText")
    assert "onerror=\"document.title='pwned'\"" in text and "<script>" in text


def test_markdown_table_has_no_forged_row_or_column(tmp_path):
    import mistune

    t = speedup_table(_hostile_class(tmp_path / "class") / "alice.jsonl")
    md = t.to_markdown()
    html = mistune.create_markdown(plugins=["table"], escape=False)(md)
    assert html.count("<tr>") == 4  # header, baseline, the script step, the piped step
    assert html.count("<td") == 3 * 3 and "99.99x" in html and "<img" not in html and "<script" not in html


def test_warning_in_a_cell_shows_the_name_as_text(monkeypatch):
    from labbook import text

    class Shell:
        kernel = object()

    shown = []
    monkeypatch.setattr("IPython.get_ipython", lambda: Shell())
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    text.warnings_in_cells()
    from labkit.bench.tables import SpeedupWarning

    warnings.showwarning(f"step {SCRIPT}\n| forged |", SpeedupWarning, "x.py", 1)
    data = shown[0].data
    assert "<script" not in data and "\n" not in data and "\\|" in data
    assert "<img" not in text.say(f"No verdict for '{IMG}'").data


def _hostile_report(tmp_path) -> Path:
    db = tmp_path / "hostile.sqlite"
    shutil.copy(FIXTURE, db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE StringIds SET value = ? WHERE id = 89", (FORMULA,))
        c.execute("UPDATE StringIds SET value = ? WHERE id = 90", ("wait\n| forged | row\x1b[2J",))
    return db


def test_summary_csv_and_terminal_table_neutralise_names(tmp_path, capsys):
    from labkit.cli import main

    db = _hostile_report(tmp_path)
    assert main(["summary", str(db), "--csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    names = [r[rows[0].index("name")] for r in rows[1:]]
    assert "'" + FORMULA in names and FORMULA not in names
    assert not any(cell.startswith(("=", "+", "-", "@")) for r in rows for cell in r if not _number(cell))
    assert main(["summary", str(db), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "wait\\x0a| forged | row\\x1b[2J" in out
    lines = out.splitlines()
    assert len(lines) == 1 + len(names)  # one line per range: the newline split none
    assert main(["compare", str(db), str(FIXTURE), "--csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert any(c == "'" + FORMULA for r in rows for c in r) and not any(c == FORMULA for r in rows for c in r)


def _number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def test_matplotlib_labels_are_never_mathtext(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from labkit.bench import charts

    led = Ledger(tmp_path / "l.jsonl")
    for step, fps in (("baseline", 10.0), ("$\\frac{a}{$", 20.0), ("$x^2$", 30.0)):
        led.append({"step": step, "env": {"gpu": None, "host": "$\\undefinedmacro$"}, "metrics": {"fps": fps}})
    fig = charts.speedup_bars(speedup_table(led.path))
    FigureCanvasAgg(fig).draw()  # a mathtext parse error raised here before
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[1] == "\\$\\frac{a}{\\$" and labels[2] == "\\$x^2\\$"
