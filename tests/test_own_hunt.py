"""Issue 33, classes of our own hunt in the same three families: special files where a file is
read, NaN/Infinity and deep nesting in a ledger, outputs that are folders, symlinks or in missing
folders, a non-UTF-8 report name. Each failed (hung, traceback or silent loss) before."""
from __future__ import annotations

import json
import os
import shutil
import threading
import warnings
from pathlib import Path

import pytest

import labkit
from labkit.bench.ledger import Ledger, LedgerWarning
from labkit.bench.tables import class_view
from labkit.errors import OutputError
from labkit.paths import OutputExistsError, atomic_write
from labkit.report.reader import ReportError

FIX = Path(__file__).resolve().parent / "fixtures"
ROW = {"schema": 1, "step": "baseline", "env": {"host": "h"}, "metrics": {"fps": 10.0}}


def _in_time(fn, fifo: Path, seconds: float = 20):
    """``fn()``'s exception or result, or a failure when it does not return (a read of ``fifo``
    that never ends: a writer is then opened and closed, so the blocked reader ends too)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
        t.join(5)
        pytest.fail(f"still running after {seconds} s")
    return out


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_a_fifo_named_like_a_report_is_one_error_not_a_hang(tmp_path):
    fifo = _fifo(tmp_path / "r.sqlite")
    out = _in_time(lambda: labkit.load_report(fifo), fifo)
    assert isinstance(out.get("error"), ReportError) and "special file" in str(out["error"])


def test_a_fifo_among_the_class_ledgers_is_left_out_with_a_warning(tmp_path):
    (tmp_path / "class").mkdir()
    Ledger(tmp_path / "class" / "alice.jsonl").append({**ROW, "metrics": {"fps": 10.0}})
    Ledger(tmp_path / "class" / "alice.jsonl").append({**ROW, "step": "b", "metrics": {"fps": 20.0}})
    fifo = _fifo(tmp_path / "class" / "mallory.jsonl")

    def view():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = class_view(tmp_path / "class")
        return t, [str(w.message) for w in caught if w.category is LedgerWarning]

    out = _in_time(view, fifo)
    assert "value" in out, out.get("error")
    t, messages = out["value"]
    assert list(t.speedup.index) == ["baseline", "b"] and any("mallory.jsonl" in m for m in messages)
    with pytest.raises(OutputError, match="special file"):
        Ledger(fifo).append(ROW)


@pytest.mark.parametrize("line,field", [('{"step": "s", "metrics": {"fps": NaN}}', "metrics.fps"),
                                        ('{"step": "s", "metrics": {"fps": Infinity}}', "metrics.fps"),
                                        ("[" * 100_000 + "]" * 100_000, "not valid JSON")])
def test_nan_infinity_and_deep_nesting_in_a_ledger_are_skipped(tmp_path, line, field):
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(ROW) + "\n" + line + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = Ledger(path).rows()
    assert [r["step"] for r in rows] == ["baseline"]
    assert any(f"{path}:2:" in str(w.message) and field in str(w.message) for w in caught)


def test_outputs_that_are_folders_symlinks_or_in_missing_folders(tmp_path):
    with pytest.raises(OutputError, match="folder"):
        atomic_write(tmp_path, "x")
    with pytest.raises(OutputError) as e:
        atomic_write(tmp_path / "no" / "such" / "t.md", "x")
    assert "\n" not in str(e.value)
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("theirs")
    (tmp_path / "link.md").symlink_to(theirs)
    with pytest.raises(OutputExistsError):
        atomic_write(tmp_path / "link.md", "x")
    assert theirs.read_text() == "theirs"


def test_a_report_with_a_non_utf8_name_loads(tmp_path):
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9.sqlite")
    shutil.copy(FIX / "domains.nsys2022.4.sqlite", odd)
    rep = labkit.load_report(os.fsdecode(odd))
    assert len(rep.nvtx) == len(labkit.load_report(FIX / "domains.nsys2022.4.sqlite").nvtx)
