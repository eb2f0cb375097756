"""benchmarks/pipeline_table.py: a CPU smoke run of four configurations on a small real clip.

12 frames per stream at the app's default network input (384x640; pipeline_table passes no
--input-hw), one run each: about 10-15 s on 2 cores. The queued configurations hold more frames
than 10 % of 12 (Little's law): the table must mark them too short, not quote them.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from labkit.bench.ledger import Ledger
from source_code.scenes import SceneConfig, make_video

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "pipeline_table.py"
CONFIGS = ["decode_only_1", "baseline", "decode_only_s1", "all_s1"]
QUEUED = ["decode_only_s1", "all_s1"]  # too short at 12 frames: flagged, with the frames they need


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipeline_table")
    clip, gt = make_video(tmp / "clip.mp4", seconds=1.0, config=SceneConfig(seed=3, width=320, height=192))
    out = tmp / "pt"
    env = {**os.environ, "LABKIT_REPORTS": str(tmp / "reports"), "LABKIT_CACHE_DIR": str(tmp / "cache")}
    env.pop("LABKIT_DEBUG", None)
    r = subprocess.run([sys.executable, str(SCRIPT), "--input", str(clip), "--frames", "12", "--warmup", "2",
                        "--repeats", "1", "--batch-size", "2", "--streams", "2", "--all-streams", "1",
                        "--device", "cpu", "--configs", ",".join(CONFIGS), "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
    return r, out, tmp


def test_exit_status_and_files(table_run):
    r, out, tmp = table_run
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert (out / "pipeline_table.md").is_file() and (out / "pipeline_table.csv").is_file()
    md = (out / "pipeline_table.md").read_text()
    assert all(f"| {name} " in md for name in CONFIGS)
    assert "of_decode_only" in md
    assert md in r.stdout  # the table is printed too
    # only the baseline draws and writes a video: under --out (passed as --output), never in the
    # repository, nor where $LABKIT_REPORTS points
    assert sorted(p.name for p in out.glob("*.mp4")) == ["clip.tracked.mp4"]
    assert not (tmp / "reports").exists()
    # the script passes labkit's cache (here $LABKIT_CACHE_DIR) to the application as --cache-dir
    assert (tmp / "cache" / "backends" / "flops.json").is_file()


def test_csv_rows_speedup_and_ceiling(table_run):
    r, out, _ = table_run
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_csv(out / "pipeline_table.csv").set_index("config")
    assert list(df.index) == CONFIGS
    assert (df.loc[["decode_only_1", "baseline"], "status"] == "ok").all(), df["status"].to_dict()
    for name in QUEUED:
        assert "too short to measure throughput" in df.loc[name, "status"] and "Little's law" in df.loc[name, "status"]
    assert (df["runs"] == 1).all() and (df.loc[["decode_only_1", "baseline", "decode_only_s1"], "fps"] > 0).all()
    assert math.isnan(df.loc["all_s1", "fps"]) or df.loc["all_s1", "fps"] > 0  # 0 timed frames: no figure at all
    assert df.loc["baseline", "speedup"] == pytest.approx(1.0)
    for name in CONFIGS:
        assert df.loc[name, "speedup"] == pytest.approx(df.loc[name, "fps"] / df.loc["baseline", "fps"], rel=1e-9,
                                                        nan_ok=True)
    # all_s1 (--queues, one stream) is compared with decode-only through one decoder thread
    assert df.loc["all_s1", "of_decode_only"] == pytest.approx(
        df.loc["all_s1", "fps"] / df.loc["decode_only_s1", "fps"], rel=1e-9, nan_ok=True)
    # the sync baseline with the one decoded in the main thread
    assert df.loc["baseline", "of_decode_only"] == pytest.approx(
        df.loc["baseline", "fps"] / df.loc["decode_only_1", "fps"], rel=1e-9)
    # decode-only rows have no ceiling share and no accuracy
    for name in ("decode_only_1", "decode_only_s1"):
        assert math.isnan(df.loc[name, "of_decode_only"])
        assert math.isnan(df.loc[name, "map50"]) and math.isnan(df.loc[name, "mota"])
    # accuracy of the configurations that detect (the clip has ground truth beside it)
    for name in ("baseline", "all_s1"):
        assert 0 <= df.loc[name, "map50"] <= 1
        assert -1 <= df.loc[name, "mota"] <= 1
        assert not math.isnan(df.loc[name, "map50"]) and not math.isnan(df.loc[name, "mota"])
    assert df.loc["decode_only_1", "flags"] == "--decode-only"
    assert df.loc["decode_only_s1", "flags"] == "--decode-only --queues --streams 1"


def test_ledger_has_one_row_per_configuration(table_run):
    r, out, _ = table_run
    assert r.returncode == 0, r.stderr[-2000:]
    led = Ledger(out / "pipeline_table.jsonl").read()
    assert len(led) == 4
    assert not (out / "ledger.jsonl").exists()  # kept out of the lab's table of reports/
    assert list(led["step"]) == CONFIGS
    assert list(led["status"]) == ["ok", "ok", "flagged", "flagged"]
    assert (led["fps"].iloc[:3] > 0).all()
    # the decode-only runs carry the flag, the others do not
    decode = led.set_index("step")["config.decode_only"]
    assert decode["decode_only_1"] == True and decode["decode_only_s1"] == True  # noqa: E712
    assert pd.isna(decode["baseline"]) and pd.isna(decode["all_s1"])
    csv = pd.read_csv(out / "pipeline_table.csv").set_index("config")
    for _, row in led.iterrows():
        assert row["fps"] == pytest.approx(csv.loc[row["step"], "fps"], nan_ok=True)
    # each run left its results JSON under <out>/results
    results = sorted((out / "results").glob("*.json"))
    assert len(results) == 4


def test_a_second_run_keeps_the_first_table_unless_told(table_run):
    r, out, tmp = table_run
    assert r.returncode == 0
    before = (out / "pipeline_table.md").read_bytes()
    again = subprocess.run([sys.executable, str(SCRIPT), "--configs", "baseline", "--out", str(out)],
                           capture_output=True, text=True, timeout=120, cwd=tmp)
    assert again.returncode == 2 and "--overwrite" in again.stderr and "pipeline_table.md" in again.stderr
    assert (out / "pipeline_table.md").read_bytes() == before
