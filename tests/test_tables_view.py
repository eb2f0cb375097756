"""Tables that read well (issue 24) and carry the truth (issue 21): short headers and a caption,
spreads as ±, "too short" and "above decode ceiling" notes, provenance, "within noise", and the
class view (one column per host). Hand-written ledgers in the layout ``labkit.bench.run`` writes."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd

from labkit import speedup_table
from labkit.bench.ledger import Ledger
from labkit.bench.table_cli import cli_table
from labkit.bench.tables import compare, latest_rows
from labkit.bench.tables import class_view
from labkit.bench.table_view import ABOVE

VM = {"gpu": None, "cpu": "Intel(R) Xeon(R) Processor", "host": "vm-01"}
SHA = "0123456789abcdef0123456789abcdef01234567"


def _row(step, fps, low, high, *, env=VM, mode="full", dirty=False, **metrics):
    return {"step": step, "env": env, "provenance": {"commit": SHA, "dirty": dirty, "mode": mode, "labkit": "0.1.0"},
            "metrics": {"fps": fps, "fps_ci_low": low, "fps_ci_high": high, "map50": 0.7, **metrics}}


def _ledger(path, env=VM, mode="full"):
    led = Ledger(path)
    led.append(_row("baseline", 10.0, 9.0, 11.0, env=env, mode=mode))
    led.append(_row("queues", 10.5, 9.5, 11.5, env=env, mode=mode))  # interval covers 1.0x
    led.append(_row("batch4", 30.0, 28.0, 33.0, env=env, mode=mode, too_short=True))
    led.append({**_row("interval16", 900.0, 850.0, 950.0, env=env, mode=mode, above_decode_ceiling=True,
                       decode_ceiling_fps=600.0), "status": "flagged", "flags": ["above the decode-only ceiling"]})
    return led


def test_short_headers_caption_spread_and_notes(tmp_path):
    t = speedup_table(_ledger(tmp_path / "ledger.jsonl").path)
    md = t.to_markdown().splitlines()
    assert md[0] == "Machine: CPU (Intel(R) Xeon(R) Processor). Mode: full."
    head = [c.strip() for c in md[2].split("|")[1:-1]]
    assert head == ["step", "speed-up", "fps", "map50"]
    cells = {r[0]: r for r in ([c.strip() for c in line.split("|")[1:-1]] for line in md[4:])}
    # batch4: 30/10 = 3.00x, interval 28/11 = 2.55x to 33/9 = 3.67x: ± the wider side, 0.67
    assert cells["batch4"][1] == "3.00x ±0.67 (too short)"
    assert cells["baseline"][2] == "10.0 ±1.0"
    assert cells["interval16"][1] == ABOVE  # kept in the table, never as a speed-up
    assert pd.isna(t.speedup.iloc[:, 0]["interval16"])
    html = t._repr_html_()
    assert "<caption>" in html and "speed-up" in html and "(Intel(R) Xeon(R) Processor)</th>" not in html
    assert "±" in html and ABOVE in html


def test_small_mode_says_rehearsal_on_the_table(tmp_path):
    t = speedup_table(_ledger(tmp_path / "ledger.jsonl", mode="small").path)
    assert "rehearsal" in t.caption and "rehearsal" in t.to_markdown().splitlines()[0]
    assert "rehearsal" in t._repr_html_()


def test_provenance_column(tmp_path):
    t = speedup_table(_ledger(tmp_path / "ledger.jsonl").path)
    assert set(t.provenance().iloc[:, 0]) == {SHA[:12]}
    assert t.display_frame(provenance=True)["commit"].tolist() == [SHA[:12]] * 4


def test_verdict_says_within_noise_when_the_interval_covers_one(tmp_path):
    rows = latest_rows(Ledger(_ledger(tmp_path / "ledger.jsonl").path).read()).set_index("step")
    base = rows.loc["baseline"].to_dict() | {"step": "baseline"}
    same = compare(rows.loc["queues"].to_dict() | {"step": "queues"}, base)
    assert "within noise" in same and "(the same)" in same
    faster = compare(rows.loc["batch4"].to_dict() | {"step": "batch4"}, base)
    assert "outside the noise" in faster and "too short" in faster
    above = compare(rows.loc["interval16"].to_dict() | {"step": "interval16"}, base)
    assert above.startswith("No comparison") and "decoding alone" in above


def test_class_view_two_identical_machines_are_two_columns(tmp_path):
    room = tmp_path / "class"
    _ledger(room / "alice.jsonl", env={**VM, "host": "vm-01"})
    _ledger(room / "bob" / "ledger.jsonl", env={**VM, "host": "vm-02"})
    assert speedup_table(room).machines == ["CPU (Intel(R) Xeon(R) Processor)"]  # by machine model: one column
    t = class_view(room)
    assert t.machines == ["vm-01", "vm-02"]
    assert t.caption.startswith("Machines: [1] vm-01, [2] vm-02")
    md = t.to_markdown().splitlines()
    assert "speed-up [1]" in md[2] and "speed-up [2]" in md[2]
    # the same host name in two ledgers (containers): told apart by the ledger's name
    _ledger(room / "carol.jsonl", env={**VM, "host": "vm-01"})
    assert class_view(room).machines == ["vm-01 (alice)", "vm-02", "vm-01 (carol)"]


def test_class_view_on_the_command_line(tmp_path, capsys):
    room = tmp_path / "class"
    _ledger(room / "alice.jsonl", env={**VM, "host": "vm-01"})
    _ledger(room / "bob.jsonl", env={**VM, "host": "vm-02"})
    assert cli_table(["--class", str(room)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Machines: [1] vm-01, [2] vm-02")
    r = subprocess.run([sys.executable, "-m", "labkit", "table", "--class", str(tmp_path / "none")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "is not a folder" in r.stderr
