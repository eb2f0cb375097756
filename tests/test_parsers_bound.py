"""Issue 33, parsers that validate and bound: one schema for ledger rows (a bad row is skipped
with a warning naming line and field), "latest" by order of append, and crafted SQLite exports
(a view over a recursive CTE, a string id of 10**12) each one ReportError naming the table, fast."""
from __future__ import annotations

import json
import shutil
import sqlite3
import warnings
from pathlib import Path

import pytest

from labkit.bench.ledger import Ledger, LedgerWarning
from labkit.bench.table_cli import cli_table
from labkit.bench.tables import speedup_table
from labkit.report.load import load_report
from labkit.report.reader import ReportError

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "annotated.nsys2022.4.sqlite"
GOOD = {"schema": 1, "time": "2026-11-23T01:00:00+00:00", "step": "baseline", "env": {"host": "h"},
        "metrics": {"fps": 10.0}}
BAD = [({"schema": "one"}, "schema"), ({"env": "laptop"}, "env"), ({"metrics": {"fps": "fast"}}, "metrics.fps"),
       ({"step": ["a", "b"]}, "step"), ({"builds_on": ["x"]}, "builds_on"), ({"status": "great"}, "status"),
       ({"metrics": {"stage_ms": {"infer": "slow"}}}, "metrics.stage_ms"), ({"time": "yesterday"}, "time"),
       ({"config": [1, 2]}, "config")]


def test_odd_ledger_rows_are_skipped_with_line_and_field(tmp_path, capsys):
    path = tmp_path / "ledger.jsonl"
    lines = [GOOD] + [{**GOOD, "step": "s", **bad} for bad, _ in BAD] + [{**GOOD, "step": "b2", "metrics": {"fps": 20}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = Ledger(path).rows()
    assert [r["step"] for r in rows] == ["baseline", "b2"]
    messages = [str(w.message) for w in caught if w.category is LedgerWarning]
    assert len(messages) == len(BAD)
    for i, ((_, field), msg) in enumerate(zip(BAD, messages), start=2):
        assert f"{path}:{i}:" in msg and f"'{field}'" in msg, msg
    assert cli_table([str(path)]) == 0  # the table of the good rows, no traceback
    out, err = capsys.readouterr()
    assert "b2" in out and "2.00x" in out


def test_latest_is_the_row_appended_last_not_the_one_stamped_latest(tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    led.append({**GOOD, "time": "2099-01-01T00:00:00+00:00", "metrics": {"fps": 5.0}})  # a clock far ahead
    led.append({**GOOD, "metrics": {"fps": 10.0}, "time": "2026-11-24T00:00:00+00:00"})
    led.append({**GOOD, "step": "b", "metrics": {"fps": 20.0}})
    t = speedup_table(led.path)
    assert float(t.values.loc["baseline"].iloc[0]) == 10.0 and float(t.speedup.loc["b"].iloc[0]) == 2.0


def _crafted(tmp_path, *sql) -> Path:
    db = tmp_path / "crafted.sqlite"
    shutil.copy(FIXTURE, db)
    con = sqlite3.connect(db, isolation_level=None)  # autocommit: each statement in the file when it returns
    for statement in sql:
        con.execute(statement)
    con.close()
    assert sqlite3.connect(db).execute("PRAGMA quick_check").fetchone()[0] == "ok"
    return db


def test_a_view_over_a_recursive_cte_is_refused_not_a_hang(tmp_path):
    db = _crafted(tmp_path, "ALTER TABLE NVTX_EVENTS RENAME TO NV2",
                  "CREATE VIEW NVTX_EVENTS AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                  "SELECT n.* FROM NV2 n, c")
    with pytest.raises(ReportError, match="NVTX_EVENTS is a view"):
        load_report(db)


def test_a_huge_string_id_is_refused_not_terabytes(tmp_path):
    db = _crafted(tmp_path, "INSERT INTO StringIds VALUES (1000000000000, 'x')")
    with pytest.raises(ReportError, match="StringIds"):
        load_report(db)


def test_events_that_end_before_they_start_are_said(tmp_path):
    """Said once, when the table is first read (its frame, or a summary's own read of it): a load
    reads no table, and a summary of kernels does not scan the CUDA API calls for it."""
    from labkit.stats.summaries import nvtx_summary

    db = _crafted(tmp_path, "UPDATE NVTX_EVENTS SET [end] = start - 5 WHERE rowid IN (1, 2)")
    said = "2 event(s) in NVTX_EVENTS end before they start"
    for read in (lambda r: r.nvtx, nvtx_summary):
        rep = load_report(db)
        assert not any("end before" in n for n in rep.notes)
        read(rep)
        read(rep)
        assert [n for n in rep.notes if said in n] and len([n for n in rep.notes if "end before" in n]) == 1, rep.notes
    fine = load_report(FIXTURE)
    fine.nvtx, fine.kernels, fine.cuda_api, nvtx_summary(fine)
    assert not any("end before" in n for n in fine.notes)


def test_kernels_that_end_before_they_start_are_said_by_the_kernel_summary(tmp_path):
    """The kernel summary's own read (durations packed in one column) sees the negative duration,
    reads the frame instead, and the note names the table."""
    from labkit.stats.summaries import kernel_summary

    db = tmp_path / "kernels.sqlite"
    shutil.copy(FIXTURE.parent / "gputest.nsys2025.3.sqlite", db)
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET [end] = start - 7 WHERE rowid IN (1, 2, 3)")
    con.close()
    rep = load_report(db)
    kernel_summary(rep)
    assert [n for n in rep.notes if "3 event(s) in CUPTI_ACTIVITY_KIND_KERNEL end before they start" in n], rep.notes


@pytest.mark.parametrize("text", ["1,,2", "1,2x,3", "1.5,2", "-,1", "1,-", "1-2,3", "1e5,2", ",1", "1,", " 1,2",
                                  "1,2 ", "\u0661,2", "+1,2", "0x1,2", "nan,1", "inf,1", "", "--1,2"])
def test_integer_text_that_is_not_integers_is_refused(text):
    """A group_concat of a column that holds something else (text in a time column of a crafted
    export): a ValueError (the reader makes it a ReportError naming the table), whatever warnings
    filter is set; numpy alone reads '-' as 0 and may stop at a bad value with a warning."""
    from labkit.report.reader import parse_ints

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError):
            parse_ints(text)


def test_integer_text_is_read_exactly():
    from labkit.report.reader import parse_ints

    vals = [0, -1, 2**62, -(2**62), 1234567890123, 7]
    assert parse_ints(",".join(map(str, vals))).tolist() == vals
    assert parse_ints("5").tolist() == [5]
