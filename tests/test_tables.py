"""Speed-up tables: equal to hand computation on a small hand-written ledger."""
from __future__ import annotations

import math
import warnings

import pandas as pd
import pytest

from labkit import speedup_table
from labkit.bench.ledger import Ledger
from labkit.bench.table_cli import cli_table
from labkit.bench.tables import SpeedupTableError, SpeedupWarning

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "cpu": "AMD EPYC 7B13", "host": "gpu1"}
XEON = {"gpu": None, "cpu": "Intel(R) Xeon(R) Processor", "host": "vm"}
CPU_LABEL = "CPU (Intel(R) Xeon(R) Processor)"
GPU_LABEL = "NVIDIA H100 80GB HBM3"


def _row(step, env, time, fps, p50, map50=None, mota=None):
    return {"step": step, "env": env, "time": time,
            "metrics": {"fps": fps, "latency_p50_ms": p50, "map50": map50, "mota": mota}}


@pytest.fixture
def reports(tmp_path):
    """reports/ledger.jsonl (this CPU) and reports/reference/h100/ledger.jsonl, hand-chosen numbers."""
    cpu = Ledger(tmp_path / "ledger.jsonl")
    cpu.append(_row("baseline", XEON, "2026-11-23T01:00:00+00:00", 8.0, 125.0, 0.80, 0.70))
    cpu.append(_row("batching", XEON, "2026-11-23T01:10:00+00:00", 10.0, 100.0, 0.80, 0.70))
    gpu = Ledger(tmp_path / "reference" / "h100" / "ledger.jsonl")
    gpu.append(_row("baseline", H100, "2026-11-22T10:00:00+00:00", 40.0, 25.0, 0.80, 0.70))   # superseded
    gpu.append(_row("batching", H100, "2026-11-22T10:05:00+00:00", 150.0, 8.0, 0.80, 0.70))
    gpu.append(_row("fp16", H100, "2026-11-22T10:10:00+00:00", 400.0, 4.0, 0.79, 0.69))
    gpu.append(_row("baseline", H100, "2026-11-22T11:00:00+00:00", 50.0, 20.0, 0.81, 0.71))   # latest
    return tmp_path


def test_fps_speedup_by_hand(reports, recwarn):
    t = speedup_table(reports)
    assert t.machines == [CPU_LABEL, GPU_LABEL]  # reports/ledger.jsonl sorts before reference/
    assert list(t.speedup.index) == ["baseline", "batching", "fp16"]
    # CPU: 8 -> 10 = 10/8 = 1.25; H100 (latest baseline 50, not 40): 150/50 = 3, 400/50 = 8
    expected = pd.DataFrame({CPU_LABEL: [1.0, 1.25, math.nan], GPU_LABEL: [1.0, 3.0, 8.0]},
                            index=pd.Index(["baseline", "batching", "fp16"], name="step"))
    pd.testing.assert_frame_equal(t.speedup, expected)
    assert t.values[GPU_LABEL].tolist() == [50.0, 150.0, 400.0]
    assert t.values[CPU_LABEL].tolist()[:2] == [8.0, 10.0]
    assert t.accuracy[f"map50 ({GPU_LABEL})"].tolist() == [0.81, 0.80, 0.79]
    assert t.accuracy[f"mota ({CPU_LABEL})"].tolist()[:2] == [0.70, 0.70]
    assert list(t.frame.columns) == [
        f"speed-up ({CPU_LABEL})", f"speed-up ({GPU_LABEL})", f"fps ({CPU_LABEL})", f"fps ({GPU_LABEL})",
        f"map50 ({CPU_LABEL})", f"map50 ({GPU_LABEL})", f"mota ({CPU_LABEL})", f"mota ({GPU_LABEL})"]
    assert not [w for w in recwarn if issubclass(w.category, SpeedupWarning)]


def test_latency_speedup_is_inverted(reports):
    t = speedup_table(reports / "reference" / "h100" / "ledger.jsonl", metric="latency_p50_ms")
    # lower is better: baseline/latency = 20/20, 20/8, 20/4
    assert t.speedup[GPU_LABEL].tolist() == [1.0, 2.5, 5.0]
    assert t.machines == [GPU_LABEL]


def test_dataframe_source_and_machine_selection(reports):
    df = Ledger(reports / "reference" / "h100" / "ledger.jsonl").read()
    assert speedup_table(df).speedup[GPU_LABEL].tolist() == [1.0, 3.0, 8.0]
    t = speedup_table(reports, machines=[GPU_LABEL, CPU_LABEL])
    assert t.machines == [GPU_LABEL, CPU_LABEL]
    with pytest.raises(SpeedupTableError, match="not in the ledger"):
        speedup_table(reports, machines=["A100"])


def test_markdown(reports):
    md = speedup_table(reports, machines=[GPU_LABEL]).to_markdown().splitlines()
    assert md[0] == f"Machine: {GPU_LABEL}." and md[1] == ""  # the machine in the caption, not in every header
    md = md[2:]
    assert [c.strip() for c in md[0].split("|")[1:-1]] == ["step", "speed-up", "fps", "map50", "mota"]
    assert md[1].startswith("|:") and md[1].endswith(":|")  # step left, numbers right-aligned
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in md[2:]]
    assert cells == [["baseline", "1.00x", "50.0", "0.810", "0.710"],
                     ["batching", "3.00x", "150.0", "0.800", "0.700"],
                     ["fp16", "8.00x", "400.0", "0.790", "0.690"]]
    html = speedup_table(reports)._repr_html_()
    assert "<table" in html and "8.00x" in html and "—" in html


def test_machine_without_baseline_is_nan_with_warning(tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    led.append(_row("baseline", H100, "2026-11-22T10:00:00+00:00", 50.0, 20.0))
    led.append(_row("fp16", H100, "2026-11-22T10:01:00+00:00", 100.0, 10.0))
    led.append(_row("fp16", XEON, "2026-11-22T10:02:00+00:00", 5.0, 200.0))
    with pytest.warns(SpeedupWarning, match=r"machine 'CPU \(Intel\(R\) Xeon\(R\) Processor\)' has no 'baseline' row"):
        t = speedup_table(led.path)
    assert t.speedup[GPU_LABEL].tolist() == [1.0, 2.0]
    assert t.speedup[CPU_LABEL].isna().all()


def test_a_baseline_at_zero_has_no_speedup_over_it(tmp_path):
    """A baseline that timed nothing (0 fps) gives no ratio: NaN with a warning, never 'infx'; a step
    at 0 fps is no speed-up either (0x in fps, not inf in latency)."""
    led = Ledger(tmp_path / "ledger.jsonl")
    led.append(_row("baseline", H100, "2026-11-22T10:00:00+00:00", 0.0, 0.0))
    led.append(_row("fp16", H100, "2026-11-22T10:01:00+00:00", 100.0, 10.0))
    led.append(_row("int8", H100, "2026-11-22T10:01:30+00:00", 0.0, 0.0))
    led.append(_row("baseline", XEON, "2026-11-22T10:02:00+00:00", 5.0, 200.0))
    led.append(_row("fp16", XEON, "2026-11-22T10:03:00+00:00", 10.0, 100.0))
    with pytest.warns(SpeedupWarning, match=r"machine 'NVIDIA H100 80GB HBM3': 'baseline' has fps 0, nothing to "
                                            r"divide by: its speed-up column is NaN"):
        t = speedup_table(led.path)
    assert t.speedup[GPU_LABEL].isna().all()
    assert t.speedup[CPU_LABEL].tolist()[:2] == [1.0, 2.0]
    assert "inf" not in str(t) and "inf" not in t._repr_html_()
    with pytest.warns(SpeedupWarning, match="'baseline' has latency_p50_ms 0"):
        lat = speedup_table(led.path, metric="latency_p50_ms")
    assert not any(math.isinf(v) for v in lat.speedup.to_numpy().ravel() if not pd.isna(v))


def test_no_baseline_anywhere_is_an_error(tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    led.append(_row("fp16", H100, "2026-11-22T10:01:00+00:00", 100.0, 10.0))
    with pytest.raises(SpeedupTableError, match="no machine has a 'fps' row for baseline step 'baseline'"):
        speedup_table(led.path)
    with pytest.raises(SpeedupTableError, match="no column"):
        speedup_table(led.path, metric="hota")


def test_missing_sources_are_clear(tmp_path):
    with pytest.raises(SpeedupTableError, match="does not exist"):
        speedup_table(tmp_path / "nope.jsonl")
    with pytest.raises(SpeedupTableError, match="no ledger.jsonl under"):
        speedup_table(tmp_path)


def test_cli_table(reports, capsys):
    out_md = reports / "speedup.md"
    assert cli_table([str(reports), "--output", str(out_md)]) == 0
    printed = capsys.readouterr().out
    assert "8.00x" in printed and "1.25x" in printed
    assert out_md.read_text() == printed
    assert cli_table([str(reports), "--baseline", "nope"]) == 1
    assert "baseline step 'nope'" in capsys.readouterr().err


def test_cli_table_through_main(reports):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "labkit", "table", str(reports), "--metric", "latency_p50_ms"],
                         capture_output=True, text=True, check=True).stdout
    assert "2.50x" in out and "5.00x" in out and "1.25x" in out


def test_flagged_rows_are_left_out_with_a_warning(tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    led.append(_row("baseline", H100, "2026-11-22T10:00:00+00:00", 50.0, 20.0))
    led.append(_row("fp16", H100, "2026-11-22T10:01:00+00:00", 100.0, 10.0))
    led.append({**_row("fp16", H100, "2026-11-22T10:02:00+00:00", 5.0, 200.0), "status": "flagged"})
    with pytest.warns(SpeedupWarning, match=r"1 flagged ledger row\(s\) left out \(fp16 on NVIDIA H100 80GB HBM3\)"):
        t = speedup_table(led.path)
    assert t.speedup[GPU_LABEL].tolist() == [1.0, 2.0]  # the earlier, ok fp16 row


# ----------------------------------------------------------------------------- builds_on, exercises (real ledgers)
from pathlib import Path  # noqa: E402

from labkit.bench.tables import compare  # noqa: E402

XEON_LABEL = "CPU (Intel(R) Xeon(R) Processor)"
CPU_REF = Path(__file__).resolve().parents[1] / "reports" / "reference" / "cpu-2core" / "ledger.reference.jsonl"
# what each step of that lab run built on (notebooks 02-06; interval steps on ort_fp32, its fastest)
CPU_BUILDS_ON = {"queues": "baseline", "no_osd": "queues", "batch2": "no_osd", "batch8": "no_osd",
                 "batch4": "no_osd", "streams2": "batch4", "channels_last": "batch4", "compile": "batch4",
                 "ort_fp32": "batch4", "ort_int8": "ort_fp32", "interval2": "ort_fp32", "interval5": "ort_fp32",
                 "interval3": "ort_fp32"}


def test_speedup_over_the_step_each_builds_on_in_the_cpu_reference():
    t = speedup_table(CPU_REF, builds_on=CPU_BUILDS_ON)
    fps = Ledger(CPU_REF).read().set_index("step")["fps"]
    over = t.over_builds_on.iloc[:, 0]
    for step, base in CPU_BUILDS_ON.items():
        assert over[step] == pytest.approx(fps[step] / fps[base]), step
    assert math.isnan(over["baseline"]) and t.steps.loc["baseline", "builds_on"] is None
    assert round(over["queues"], 2) == 0.95  # docs/results.md: queues 0.95x
    assert t.speedup.iloc[:, 0]["interval3"] == pytest.approx(fps["interval3"] / fps["baseline"])
    md = [[cell.strip() for cell in line.split("|")[1:-1]] for line in t.to_markdown().splitlines()[2:]]
    assert md[0][:5] == ["step", "kind", "builds_on", "speed-up", "over builds_on"]
    assert md[3][:5] == ["queues", "", "baseline", "0.95x", "0.95x"]


def test_alternatives_are_grouped_under_the_step_they_build_on():
    kinds = {s: "alternative" for s in ("channels_last", "compile", "ort_fp32", "ort_int8")}
    kinds.update({s: "sweep" for s in ("batch2", "batch8", "streams2", "interval2", "interval5")})
    df = Ledger(CPU_REF).read()
    df["kind"] = df["step"].map(kinds).fillna("cumulative")
    t = speedup_table(df, builds_on=CPU_BUILDS_ON)
    assert list(t.speedup.index) == [
        "baseline", "queues", "no_osd", "batch2", "batch8", "batch4", "streams2", "channels_last", "compile",
        "ort_fp32", "ort_int8", "interval2", "interval5", "interval3"]
    assert list(t.frame.columns[:2]) == ["kind", "builds_on"] and t.frame.loc["ort_int8", "kind"] == "alternative"


def test_exercise_rows_are_left_out_unless_asked(tmp_path, capsys):
    led = Ledger(tmp_path / "ledger.jsonl")
    for row in Ledger(CPU_REF).rows()[:2]:
        led.append({k: v for k, v in row.items() if k not in ("ledger", "line")})
    ex = {**Ledger(CPU_REF).rows()[0], "step": "baseline_omp_active", "kind": "exercise"}
    led.append({k: v for k, v in ex.items() if k not in ("ledger", "line")})
    led.append({"step": "fp16", "status": "skipped", "reason": "no GPU", "env": XEON})
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpeedupWarning)  # skipped rows are left out quietly
        t = speedup_table(tmp_path)
    assert list(t.speedup.index) == ["baseline", "queues"] and not t.has_builds_on
    assert "baseline_omp_active" in speedup_table(tmp_path, exercises=True).speedup.index
    assert cli_table([str(tmp_path)]) == 0 and "baseline_omp_active" not in capsys.readouterr().out
    assert cli_table([str(tmp_path), "--exercises"]) == 0 and "baseline_omp_active" in capsys.readouterr().out


def test_compare_rows_of_a_real_ledger():
    rows = Ledger(CPU_REF).read().set_index("step", drop=False)
    text = compare(rows.loc["ort_fp32"], rows.loc["batch4"])
    ratio = rows.loc["ort_fp32", "fps"] / rows.loc["batch4", "fps"]
    assert text.startswith(f"'ort_fp32': {rows.loc['ort_fp32', 'fps']:.2f} frames/s against "
                           f"{rows.loc['batch4', 'fps']:.2f} for 'batch4': {ratio:.2f}x ({ratio - 1:.0%} faster); ")
    assert "over 3 runs" in text
    assert "slower" in compare(rows.loc["batch4"], rows.loc["ort_fp32"])
    failed = {"step": "fp16", "status": "failed", "reason": "out of memory", "fps": math.nan}
    assert compare(failed, rows.loc["baseline"]) == "No comparison: step 'fp16' failed here: out of memory."
    lat = compare(rows.loc["batch4"], rows.loc["baseline"], metric="latency_p50_ms")
    assert "latency_p50_ms" in lat and "x (" in lat
