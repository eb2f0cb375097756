"""The columnar cache (labkit.report.columnar): each export's frames as Parquet in the per-user
cache, read by every later load, never stale for a changed or replaced export at the same path."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("pyarrow", reason="pyarrow is a labkit dependency: pip install -e .")

from labkit.report import columnar  # noqa: E402
from labkit.report.load import load_report  # noqa: E402

FIX = Path(__file__).parent / "fixtures"
A = FIX / "pipeline.nsys2025.3.sqlite"  # nvtx, kernels, copies, API calls
B = FIX / "real" / "Sh1mwww_2024.6_llama3_real_inference_simulation.sqlite"
NAMES = ("nvtx", "kernels", "memcpy", "memset", "cuda_api")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(columnar, "MIN_ROWS", 1)  # the fixtures are small: cache every frame with rows
    monkeypatch.setattr(columnar, "MIN_BYTES", 0)
    return tmp_path / "cache" / "columnar"


def _frames(path) -> dict:
    rep = load_report(path)
    return {n: getattr(rep, n) for n in NAMES}


def test_cached_frames_equal_the_exports_and_are_read_back(cache, tmp_path):
    first = _frames(A)
    (entry,) = list(cache.iterdir())
    assert sorted(p.name for p in entry.iterdir()) == sorted(f"{n}.parquet" for n in NAMES)
    again = _frames(A)
    for n in NAMES:  # dtypes too: categorical names, text, integers
        pd.testing.assert_frame_equal(again[n], first[n])
    # a later load reads the cache, not the export: a frame put there is what it gets
    rep = load_report(A)
    marked = first["kernels"].assign(duration_ns=first["kernels"]["duration_ns"] + 1)
    assert rep._columnar.put("kernels", marked)
    pd.testing.assert_frame_equal(load_report(A).kernels, marked)


def test_a_replaced_report_never_reads_the_stale_cache(cache, tmp_path):
    path = tmp_path / "run.sqlite"
    shutil.copy(A, path)
    old = _frames(path)
    shutil.copy(B, path)  # another run's export at the same path
    new = _frames(path)
    fresh = {n: getattr(load_report(B), n) for n in NAMES}
    for n in NAMES:
        pd.testing.assert_frame_equal(new[n], fresh[n])
    assert len(new["nvtx"]) != len(old["nvtx"])
    assert len(list(cache.glob("run-*"))) == 2
    # the same file changed in place (nsys stats adds tables; a copy over it with a new time)
    stamp = path.stat().st_mtime_ns
    os.utime(path, ns=(stamp + 10**9, stamp + 10**9))
    _frames(path)
    assert len(list(cache.glob("run-*"))) == 3


def test_damaged_or_unwritable_cache_falls_back_to_the_export(cache, tmp_path, monkeypatch):
    want = _frames(A)
    (entry,) = list(cache.iterdir())
    (entry / "nvtx.parquet").write_bytes(b"not parquet")
    pd.testing.assert_frame_equal(load_report(A).nvtx, want["nvtx"])
    assert (entry / "nvtx.parquet").stat().st_size > 100  # rebuilt
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(blocked))  # a cache that cannot be made: frames still load
    pd.testing.assert_frame_equal(load_report(A).kernels, want["kernels"])


def test_small_frames_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    rep = load_report(A)
    assert len(rep.nvtx) < columnar.MIN_ROWS and A.stat().st_size < columnar.MIN_BYTES
    monkeypatch.setattr(columnar, "MIN_ROWS", 1)  # a small export is not cached, whatever its frames
    assert len(load_report(A).kernels) > 0
    assert not (tmp_path / "cache" / "columnar").exists()
