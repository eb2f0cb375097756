"""labbook.commands and labbook.latency: notebook 01's nsys lines against real nsys output, and
notebook 03's Little's law on the committed CPU reference ledger (reports/reference/cpu-2core)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import labbook as lab
import labbook.display
import labbook.reference
from labbook.commands import agreement, naming, stats_report
from labkit import Ledger, load_report

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
REF = ROOT / "reports" / "reference" / "cpu-2core"


@pytest.mark.parametrize("version, names", [
    ((2022, 4, 2, 1), ("old", "nvtxsum", "gpukernsum")),
    ((2023, 2), ("new", "nvtx_sum", "cuda_gpu_kern_sum")),
    ((2025, 3, 1), ("new", "nvtx_sum", "cuda_gpu_kern_sum")),
])
def test_report_names_follow_the_nsys_version(version, names):
    assert (naming(version), stats_report("nvtx", version), stats_report("kernels", version)) == names


@pytest.mark.parametrize("export, csv, version", [
    ("pipeline.nsys2022.4.sqlite", "pipeline.nsys2022.4.nvtxsum.csv", (2022, 4)),
    ("gputest.nsys2025.3.sqlite", "gputest.nsys2025.3.nvtx_sum.csv", (2025, 3)),
])
def test_agreement_with_nsys_stats_csv(export, csv, version):
    rep = load_report(FIX / export)
    check = agreement(FIX / csv, rep, version)
    assert check["agree"].all() and len(check) >= 5
    assert (check["instances (nsys)"] == check["instances (labkit)"]).all()


def test_agreement_catches_a_difference(tmp_path):
    text = (FIX / "pipeline.nsys2022.4.nvtxsum.csv").read_text().splitlines()
    head, first = text[0].split(","), text[1].split(",")
    i = head.index("Instances")
    first[i] = str(int(first[i]) + 1)  # nsys counted one range more than labkit
    (tmp_path / "x.csv").write_text("\n".join([text[0], ",".join(first), *text[2:]]))
    check = agreement(tmp_path / "x.csv", load_report(FIX / "pipeline.nsys2022.4.sqlite"), (2022, 4))
    assert list(check["agree"]) == [False] + [True] * (len(check) - 1)


@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys on PATH")
def test_notebook_01s_stats_line_agrees_with_labkit(tmp_path):
    """The `!nsys stats` line of notebook 01, with the installed nsys, on a real export."""
    lab.nsys_on_path()
    db = tmp_path / "pipeline.sqlite"
    shutil.copyfile(FIX / "pipeline.nsys2022.4.sqlite", db)  # nsys stats may add tables: never the fixture
    name = stats_report("nvtx")
    out = tmp_path / "by_hand"
    p = subprocess.run(["nsys", "stats", "--quiet", "--report", name, "--format", "csv", "--force-overwrite", "true",
                        "--output", str(out), str(db)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "", p.stdout + p.stderr  # nothing printed in the cell
    assert agreement(f"{out}_{name}.csv", load_report(db))["agree"].all()


def test_frames_held_by_the_queues():
    assert lab.frames_held(4) == 1 * (16 + 1) + 2 * 4 * 4 + 3 * 4 == 61
    assert lab.frames_held(4, 1) == 25 and lab.frames_held(1, 1) == 3 + 2 + 3
    assert lab.frames_held(4, 4, streams=2) == 61 + 17


@pytest.fixture
def ref_ledger(tmp_path, monkeypatch):
    """The committed CPU reference ledger as this machine's ledger."""
    path = tmp_path / "ledger.jsonl"
    shutil.copyfile(REF / "ledger.reference.jsonl", path)
    for mod in (labbook.reference, labbook.display):
        monkeypatch.setattr(mod, "LEDGER", path)
    return Ledger(path)


def test_littles_law_explains_file_input_latency(ref_ledger):
    """Batch 4, file input, 2-core CPU: about 60 frames in flight, the frames the queues hold."""
    t = lab.littles_law(["batch4", "baseline"]).set_index("step")
    b4 = t.loc["batch4"]
    assert b4["frames_held"] == lab.frames_held(4) and b4["frames"] == 128
    assert 0.85 * b4["frames_held"] <= b4["in_flight"] <= 1.1 * b4["frames_held"], b4.to_dict()
    assert t.loc["baseline", "frames_held"] != t.loc["baseline", "frames_held"]  # no queues: NaN


def test_latency_lesson_computes_both_cases(ref_ledger):
    row = json.loads((REF / "ledger.reference.jsonl").read_text().splitlines()[0])
    paced = {**row, "step": "paced", "kind": "exercise", "builds_on": "batch4",
             "config": {"batch_size": 4, "queues": True, "realtime": True, "frames": 128},
             "metrics": {"fps": 10.0, "latency_p50_ms": 420.0}}
    ref_ledger.append(paced)
    text = lab.latency_lesson("batch4", "paced", 10).data
    assert "= **60 frames in flight**" in text and "of the 61 that can be waiting" in text
    assert "10.0 frames/s x 420 ms = **4.2 frames in flight**" in text
    assert "1.5 camera intervals, 150 ms, for its batch to fill; the rest, 270 ms, is processing" in text


def test_camera_clip_is_paced_at_its_rate(tmp_path):
    clip = lab.camera_clip(5, "small", folder=tmp_path)
    info = lab.video_info(clip)
    assert info["fps"] == 5 and info["frames"] >= lab.settings("small").frames
    assert lab.camera_clip(5, "small", folder=tmp_path) == clip  # made once
