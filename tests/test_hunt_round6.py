"""Issue 33, round 6 of the hunt: classes the earlier files leave out. Each test failed on 66c3fc5
(a traceback, text a terminal obeyed, a silently resolved ambiguity, a wrong fix in the message)."""
from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
import warnings
from pathlib import Path

import pytest

from labkit import safe_text
from labkit.cli import main

from test_untrusted_text import _number

FIX = Path(__file__).resolve().parent / "fixtures"
SMALL = FIX / "domains.nsys2022.4.sqlite"
HOSTILE = "-2+3\x07\x1b]0;pwn\x07"  # a formula, a bell and the escape that sets the terminal's title
TAIL = "\u202e\x1b[2J<b>x</b>|`$"  # a right-to-left override, clear-screen, HTML, markdown, mathtext
RAW = ("\x1b", "\x07", "\u202e")


def _hostile(tmp_path: Path, source: Path = FIX / "pipeline.nsys2022.4.sqlite", name: str = "hostile.sqlite") -> Path:
    """A copy of a real export whose every string (range, thread and process names) carries
    :data:`HOSTILE` before it and :data:`TAIL` after it."""
    db = tmp_path / name
    shutil.copy(source, db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE StringIds SET value = ? || value || ?", (HOSTILE, TAIL))
    return db


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("labkit: "), err
    return lines[0]


# ----------------------------------------------------------------------------- family 3: arguments
@pytest.mark.parametrize("window", ["nan,1", "0,inf", "1e400,2", "-inf,nan"])
@pytest.mark.parametrize("command", [["advise"], ["bottleneck"], ["kernels"], ["timeline", "-o", "t.png"]])
def test_a_window_that_is_not_finite_is_one_line(tmp_path, capsys, command, window):
    with pytest.raises(SystemExit) as e:
        main([command[0], str(SMALL), *command[1:], f"--window={window}"])
    assert e.value.code == 2
    assert "finite" in _one_line(capsys.readouterr().err)


def test_compare_with_a_window_that_is_not_finite_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["compare", str(SMALL), str(SMALL), "--window", "nan,inf"])
    assert e.value.code == 2 and "finite" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("args", [["summary", "a" * 5000], ["advise", "a" * 5000], ["bottleneck", "b" * 300],
                                  ["timeline", str(SMALL), "-o", "c" * 300 + ".png"]])
def test_a_path_too_long_to_look_at_is_one_line(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 1
    line = _one_line(capsys.readouterr().err)
    assert "255 bytes" in line and "shorter name" in line and len(line) < 400


# ----------------------------------------------------------------------------- family 1: text at the terminal
def test_bottleneck_prints_names_from_the_report_as_text(tmp_path, capsys):
    assert main(["bottleneck", str(_hostile(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in RAW), out[:300]
    limiter = next(line for line in out.splitlines() if line.startswith("limiter: "))
    assert "\\x1b]0;pwn\\x07" in limiter  # the limiter names the stage, shown


def test_a_report_file_name_with_escapes_is_shown_in_every_line(tmp_path, capsys):
    odd = tmp_path / "ev\x1b]0;pwn\x07il\x1b[2J\u202e.sqlite"
    shutil.copy(SMALL, odd)
    assert main(["advise", str(odd), "--within", "nope"]) == 1  # the error names the file
    assert main(["summary", str(odd), "--what", "kernels"]) == 0  # a note and "(no kernels data in ...)"
    assert main(["timeline", str(odd), "-o", str(tmp_path / "t\x1b[2J.png")]) == 0  # "wrote ..."
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "no NVTX range named 'nope'" in text and "(no kernels data in" in text and "wrote " in text
    assert not any(c in text for c in RAW), text


@pytest.mark.parametrize("command", [["advise", "--csv"], ["bottleneck", "--csv"], ["summary", "--csv", "--what",
                                                                                   "stages,nvtx"]])
def test_csv_on_the_terminal_carries_no_escape_and_stays_csv(tmp_path, capsys, command):
    assert main([command[0], str(_hostile(tmp_path)), *command[1:]]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in RAW), out[:300]
    rows = list(csv.reader(io.StringIO(out.split("\n# ")[0])))
    cells = [c for r in rows[1:] for c in r]
    assert any("\\x1b]0;pwn\\x07" in c for c in cells)
    assert not any(c.startswith(("=", "+", "-", "@")) for c in cells if not _number(c))


def test_csv_field_shows_controls_but_keeps_lines_and_tabs():
    assert safe_text.csv_field("=a\x1b[2J\u202e") == "'=a\\x1b[2J\\u202e"
    assert safe_text.csv_field("\tx") == "'\tx" and safe_text.csv_field("a\nb\tc") == "a\nb\tc"
    assert safe_text.terminal_lines("a\x1b[31m\r\n\tb\x07") == "a\\x1b[31m\r\n\tb\\x07"


# ----------------------------------------------------------------------------- family 3: report contents
def test_text_in_a_time_column_is_a_report_error_naming_the_table(tmp_path, capsys):
    db = tmp_path / "text_times.sqlite"
    shutil.copy(SMALL, db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE NVTX_EVENTS SET start = 'abc' WHERE rowid % 2 = 0")
    assert main(["summary", str(db)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "NVTX_EVENTS" in line and "export it again" in line


# ----------------------------------------------------------------------------- family 3: ledgers
ROW = {"step": "baseline", "metrics": {"fps": 10.0}}


@pytest.mark.parametrize("line,words", [
    ('{"step": "b\\ud800", "metrics": {"fps": 20}}', "not valid Unicode"),
    ('{"step": "b", "metrics": {"fps": 20}, "env": {"host": "\\udfff"}}', "not valid Unicode"),
    ('{"step": "b", "step": "baseline", "metrics": {"fps": -5}}', "field 'step' is given twice"),
    ('{"step": "b", "metrics": {"fps": 20, "fps": 2000}}', "field 'fps' is given twice")])
def test_ledger_lines_with_lone_surrogates_or_twice_given_fields_are_skipped(tmp_path, capsys, line, words):
    from labkit.bench.ledger import Ledger, LedgerWarning

    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(ROW) + "\n" + line + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = Ledger(path).rows()
    assert [(r["step"], r["metrics"]["fps"]) for r in rows] == [("baseline", 10.0)]
    assert any(f"{path}:2:" in str(w.message) and words in str(w.message) for w in caught
               if w.category is LedgerWarning)
    assert main(["table", str(path)]) == 0  # a traceback (UnicodeEncodeError) before, for the surrogates
    out = capsys.readouterr().out
    assert "| baseline |" in out and "-5" not in out and "2000" not in out


# ----------------------------------------------------------------------------- family 3: --scheduler
@pytest.mark.parametrize("scheduler,words", [("tcp://", "is not valid"), ("tcp://host:abc", "is not valid"),
                                             ("xyz://a:1", "is not valid"), ("file:garbage", "not a Dask scheduler file"),
                                             ("file:number", "not a Dask scheduler file")])
def test_a_scheduler_address_or_file_that_is_not_one_is_one_line(tmp_path, capsys, scheduler, words):
    (tmp_path / "garbage").write_text("{garbage")
    (tmp_path / "number").write_text('{"address": 5}')
    if scheduler.startswith("file:"):
        scheduler = str(tmp_path / scheduler[5:])
    rank = [str(FIX / "ranks.nsys2022.4_0.sqlite"), str(FIX / "ranks.nsys2022.4_1.sqlite")]
    assert main(["summary", *rank, "--what", "nvtx", "--scheduler", scheduler]) == 1
    line = _one_line(capsys.readouterr().err)
    assert words in line and "scheduler='local'" in line


# ----------------------------------------------------------------------------- family 2: writes
def test_timeline_over_a_folder_or_a_file_is_refused_before_drawing(tmp_path, capsys):
    (tmp_path / "d.png").mkdir()
    assert main(["timeline", str(SMALL), "-o", str(tmp_path / "d.png"), "--overwrite"]) == 1
    assert "it is a folder: pass a file path" in _one_line(capsys.readouterr().err)
    mine = tmp_path / "mine.png"
    mine.write_text("mine")
    assert main(["timeline", str(SMALL), "-o", str(mine)]) == 1
    assert "--overwrite" in _one_line(capsys.readouterr().err) and mine.read_text() == "mine"
    assert main(["timeline", str(SMALL), "-o", str(mine), "--overwrite"]) == 0
    assert mine.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args", [["table", "{ledger}", "--output", "o" * 300 + ".md"],
                                  ["export", "--perfetto", str(SMALL), "-o", "p" * 300 + ".json"],
                                  ["table", "l" * 300 + ".jsonl"], ["compare", str(SMALL), "r" * 300 + ".sqlite"]])
def test_other_commands_given_a_name_too_long_are_one_line(tmp_path, monkeypatch, capsys, args):
    from labkit.bench.ledger import Ledger

    monkeypatch.chdir(tmp_path)
    Ledger(tmp_path / "ledger.jsonl").append({**ROW, "env": {"host": "h"}})
    assert main([a.replace("{ledger}", str(tmp_path / "ledger.jsonl")) for a in args]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "255 bytes" in line and "shorter name" in line and len(line) < 400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.jsonl"]


@pytest.mark.parametrize("relative", [False, True])
def test_labkit_reports_too_long_names_the_variable(tmp_path, monkeypatch, capsys, relative):
    monkeypatch.chdir(tmp_path)  # a relative value is under the project: nothing is created there either
    monkeypatch.setenv("LABKIT_REPORTS", "r" * 300 if relative else str(tmp_path / ("r" * 300)))
    assert main(["table"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "shorter name" in line and "set LABKIT_REPORTS to another folder" in line


# ----------------------------------------------------------------------------- family 1: names that become files
@pytest.mark.parametrize("name", ["report\u202egnp.exe", "a\x85b", "a\u2028b", "a\u2066b"])
def test_a_name_with_a_bidi_override_or_c1_control_never_becomes_a_file(tmp_path, capsys, name):
    from labkit.paths import NameError_, check_name

    with pytest.raises(NameError_, match="control character"):
        check_name(name, what="report name")
    assert main(["profile", "--name", name, "--outdir", str(tmp_path / "out"), "--", "true"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "report name" in line and not any(c in line for c in name if not c.isalnum() and c != ".")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_plot_labels_show_control_characters_and_draw_without_glyph_warnings(tmp_path):
    import labkit

    odd = tmp_path / "t\x1b[2J\x07.sqlite"
    shutil.copy(SMALL, odd)
    assert safe_text.mathtext("a\n(on $b$)\x1b") == "a\n(on \\$b\\$)\\x1b"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = labkit.plot_timeline(labkit.load_report(odd))
        fig.savefig(io.BytesIO(), format="png")
    assert not [w for w in caught if "Glyph" in str(w.message)]
    assert fig.axes[0].get_title() == "t\\x1b[2J\\x07.sqlite"
