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
    assert "\\x1b]0;pwn\\x07" in out.splitlines()[0]  # the headline names the stage, shown


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


def _number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


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
