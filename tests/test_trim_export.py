"""labkit.report.reader.trim_export: a slice [start_ns, end_ns) of a real nsys SQLite export.

The fixture is copied to tmp_path first; nothing is written under tests/fixtures.
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from labkit import load_report
from labkit.report.reader import ReportError
from labkit.report.trim import trim_export

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPORT = FIXTURES / "gputest.nsys2025.3.sqlite"
# depth/parent are recomputed from the ranges present (a parent may lie outside the window)
NVTX_DERIVED = ["depth", "parent"]


def load(path):
    return load_report(path)


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("trim_src") / "gputest.sqlite"
    shutil.copyfile(EXPORT, p)
    return p


@pytest.fixture(scope="module")
def full(src):
    return load(src)


@pytest.fixture(scope="module")
def window(full) -> tuple[int, int]:
    """From the start of the 3rd 'batch' range to the start of the 6th: mid-run, kernels included."""
    starts = full.nvtx.loc[full.nvtx["name"] == "batch", "start_ns"].sort_values().to_numpy()
    assert len(starts) >= 6
    return int(starts[2]), int(starts[5])


def in_window(df: pd.DataFrame, start: int, end: int) -> pd.DataFrame:
    return df[(df["start_ns"] >= start) & (df["start_ns"] < end)]


def same_rows(a: pd.DataFrame, b: pd.DataFrame, drop=()) -> None:
    key = [c for c in ("start_ns", "end_ns", "correlation_id", "global_tid", "name") if c in a.columns]
    a = a.drop(columns=list(drop)).sort_values(key, kind="stable").reset_index(drop=True)
    b = b.drop(columns=list(drop)).sort_values(key, kind="stable").reset_index(drop=True)
    # categorical columns (kernel names) have the categories present: compare the values
    a, b = ([d[c].astype(object) if isinstance(d[c].dtype, pd.CategoricalDtype) else d[c] for c in d.columns]
            for d in (a, b))
    a, b = pd.concat(a, axis=1), pd.concat(b, axis=1)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


def tables(path: Path) -> dict[str, list[str]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] for t in names}
    finally:
        con.close()


def query(path: Path, sql: str, *args):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def test_frames_hold_exactly_the_events_in_the_window(src, full, window, tmp_path):
    start, end = window
    dst = tmp_path / "slice" / "trimmed.sqlite"
    assert trim_export(src, dst, start, end) == dst
    assert dst.is_file() and not dst.with_name(dst.name + ".part").exists()
    assert dst.stat().st_size < src.stat().st_size
    cut = load(dst)

    for frame, drop in (("kernels", ()), ("cuda_api", ()), ("memcpy", ()), ("nvtx", NVTX_DERIVED)):
        want = in_window(getattr(full, frame), start, end)
        got = getattr(cut, frame)
        assert len(got) == len(want), frame
        same_rows(got, want, drop)
    # a real slice: some of each kind survives, and some was cut away
    for frame in ("kernels", "cuda_api", "nvtx"):
        assert 0 < len(getattr(cut, frame)) < len(getattr(full, frame)), frame
    # strings still resolve
    assert cut.kernels["name"].map(lambda s: isinstance(s, str) and s != "").all()
    assert cut.cuda_api["name"].map(lambda s: isinstance(s, str) and s != "").all()
    assert set(cut.nvtx["name"]) == {"batch", "infer", "torch_infer", "sync", "d2h"}
    assert list(cut.nvtx["name"]).count("batch") == 3
    # metadata kept whole
    assert cut.meta == {**full.meta}
    pd.testing.assert_frame_equal(cut.threads, full.threads)


def test_every_table_with_start_is_filtered_and_the_rest_kept(src, window, tmp_path):
    start, end = window
    dst = trim_export(src, tmp_path / "t.sqlite", start, end)
    before, after = tables(src), tables(dst)
    assert after == before  # same tables, same columns
    filtered = [t for t, cols in before.items() if "start" in cols]
    assert {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"} <= set(filtered)
    for t in before:
        n_dst = query(dst, f'SELECT count(*) FROM "{t}"')[0][0]
        if t in filtered:
            # NvtxDomainCreate/Destroy rows (event types 75/76) name the domains: kept wherever they lie
            domain_rows = " AND eventType NOT IN (75, 76)" if t == "NVTX_EVENTS" else ""
            want = query(src, f'SELECT count(*) FROM "{t}" WHERE (start >= ? AND start < ?)'
                              + (" OR eventType IN (75, 76)" if domain_rows else ""), start, end)[0][0]
            assert n_dst == want, t
            outside = query(dst, f'SELECT count(*) FROM "{t}" WHERE (start < ? OR start >= ?){domain_rows}',
                            start, end)[0][0]
            assert outside == 0, t
        else:
            assert n_dst == query(src, f'SELECT count(*) FROM "{t}"')[0][0], t
    assert query(dst, "SELECT id, value FROM StringIds ORDER BY id") == \
        query(src, "SELECT id, value FROM StringIds ORDER BY id")


def test_window_is_half_open(src, full, tmp_path):
    k = full.kernels.sort_values("start_ns", kind="stable").reset_index(drop=True)
    starts = k["start_ns"].drop_duplicates().to_numpy()
    start, end = int(starts[10]), int(starts[20])  # both exact kernel start times
    cut = load(trim_export(src, tmp_path / "h.sqlite", start, end))
    assert cut.kernels["start_ns"].min() == start  # start included
    assert cut.kernels["start_ns"].max() < end  # end excluded
    assert len(cut.kernels) == ((k["start_ns"] >= start) & (k["start_ns"] < end)).sum()


def test_window_with_no_events_gives_empty_frames(src, full, tmp_path):
    first = int(min(full.kernels["start_ns"].min(), full.cuda_api["start_ns"].min(), full.nvtx["start_ns"].min()))
    cut = load(trim_export(src, tmp_path / "e.sqlite", 0, first - 1_000_000_000))
    assert len(cut.kernels) == len(cut.cuda_api) == len(cut.nvtx) == 0
    assert cut.meta == full.meta


def test_source_is_left_untouched(src, window, tmp_path):
    before = src.read_bytes()
    trim_export(src, tmp_path / "u.sqlite", *window)
    assert src.read_bytes() == before


def test_refuses_to_overwrite(src, window, tmp_path):
    dst = tmp_path / "exists.sqlite"
    dst.write_bytes(b"keep me")
    with pytest.raises(ReportError, match="exists"):
        trim_export(src, dst, *window)
    assert dst.read_bytes() == b"keep me"
    assert not dst.with_name(dst.name + ".part").exists()
    before = src.read_bytes()
    with pytest.raises(ReportError):
        trim_export(src, src, *window)  # onto itself
    assert src.read_bytes() == before


def test_missing_source(tmp_path):
    dst = tmp_path / "out.sqlite"
    with pytest.raises(ReportError, match="no such export"):
        trim_export(tmp_path / "nope.sqlite", dst, 0, 10)
    with pytest.raises(ReportError):
        trim_export(tmp_path, dst, 0, 10)  # a folder is not an export
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("start, end", [(10, 10), (11, 10)])
def test_empty_window_is_a_value_error(src, tmp_path, start, end):
    dst = tmp_path / "w.sqlite"
    with pytest.raises(ValueError, match="empty window"):
        trim_export(src, dst, start, end)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["text", "nsys-rep"])
def test_not_sqlite_raises_and_leaves_nothing(tmp_path, kind):
    bad = tmp_path / "in" / "bad.sqlite"
    bad.parent.mkdir()
    if kind == "text":
        bad.write_text("this is not an SQLite database\n" * 50)
    else:  # a real report file that was never exported
        shutil.copyfile(FIXTURES / "annotated.nsys2022.4.nsys-rep", bad)
    out = tmp_path / "out"
    dst = out / "trimmed.sqlite"
    with pytest.raises(ReportError, match="not an SQLite file|cannot trim"):
        trim_export(bad, dst, 0, 10**12)
    assert not dst.exists()
    assert not dst.with_name(dst.name + ".part").exists()
    assert list(out.iterdir()) == [] if out.exists() else True


def test_empty_file_is_not_an_export(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    dst = tmp_path / "t.sqlite"
    try:
        with pytest.raises(ReportError):
            trim_export(empty, dst, 0, 10)
    finally:
        assert not dst.with_name(dst.name + ".part").exists()


@pytest.mark.nsys
def test_named_nvtx_domain_survives_the_trim(tmp_path):
    # domains.nsys2022.4.sqlite: ranges in "mydomain" and the default domain (tests/fixtures/domains.py)
    db = tmp_path / "dom.sqlite"
    shutil.copyfile(FIXTURES / "domains.nsys2022.4.sqlite", db)
    ranges = query(db, "SELECT start FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start")
    assert len(ranges) == 6
    dst = trim_export(db, tmp_path / "dom.trim.sqlite", ranges[2][0], ranges[5][0])
    named = query(dst, "SELECT r.start, d.text FROM NVTX_EVENTS r JOIN NVTX_EVENTS d "
                       "ON d.eventType = 75 AND d.domainId = r.domainId WHERE r.eventType = 59 AND r.domainId != 0")
    assert len(named) >= 1 and all(text == "mydomain" for _, text in named), named
    kept = load_report(dst).nvtx
    assert len(kept) == 3 and set(kept.loc[kept["name"] == "work", "domain"]) == {"mydomain"}




def test_trim_keeps_only_the_call_stacks_of_the_calls_kept(tmp_path):
    """A run traced with OS runtime backtraces (the lab's CPU batch4 step, nsys 2022.4): the stacks
    have no time of their own, so only those of the kept calls stay; the slice's calls are the full
    report's in the window, and the file shrinks with the slice."""
    src = tmp_path / "batch4.sqlite"
    shutil.copyfile(FIXTURES / "lab" / "batch4.cpu-2core.r5.nsys2022.4.sqlite", src)
    full = load(src)
    o = full.osrt.sort_values("start_ns")
    start, end = int(o["start_ns"].iloc[len(o) // 4]), int(o["start_ns"].iloc[len(o) // 2])
    out = trim_export(src, tmp_path / "slice.sqlite", start, end)
    con = sqlite3.connect(out)
    chains = {r[0] for r in con.execute("SELECT DISTINCT id FROM OSRT_CALLCHAINS")}
    used = {r[0] for r in con.execute("SELECT DISTINCT callchainId FROM OSRT_API WHERE callchainId IS NOT NULL")}
    all_chains = {r[0] for r in sqlite3.connect(src).execute("SELECT DISTINCT id FROM OSRT_CALLCHAINS")}
    n_full = sqlite3.connect(src).execute("SELECT COUNT(*) FROM OSRT_CALLCHAINS").fetchone()[0]
    n_cut = con.execute("SELECT COUNT(*) FROM OSRT_CALLCHAINS").fetchone()[0]
    con.close()
    assert chains == used & all_chains and 0 < n_cut < n_full * 0.6
    want = o[(o["start_ns"] >= start) & (o["start_ns"] < end)]
    got = load(out).osrt
    assert len(got) == len(want) > 0 and set(got["start_ns"]) == set(want["start_ns"])
    assert out.stat().st_size < src.stat().st_size * 0.6


def test_trim_keeps_the_cuda_events_of_the_calls_kept(tmp_path):
    """CUDA event rows (cudaEventRecord's events) have no time: those of the kept calls stay."""
    src = tmp_path / "pipeline.sqlite"
    shutil.copyfile(FIXTURES / "pipeline.nsys2025.3.sqlite", src)
    con = sqlite3.connect(src)
    corr = con.execute("SELECT e.correlationId, r.start FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT e JOIN "
                       "CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) ORDER BY r.start").fetchall()
    con.close()
    assert len(corr) >= 4
    start, end = corr[len(corr) // 2][1], corr[-1][1] + 1
    out = trim_export(src, tmp_path / "slice.sqlite", start, end)
    con = sqlite3.connect(out)
    kept = {r[0] for r in con.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT")}
    con.close()
    assert kept == {c for c, t in corr if start <= t < end}
