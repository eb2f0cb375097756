"""Ledger: concurrent appends lose nothing, corrupt lines are skipped with a warning, flattening."""
from __future__ import annotations

import json
import multiprocessing as mp
import warnings

import pandas as pd
import pytest

from labkit.bench.ledger import BASE_COLUMNS, Ledger, LedgerWarning, flatten, machine_label

WRITERS = 8
ROWS_EACH = 300


def _writer(path: str, writer: int) -> None:
    led = Ledger(path)
    # A few KB per row, so a torn or interleaved write would show as broken JSON.
    pad = "x" * (2000 + 97 * writer)
    for i in range(ROWS_EACH):
        led.append({"step": f"w{writer}", "config": {"writer": writer, "i": i, "pad": pad},
                    "env": {"host": "test", "cpu": "test cpu"}, "metrics": {"fps": float(i)}})


def test_concurrent_appends_lose_no_row(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WRITERS

    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # file ends with a newline
    assert len(lines) - 1 == WRITERS * ROWS_EACH
    for line in lines[:-1]:
        json.loads(line)  # every line is one whole JSON object

    with warnings.catch_warnings():
        warnings.simplefilter("error", LedgerWarning)
        df = Ledger(path).read()
    assert len(df) == WRITERS * ROWS_EACH
    counts = df.groupby("config.writer")["config.i"].agg(["count", "nunique", "min", "max"])
    assert counts["count"].tolist() == [ROWS_EACH] * WRITERS
    assert counts["nunique"].tolist() == [ROWS_EACH] * WRITERS
    assert counts["max"].tolist() == [ROWS_EACH - 1] * WRITERS
    # each writer's rows stay in its own order
    for _, g in df.groupby("config.writer"):
        assert g["config.i"].tolist() == list(range(ROWS_EACH))


def test_corrupt_line_is_skipped_with_file_and_line_number(tmp_path):
    path = tmp_path / "ledger.jsonl"
    led = Ledger(path)
    led.append({"step": "baseline", "env": {}, "metrics": {"fps": 10.0}})
    with open(path, "a") as f:
        f.write('{"step": "half-writ')  # a writer killed mid-line: no newline
    led.append({"step": "batching", "env": {}, "metrics": {"fps": 20.0}})
    with open(path, "a") as f:
        f.write("[1, 2]\n")
    with pytest.warns(LedgerWarning) as caught:
        df = led.read()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert f"{path}:2: corrupt ledger line skipped (not valid JSON" in messages[0]
    assert f"{path}:4: corrupt ledger line skipped (a JSON list" in messages[1]
    assert df["step"].tolist() == ["baseline", "batching"]
    assert df["fps"].tolist() == [10.0, 20.0]
    assert df["line"].tolist() == [1, 3]


def test_rerun_adds_a_row_and_keeps_earlier_ones(tmp_path):
    led = Ledger(tmp_path / "sub" / "ledger.jsonl")
    first = led.append({"step": "baseline", "env": {}, "metrics": {"fps": 1.0}})
    led.append({"step": "baseline", "env": {}, "metrics": {"fps": 2.0}})
    df = led.read()
    assert df["fps"].tolist() == [1.0, 2.0]
    assert first["schema"] == 1 and first["time"].endswith("+00:00")
    assert df["time"].is_monotonic_increasing
    assert str(df["time"].dt.tz) == "UTC"


def test_append_fills_fingerprint_and_writes_strict_json(tmp_path):
    import numpy as np

    led = Ledger(tmp_path / "ledger.jsonl")
    row = led.append({"step": "s", "metrics": {"fps": np.float32(2.5), "mota": float("nan"),
                                                "frames": np.int64(7)},
                      "paths": {"results": [tmp_path / "r.json"]}})
    assert {"host", "cpu", "gpu", "torch", "python"} <= set(row["env"])
    text = (tmp_path / "ledger.jsonl").read_text()
    assert "NaN" not in text
    back = json.loads(text)
    assert back["metrics"] == {"fps": 2.5, "mota": None, "frames": 7}
    assert back["paths"]["results"] == [str(tmp_path / "r.json")]


def test_append_requires_a_step(tmp_path):
    with pytest.raises(ValueError, match="needs a non-empty 'step'"):
        Ledger(tmp_path / "l.jsonl").append({"metrics": {"fps": 1}})


def test_missing_ledger_is_an_empty_frame_with_base_columns(tmp_path):
    df = Ledger(tmp_path / "nothing.jsonl").read()
    assert df.empty and list(df.columns) == BASE_COLUMNS


def test_flatten_promotes_metrics_and_dots_other_sections():
    row = {"step": "s", "config": {"batch_size": 4, "opt": {"fp16": True}},
           "metrics": {"fps": 9.0, "stage_ms": {"infer": 3.0}, "step": 1}, "env": {}}
    assert flatten(row) == {"step": "s", "config.batch_size": 4, "config.opt.fp16": True,
                            "fps": 9.0, "stage_ms.infer": 3.0, "metrics.step": 1}


@pytest.mark.parametrize("env, label", [
    ({"gpu": "NVIDIA H100 80GB HBM3", "cpu": "AMD EPYC"}, "NVIDIA H100 80GB HBM3"),
    ({"gpu": None, "cpu": "Intel(R) Xeon(R) Processor", "host": "vm"}, "CPU (Intel(R) Xeon(R) Processor)"),
    ({"gpu": None, "cpu": "", "host": "box1"}, "CPU (box1)"),
    ({}, "CPU (unknown)"),
    (None, "CPU (unknown)"),
])
def test_machine_label(env, label):
    assert machine_label(env) == label


def test_read_machine_column(tmp_path):
    led = Ledger(tmp_path / "l.jsonl")
    led.append({"step": "a", "env": {"gpu": "NVIDIA H100", "cpu": "x"}})
    led.append({"step": "a", "env": {"gpu": None, "cpu": "Xeon"}})
    assert led.read()["machine"].tolist() == ["NVIDIA H100", "CPU (Xeon)"]
    assert isinstance(led.read(), pd.DataFrame)


def test_a_step_that_did_not_run_is_a_row_with_its_status_and_reason(tmp_path):
    from labkit.bench.ledger import not_run

    led = Ledger(tmp_path / "ledger.jsonl")
    led.append({**not_run("fp16", status="skipped", reason="no GPU", config={"precision": "fp16"},
                          labels={"kind": "alternative", "builds_on": "gpu_preprocess"}), "env": {"cpu": "x"}})
    row = led.read().iloc[0]
    assert (row["step"], row["status"], row["reason"], row["kind"], row["builds_on"]) == (
        "fp16", "skipped", "no GPU", "alternative", "gpu_preprocess")
    assert row["config.precision"] == "fp16" and "fps" not in led.read().columns
    with pytest.raises(ValueError, match="'skipped' or 'failed'"):
        not_run("fp16", status="ok", reason="")
