"""scripts/save_reference.py: reference ledgers hold no absolute path of the machine that made them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import labkit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from save_reference import portable, save_ledger  # noqa: E402

CPU_REF = ROOT / "reports" / "reference" / "cpu-2core" / "ledger.reference.jsonl"


def _strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def test_portable_relativises_paths_of_the_machine():
    """A row as the CPU reference lab wrote it (reports in /tmp/cpulab, project in /work/main)."""
    row = {"command": ["/work/main/.venv/bin/python", "/work/main/source_code/detect_video.py", "--input",
                       "/work/main/data/sample.mp4", "--frames", "128"],
           "config": {"input": "/work/main/data/sample.mp4", "frames": 128},
           "paths": {"profile": "/tmp/cpulab/profiles/baseline-1.nsys-rep", "results": ["/tmp/cpulab/results/b.r1.json"],
                     "logs": ["/opt/elsewhere/b.log"]}, "metrics": {"fps": 15.5}, "step": "baseline"}
    out = portable(row, reports=Path("/tmp/cpulab"), root=Path("/work/main"), python="/work/main/.venv/bin/python")
    assert out["command"][:4] == ["python", "source_code/detect_video.py", "--input", "data/sample.mp4"]
    assert out["config"] == {"input": "data/sample.mp4", "frames": 128}
    assert out["paths"] == {"profile": "profiles/baseline-1.nsys-rep", "results": ["results/b.r1.json"],
                            "logs": ["b.log"]}
    assert out["metrics"] == {"fps": 15.5} and out["step"] == "baseline"


def test_saved_ledger_is_portable_and_keeps_every_figure(tmp_path):
    """The committed CPU reference ledger, saved again: same steps and figures, no absolute path."""
    dst = tmp_path / "ledger.jsonl"
    save_ledger(CPU_REF, dst, reports=Path("/tmp/cpulab"))
    rows = [json.loads(line) for line in dst.read_text().splitlines()]
    assert not [s for r in rows for s in _strings(r) if s.startswith("/")]
    before, after = labkit.Ledger(CPU_REF).read(), labkit.Ledger(dst).read()
    assert list(after["step"]) == list(before["step"]) and len(after) == 14
    assert after["fps"].tolist() == before["fps"].tolist()
    assert after["machine"].tolist() == before["machine"].tolist()


def test_committed_reference_ledgers_hold_no_absolute_paths():
    for ledger in (ROOT / "reports" / "reference").rglob("*.jsonl"):
        text = ledger.read_text()
        assert '"/tmp/' not in text and '"/work/' not in text and '"/home/' not in text, ledger
