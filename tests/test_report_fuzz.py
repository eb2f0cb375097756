"""Corrupted copies of the project's real exports (seeded byte flips): every outcome is a finished
analysis or a ReportError naming the problem, never a raw sqlite3/numpy/pandas exception."""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

import labkit
from labkit.report.reader import ReportError
from labkit.report.load import load_report

FIX = Path(__file__).parent / "fixtures"
SOURCES = ["annotated.nsys2022.4.sqlite", "gputest.nsys2025.3.sqlite", "pipeline.nsys2022.4.sqlite",
           "pipeline.nsys2025.3.sqlite"]
COPIES = 30  # per source: 120 corrupted files


def _analyse(path: Path) -> dict:
    rep = load_report(path)
    out = {"nvtx_summary": labkit.nvtx_summary(rep), "kernel_summary": labkit.kernel_summary(rep),
           "memcpy_summary": labkit.memcpy_summary(rep), "projection": labkit.gpu_projection(rep),
           "stages": labkit.stage_table(rep), "bottleneck": str(labkit.bottleneck(rep)),
           "utilization": labkit.gpu_utilization(rep, bin_ms=100)}
    rep.load_all()
    return out


@pytest.mark.parametrize("source", SOURCES)
def test_corrupted_exports_end_in_a_result_or_a_report_error(source, tmp_path):
    data = (FIX / source).read_bytes()
    outcomes = {"error": 0, "result": 0}
    for seed in range(COPIES):
        rng = random.Random(f"{source}-{seed}")
        buf = bytearray(data)
        for _ in range(rng.choice([1, 4, 16, 64])):
            i = rng.randrange(100, len(buf))  # past the 100-byte SQLite header: flips inside the pages
            buf[i] ^= 1 << rng.randrange(8)
        path = tmp_path / f"{seed}.sqlite"
        path.write_bytes(bytes(buf))
        try:
            _analyse(path)
            outcomes["result"] += 1
        except ReportError as exc:
            assert str(exc).strip() and "\n" not in str(exc).strip(), exc  # one line
            outcomes["error"] += 1
    assert sum(outcomes.values()) == COPIES
