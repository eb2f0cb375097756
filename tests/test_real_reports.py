"""Every summary, old and new, against nsys's own CSVs on real exports made by other people.

tests/fixtures/real/ holds the 13 reports of ../shared/real-reports that nsys 2022.4 can read
(nsys 2020.5-2026.1; the .nsys-rep/.qdrep ones exported to SQLite by nsys 2022.4.2), slimmed by
tests/fixtures/real/slim.py (tables no summary reads dropped; nsys stats gives byte-identical CSVs
on the slim copies). Beside each: nsys 2022.4.2's ``nvtxsum``, ``gpukernsum``, ``gpumemtimesum``,
``cudaapisum``, ``gpumemsizesum`` (copied from ../shared) and ``osrtsum`` (made the same way on
the slim copy). An empty CSV means nsys printed no rows. Counts and totals must match exactly;
averages, medians and deviations to nsys's rounding (0.1 ns; sizes to 0.001 MB).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labkit

REAL = Path(__file__).parent / "fixtures" / "real"
REPORTS = sorted(p.stem for p in REAL.glob("*.sqlite"))


def _csv(stem: str, report: str) -> pd.DataFrame | None:
    p = REAL / f"{stem}.{report}.csv"
    return pd.read_csv(p, skipinitialspace=False) if p.stat().st_size else None


@pytest.fixture(scope="module", params=REPORTS)
def real(request):
    return request.param, labkit.load_report(REAL / f"{request.param}.sqlite")


def _same_stats(ours: pd.DataFrame, theirs: pd.DataFrame, key_ours, key_theirs, count_col: str) -> None:
    """Row sets equal by key, counts and totals exact, the rest to nsys's rounding; ours sorted by total."""
    assert list(ours["total_ns"]) == sorted(ours["total_ns"], reverse=True)
    assert len(ours) == len(theirs), (list(key_ours), list(key_theirs))
    a = ours.assign(_k=list(key_ours)).set_index("_k")
    b = theirs.assign(_k=list(key_theirs)).set_index("_k")
    assert sorted(a.index) == sorted(b.index)
    b = b.loc[a.index]
    assert (a["instances"].to_numpy() == b[count_col].to_numpy()).all()
    assert (a["total_ns"].to_numpy() == b["Total Time (ns)"].to_numpy()).all()
    assert (a["min_ns"].to_numpy() == b["Min (ns)"].to_numpy()).all()
    assert (a["max_ns"].to_numpy() == b["Max (ns)"].to_numpy()).all()
    for ours_c, theirs_c in (("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"), ("stddev_ns", "StdDev (ns)")):
        np.testing.assert_allclose(a[ours_c].to_numpy(float), b[theirs_c].to_numpy(float), atol=0.051, rtol=1e-9)
    np.testing.assert_allclose(a["time_pct"].to_numpy(float), b["Time (%)"].to_numpy(float), atol=0.051)


def _empty_or(theirs, ours) -> bool:
    if theirs is None:
        assert len(ours) == 0
        return True
    return False


def test_nvtx_summary(real):
    stem, rep = real
    ours, theirs = labkit.nvtx_summary(rep), _csv(stem, "nvtxsum")
    if _empty_or(theirs, ours):
        return
    key = [(s, f"{d}:{n}" if d else n) for d, n, s in zip(ours["domain"], ours["name"], ours["style"])]
    _same_stats(ours, theirs, key, zip(theirs["Style"], theirs["Range"]), "Instances")


def _xyz(s: str) -> str:
    return " ".join(s.split())


def test_kernel_summary(real):
    stem, rep = real
    ours, theirs = labkit.kernel_summary(rep, by_launch=True), _csv(stem, "gpukernsum")
    if _empty_or(theirs, ours):
        return
    _same_stats(ours, theirs, zip(ours["name"], ours["grid"], ours["block"]),
                zip(theirs["Name"], map(_xyz, theirs["GridXYZ"]), map(_xyz, theirs["BlockXYZ"])), "Instances")
    by_name = labkit.kernel_summary(rep)  # the fast one-column path: totals per name agree with nsys's rows
    want = theirs.groupby("Name")["Total Time (ns)"].sum()
    assert dict(zip(by_name["name"], by_name["total_ns"])) == want.to_dict()


_COPY_2022 = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device",
              "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer", "HtoA": "Host-to-Array", "AtoH": "Array-to-Host",
              "AtoA": "Array-to-Array", "AtoD": "Array-to-Device", "DtoA": "Device-to-Array"}


def _copy_name(op: str) -> str:
    """nsys 2022.4's "[CUDA memcpy HtoD]" / "[CUDA Unified Memory memcpy DtoH]" in labkit's (2025.3's) words."""
    m = re.fullmatch(r"\[CUDA (Unified Memory )?memcpy (\w+)\]", op)
    if not m:
        return op
    return f"[CUDA memcpy {'Unified ' if m.group(1) else ''}{_COPY_2022[m.group(2)]}]"


def test_memcpy_summary(real):
    stem, rep = real
    ours, theirs = labkit.memcpy_summary(rep), _csv(stem, "gpumemtimesum")
    if _empty_or(theirs, ours):
        return
    _same_stats(ours, theirs, ours["name"], map(_copy_name, theirs["Operation"]), "Count")


def test_cuda_api_summary(real):
    stem, rep = real
    ours, theirs = labkit.cuda_api_summary(rep), _csv(stem, "cudaapisum")
    if _empty_or(theirs, ours):
        return
    _same_stats(ours, theirs, ours["name"], theirs["Name"], "Num Calls")
    framed = labkit.cuda_api_summary(labkit.report.window.restrict(rep, window=(-2**62, 2**62)))  # the frame path
    pd.testing.assert_frame_equal(framed.sort_values("name", ignore_index=True),
                                  ours.sort_values("name", ignore_index=True), check_exact=False)


def test_osrt_summary(real):
    stem, rep = real
    ours, theirs = labkit.osrt_summary(rep), _csv(stem, "osrtsum")
    if _empty_or(theirs, ours):
        return
    _same_stats(ours, theirs, ours["name"], theirs["Name"], "Num Calls")


def test_memcpy_size_summary(real):
    stem, rep = real
    ours, theirs = labkit.memcpy_size_summary(rep), _csv(stem, "gpumemsizesum")
    if _empty_or(theirs, ours):
        return
    assert list(ours["total_bytes"]) == sorted(ours["total_bytes"], reverse=True)
    a = ours.set_index("name")
    b = theirs.assign(name=list(map(_copy_name, theirs["Operation"]))).set_index("name")
    assert sorted(a.index) == sorted(b.index)
    b = b.loc[a.index]
    assert (a["count"].to_numpy() == b["Count"].to_numpy()).all()
    for ours_c, theirs_c in (("total_bytes", "Total (MB)"), ("avg_bytes", "Avg (MB)"), ("med_bytes", "Med (MB)"),
                             ("min_bytes", "Min (MB)"), ("max_bytes", "Max (MB)"), ("stddev_bytes", "StdDev (MB)")):
        np.testing.assert_allclose(a[ours_c].to_numpy(float) / 1e6, b[theirs_c].to_numpy(float), atol=0.00051)


def test_threads_are_the_profiled_processes_only(real):
    stem, rep = real
    if not len(rep.all_threads):
        return
    assert set(rep.threads["pid"]) <= set(rep.all_threads["pid"])
    if rep.has_cuda:  # the processes that made CUDA calls are all there, and only processes with events
        api_pids = set(rep.cuda_api["pid"])
        assert api_pids <= set(rep.threads["pid"]) | {p for p in api_pids if p not in set(rep.all_threads["pid"])}
    names = set(rep.threads["thread_name"].dropna())
    assert not names & {"systemd", "kthreadd", "cron", "avahi-daemon", "thermald", "rcu_gp"}, names


def test_non_utf8_export_metadata_loads():
    """The Windows capture's EXPORT_META_DATA holds a user name in a Windows code page (byte 0xE1,
    cp850's "ß"); it loads, the bytes read as Latin-1 (which never fails), the rest intact."""
    rep = labkit.load_report(REAL / "extra-p_2022.1_concurrent_s16_windows.sqlite")
    assert rep.meta["nsys_version"] == "2022.1.1.61"
    kv = dict(rep._db.scalar_rows("SELECT name, value FROM EXPORT_META_DATA"))
    assert kv["EXPORT_USER"] == "Alexander Gei\u00e1"


def test_export_without_metadata_table_loads():
    """nsys 2020.5 wrote no export-metadata table: the report loads, its version unknown, its data whole."""
    rep = labkit.load_report(REAL / "PolPuigPuy_2020.5_openacc_report12.sqlite")
    assert "EXPORT_META_DATA" not in rep._db.tables and "META_DATA_EXPORT" not in rep._db.tables
    assert rep.nsys_version is None
    assert len(rep.kernels) == 1934 and rep.has_cuda


UNREADABLE = {"HalfEmptyDrum_2026.1_cs336_myrun": "2026.1.2.63", "LucasGasparinoBSC_2023.1_p2pacc_test": "2023.1.1.127"}


@pytest.mark.nsys
@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_reports_the_installed_nsys_cannot_read_end_in_one_clear_line_twice(tmp_path, name):
    """The two real reports of shared/real-reports that nsys 2022.4 cannot export: the version that
    wrote each is read from its header (2026's "2026@1@2@63", not a later path's date), the error
    names it and the fix, and a second try says the same with nothing left behind."""
    from labkit.env import find_nsys
    from labkit.record.export import report_version

    if find_nsys() is None:
        pytest.skip("nsys is not installed")
    rep = tmp_path / f"{name}.nsys-rep"
    shutil.copy(Path(__file__).parent / "fixtures" / "real_unreadable" / rep.name, rep)
    assert report_version(rep) == UNREADABLE[name]
    lines = []
    for _ in range(2):
        with pytest.raises(labkit.LabkitError) as err:
            labkit.load_report(rep)
        lines.append(str(err.value))
        assert sorted(p.name for p in tmp_path.iterdir()) == [rep.name]  # no partial export, no log
    assert lines[0] == lines[1] and "\n" not in lines[0]
    assert f"written by nsys {UNREADABLE[name][:6]}" in lines[0] and "newer nsys" in lines[0], lines[0]
