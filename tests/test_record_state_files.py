"""The recording driver's state files are input (scripts/record_reference.py, labbook.record_state):
progress.json and commit.json are read with a schema (cut short or of the wrong types: one line
naming the file and the fix; never matched by substring), and the provenance takes git's commit
of the checkout over a stale commit.json, saying when they disagree."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from labkit.bench.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "record_reference.py"


def driver(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


def _run(tmp_path, progress_text: str, steps: str = "fp16", state_dir=None) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    (work / "reports").mkdir(parents=True, exist_ok=True)
    (work / "progress.json").write_text(progress_text)
    return driver("run", "--budget", 600, "--out", tmp_path / "out", "--work", work, "--mode", "small", "--model",
                  "cpu", "--machine", "cpu-rehearsal", "--steps", steps, "--state-dir", state_dir or tmp_path / "none")


@pytest.mark.parametrize("text, what", [
    ('{"done": "fp16_cuda_graphs", "calls": 1}', "done"),  # a string: `"fp16" in it` would count fp16 as done
    ('{"done": ["baseline"], "calls": 1, "attempts": {"fp1', "cut short"),
    ('{"done": [], "calls": "3"}', "calls"),
    ('{"done": [], "calls": 1, "attempts": {"fp16": "two"}}', "attempts"),
    ('[1, 2]', "object"),
])
def test_a_progress_file_cut_short_or_of_the_wrong_types_is_one_line(tmp_path, text, what):
    res = _run(tmp_path, text)
    assert res.returncode != 0, res.stdout + res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr, res.stderr
    assert "progress.json" in res.stderr and what in res.stderr, res.stderr
    assert not (tmp_path / "work" / "reports" / "ledger.jsonl").exists()  # nothing ran on a state not understood
    assert (tmp_path / "work" / "progress.json").read_text() == text  # nor was it overwritten


def _provenance(out: Path, tmp: Path) -> dict:
    with tarfile.open(out / "reference.tgz") as tar:
        tar.extractall(tmp / "ref", filter="data")
    return json.loads((tmp / "ref" / "cpu-rehearsal" / "provenance.json").read_text())


def test_provenance_takes_git_over_a_stale_commit_json_and_says_so(tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    state = tmp_path / "state"
    state.mkdir()
    stale = "0123456789abcdef0123456789abcdef01234567"
    (state / "commit.json").write_text(json.dumps({"commit": stale, "dirty": False}))
    res = _run(tmp_path, json.dumps({"done": [], "attempts": {"baseline": 2}, "calls": 2}), "baseline", state)
    assert res.returncode == 0, res.stderr
    prov = _provenance(tmp_path / "out", tmp_path)
    assert prov["commit"] == head
    assert stale[:12] in prov["commit_note"] and "commit.json" in prov["commit_note"]
    assert stale[:12] in (tmp_path / "out" / "record.log").read_text()


def test_a_commit_json_of_the_wrong_types_is_one_line(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "commit.json").write_text('{"commit": 12, "dirty": "no"')
    res = _run(tmp_path, json.dumps({"done": [], "calls": 1}), "baseline", state)
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "commit.json" in res.stderr and "prepare" in res.stderr, res.stderr
