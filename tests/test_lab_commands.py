"""labbook.commands and labbook.latency: notebook 01's nsys lines against real nsys output, and
notebook 03's Little's law on the committed CPU reference ledger (reports/reference/cpu-2core)."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

import labbook as lab
import labbook.display
import labbook.reference
from labbook.commands import agreement, naming, stats_report
from labkit import Ledger, load_report
from faultkit import START_FAILURES, racing_nsys

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


NSYS_LINE = "nsys profile --trace=nvtx --sample=none --cpuctxsw=none --force-overwrite=true --output={out} {prog}"


@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys on PATH")
def test_by_hand_runs_the_typed_nsys_line_without_a_shell_and_shows_its_logs_end(tmp_path, capsys, monkeypatch):
    """Notebook 01's by-hand profile: the line as typed, run by real nsys on a real program; its words
    go to nsys as they are (a `;` or `$(...)` in them is no shell's), its output to <report>.log, and
    the cell prints the log's last lines, which name the report."""
    monkeypatch.delenv("LABKIT_STRICT", raising=False)
    out, marker = tmp_path / "by hand", tmp_path / "ran"
    said = f"$(touch {tmp_path / 'x'}); y"  # run by no shell: written as it is, nothing touched
    code = f"open({str(marker)!r}, 'w').write({said!r})"
    prog = f"python3 -c {shlex.quote(code)}"
    line = NSYS_LINE.format(out=shlex.quote(str(out)), prog=prog)
    assert lab.by_hand(line, report=f"{out}.nsys-rep") is None
    printed = capsys.readouterr().out
    assert f"{out}.nsys-rep" in printed and len(printed.strip().splitlines()) == 2, printed
    assert marker.read_text() == said and not (tmp_path / "x").exists()
    assert (tmp_path / "by hand.log").read_text().count("Generated:") == 1


@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys on PATH")
@pytest.mark.parametrize("failure", sorted(START_FAILURES))
def test_by_hand_starts_nsys_again_after_its_start_up_race_and_never_reads_an_old_report(tmp_path, capsys,
                                                                                         monkeypatch, failure):
    """nsys 2022.4 under load with other sessions starting sometimes exits before its program ran
    ("sem_open" in its "ProcessWaiter", or no endpoint of its daemon): the first start here is made to
    fail that way (an `nsys` first on PATH prints nsys's message once, then runs the real nsys), and
    by_hand starts it again, saying so. A run that wrote nothing, beside a report an earlier run left, is
    a missing report, not the old one; a command that is not there is one line too."""
    monkeypatch.delenv("LABKIT_STRICT", raising=False)
    shim = racing_nsys(tmp_path / "bin", failure, shutil.which("nsys"))
    monkeypatch.setenv("PATH", f"{shim.parent}:{os.environ['PATH']}")
    out = tmp_path / "again"
    assert lab.by_hand(NSYS_LINE.format(out=out, prog="true"), report=f"{out}.nsys-rep") is None
    printed = capsys.readouterr().out
    assert "started again (2 of 3)" in printed and f"{out}.nsys-rep" in printed, printed
    log = (tmp_path / "again.log").read_text()
    said = START_FAILURES[failure].split("\\n")[-1]
    assert log.index(said) < log.index("started again") < log.index("Generated:"), log

    failed = NSYS_LINE.format(out=out, prog=str(tmp_path / "no-such-program"))
    note = lab.by_hand(failed, report=f"{out}.nsys-rep").data
    assert "wrote no report" in note and "this time" in note and "\n" not in note, note
    typo = lab.by_hand("nsyss profile true", report=tmp_path / "typo.nsys-rep").data
    assert "cannot run nsyss" in typo and "\n" not in typo, typo


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
    assert "No backlog: latency is batch fill plus processing" in text and "backlog formed" not in text
    ref_ledger.append({**paced, "metrics": {"fps": 10.0, "latency_p50_ms": 3000.0}})  # 30 in flight: it fell behind
    assert "the pipeline did not keep up with the camera" in lab.latency_lesson("batch4", "paced", 10).data


def test_camera_clip_is_paced_at_its_rate(tmp_path):
    clip = lab.camera_clip(5, "small", folder=tmp_path)
    info = lab.video_info(clip)
    assert info["fps"] == 5 and info["frames"] >= lab.settings("small").frames
    assert lab.camera_clip(5, "small", folder=tmp_path) == clip  # made once
