"""Invariants of the judgement on every real report we hold (tests/fixtures, other people's included):
no prediction above its own Amdahl limit, no two findings that contradict each other or the
accounting, blocked time apart from work, and the steady window inside the trace; and no raw
exception from advise, bottleneck or kernels (the API and the command line, text and --json) on any
export, of any nsys version, nor on copies whose nullable columns nsys's schema allows to be NULL are."""
from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

import labkit
from labkit.judge.accounting import account, steady_window_of
from labkit.judge.evidence import MIN_GAIN
from labkit.stats.stages import trace_span

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = Path(__file__).resolve().parents[1] / "reports" / "reference"
REPORTS = sorted(p for p in FIXTURES.rglob("*.sqlite")) + sorted(REFERENCE.rglob("*.sqlite"))
"""Other people's reports and ours, the lab's reference runs on CPUs, an H100 and an H200 among them."""
PER_ITEM = re.compile(r"plus (-?[\d.]+) ms an item")


def _load(path):
    try:
        return labkit.load_report(path)
    except labkit.LabkitError as exc:  # an export this nsys cannot read is tested elsewhere
        pytest.skip(f"{path.name}: {exc}")


@pytest.mark.parametrize("path", REPORTS, ids=[f"{p.parent.name}/{p.stem}" for p in REPORTS])
def test_judgement_invariants_hold_on_every_report(path, monkeypatch):
    """The invariants, then the command line's advise, bottleneck and kernels on the same report (the
    judgement taken once per arguments: the command line prints what the invariants checked)."""
    rep = _load(path)
    _judge_once(rep, monkeypatch)
    _invariants(rep)
    _answers(rep.path)


def _invariants(rep):
    t0, t1 = trace_span(rep)
    (w0, w1), why = steady_window_of(rep)
    assert t0 <= w0 < w1 <= t1 or (t0, t1) == (w0, w1), why
    for steady in (True, False):
        a = labkit.advise(rep, warmup=0, steady=steady)  # as the command line asks
        for _, r in a.iterrows():
            p, w, s = r["predicted_speedup"], r["window_ms"], r["saves_ms"]
            assert p >= 1.0 - 1e-9 and 0 <= s <= w + 1e-6, r["rule"]
            if math.isfinite(p) and w > s:
                assert p <= w / (w - s) * (1 + 1e-6), (r["rule"], p, w, s)  # never above its own Amdahl limit
            assert not (r["basis"] == "bound" and s <= 0), r["rule"]  # a finding that removes nothing bounds nothing
            for cost in PER_ITEM.findall(r["evidence"]):  # a fitted call: no item costs less than nothing
                assert float(cost) >= 0, (r["rule"], r["evidence"])
        rules = set(a["rule"])
        assert not {"gpu_bound", "gpu_low_utilization"} <= rules  # the GPU is never both the limit and idle
        if len(a):
            acc = account(rep, window=a.attrs["window"])
            assert ("gpu_bound" in rules) <= (acc.limiter == "gpu")
            assert 0 <= acc.oversubscribed_ms <= acc.window_ms + 1e-6
            for _, r in a[a["basis"] == "bound"].iterrows():  # no bound from times that waited for a core
                assert acc.oversubscribed_ms <= (1 - 1 / MIN_GAIN) * r["window_ms"] / r["predicted_speedup"], r["rule"]
            for _, r in a[a["rule"] == "gpu_bound"].iterrows():  # faster kernels leave the copy engines their time
                left = acc.copy_ms / (4 if r["lever"] == "reduce_precision" else 1)
                if left > 0:
                    assert r["predicted_speedup"] <= r["window_ms"] / left * (1 + 1e-6), (r["lever"], acc.copy_ms)
            for _, t in acc.threads.iterrows():  # blocked time is apart from work: the parts add up
                parts = t["work_ms"] + t["blocked_ms"] + t["cuda_ms"] + t["untraced_ms"]
                assert parts == pytest.approx(t["extent_ms"], abs=1e-3)
                assert t["busy_ms"] <= t["extent_ms"] - t["blocked_ms"] + 1e-6
    b = labkit.bottleneck(rep, warmup=0, steady=True)
    if b.gpu_bound:  # the GPU is named only when its SMs were busier than every thread and the copies
        assert b.gpu_busy_frac > b.thread_busy_frac and b.gpu_busy_frac >= b.copy_busy_frac


def test_blocked_time_is_computed_once_per_report_and_anew_for_a_window():
    """stage_table, the accounting, bottleneck and the what-if model read one blocked-time answer per
    report (Report.memo); a windowed report is a new report and gets its own, and both are what
    the computation gives from scratch."""
    from labkit.report.window import restrict
    from labkit.stats.blocked import _blocked_intervals, blocked_intervals

    rep = _load(FIXTURES / "real" / "hpcgroup_2024.5_pipit_cloverleaf.sqlite")  # 1,831 OS runtime calls
    first = blocked_intervals(rep)
    assert first and blocked_intervals(rep) is first
    assert blocked_intervals(rep, kind="latency") is not first
    t0, t1 = trace_span(rep)
    part = restrict(rep, window=(t0, t0 + (t1 - t0) // 2))
    mine = blocked_intervals(part)
    assert mine is not first
    for r, got in ((rep, first), (part, mine)):
        want = _blocked_intervals(r, waits=True, kind="all")
        assert set(got) == set(want)
        assert all((got[g][0] == want[g][0]).all() and (got[g][1] == want[g][1]).all() for g in want)
    # a half window holds less blocked time than the whole trace on some thread
    total = lambda iv: sum(int((e - s).sum()) for s, e in iv.values())  # noqa: E731
    assert total(mine) < total(first)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    from labkit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


COMMANDS = [(cmd, fmt) for cmd in ("advise", "bottleneck", "kernels") for fmt in ((), ("--json",))]


def _answers(path: Path, *, refusing: bool = True) -> None:
    """Each command in each format ends in its result (exit 0; --json: JSON that parses) or, where
    ``refusing``, in one line naming the problem (exit 1), never in a raw exception (which would
    raise out of here)."""
    for cmd, fmt in COMMANDS:
        rc, out, err = _cli([cmd, str(path), *fmt])
        assert rc == 0 or refusing, (cmd, fmt, rc, err)
        if rc == 0:
            if fmt:
                assert isinstance(json.loads(out), dict), (cmd, out[:200])
        else:
            assert rc == 1 and err.startswith("labkit: ") and len(err.strip().splitlines()) == 1, (cmd, rc, err)


def _memo(fn):
    """``fn`` remembering its answer per arguments: the six commands judge one report once, not six times."""
    seen: dict = {}

    def memo(rep, *args, **kw):
        key = (id(rep), repr(args), repr(sorted(kw.items())))
        if key not in seen:
            seen[key] = fn(rep, *args, **kw)
        return seen[key]

    return memo


def _judge_once(rep, monkeypatch) -> None:
    """The command line reads the already loaded ``rep`` (one process, the report loaded once) and
    the judgement is taken once per arguments: what the commands print of it, in both formats, is
    what :func:`_answers` then tests."""
    from labkit.cli_report import _KERNEL_TABLES
    from labkit.stats import kernels

    monkeypatch.setattr(labkit, "load_report", lambda *a, **k: rep)
    for name in ("advise", "bottleneck"):
        monkeypatch.setattr(labkit, name, _memo(getattr(labkit, name)))
    for name in _KERNEL_TABLES.values():
        monkeypatch.setattr(kernels, name, _memo(getattr(kernels, name)))


NULLABLE_SOURCES = [FIXTURES / "openacc.nsys2020.5.trimmed.sqlite", FIXTURES / "pipeline.nsys2022.4.sqlite",
                    FIXTURES / "known_gpu" / "gpu_pageable.h200.sqlite",
                    FIXTURES / "real" / "sdroruganti_2026.1_report2.sqlite"]
"""Small exports of nsys 2020.5, 2022.4, 2025.3 and 2026.1, CPU and GPU, one with pageable copies."""
TABLE_GROUPS = {"metadata": ("TARGET_INFO", "META_DATA", "ANALYSIS", "PROCESSES", "ThreadNames", "ENUM"),
                "every table": ("",)}
"""The metadata alone (the GPU's fields, the capture's command: the activity read as before), and
every table at once."""


def _nulled(src: Path, dst: Path, prefixes: tuple[str, ...]) -> Path:
    """A copy of ``src`` with every column that nsys's schema lets be NULL (no NOT NULL, no key) set to
    NULL in the tables whose names start with one of ``prefixes``."""
    shutil.copy(src, dst)
    with contextlib.closing(sqlite3.connect(dst)) as db:
        for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            cols = [c[1] for c in db.execute(f"PRAGMA table_info([{t}])") if not c[3] and not c[5]]
            if cols and t.startswith(prefixes):
                db.execute(f"UPDATE [{t}] SET {', '.join(f'[{c}] = NULL' for c in cols)}")
        db.commit()
    return dst


@pytest.mark.parametrize("group", list(TABLE_GROUPS))
@pytest.mark.parametrize("src", NULLABLE_SOURCES, ids=[p.stem for p in NULLABLE_SOURCES])
def test_nulls_nsys_allows_are_read_as_unknown_by_every_command(src, group, tmp_path):
    """NULL where the schema allows it (nsys 2019.6 and 2020.3 left TARGET_INFO_GPU's computeMajor
    empty; a capture's command or a session's start may be missing): advise, bottleneck and kernels,
    text and --json, still judge the report: a NULL is unknown, not a damaged export."""
    _answers(_nulled(src, tmp_path / src.name, TABLE_GROUPS[group]), refusing=False)


def test_pageable_copies_on_a_gpu_of_unknown_compute_capability_get_the_slowest_link(tmp_path):
    """The pinned rate the pageable-copy finding assumes, where the GPU's compute capability is NULL
    (raised TypeError from int(None) before): the slowest link of the table, said as such."""
    from labkit.judge.gpu_rules import PINNED_GBPS

    path = tmp_path / "pageable.sqlite"
    shutil.copy(FIXTURES / "known_gpu" / "gpu_pageable.h200.sqlite", path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE TARGET_INFO_GPU SET computeMajor = NULL, computeMinor = NULL")
        db.commit()
    a = labkit.advise(labkit.load_report(path))
    r = a[a["rule"] == "pageable_memcpy"].iloc[0]
    assert f"{PINNED_GBPS[7]:g} GB/s, the slowest PCIe link" in r["assumptions"]
    assert "does not say" in r["assumptions"] and r["predicted_speedup"] > 1
