"""What notebook 01's ``!nsys profile`` and ``!nsys stats`` lines need from the nsys installed
here (on PATH, its report names), and the check that nsys's numbers agree with labkit's.

``nsys stats`` renamed its reports in 2023 (``nvtxsum`` -> ``nvtx_sum``, ``gpukernsum`` ->
``cuda_gpu_kern_sum``, ``gpumemtimesum`` -> ``cuda_gpu_mem_time_sum``) and, from then on, labels
a range ``domain:name`` (``:infer`` in the default domain) where 2022.4 prints ``infer``.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd

import labkit
from labkit.record import tool as nsys
from labkit.env import find_nsys, nsys_version, nsys_version_tuple

REPORT_NAMES = {
    "old": {"nvtx": "nvtxsum", "kernels": "gpukernsum", "memcpy": "gpumemtimesum"},
    "new": {"nvtx": "nvtx_sum", "kernels": "cuda_gpu_kern_sum", "memcpy": "cuda_gpu_mem_time_sum"},
}
"""``nsys stats`` report names before 2023 ("old") and from 2023 on ("new")."""


def naming(version: tuple | None = None) -> str:
    """'old' for nsys before 2023 (2022.4 is Debian's), 'new' otherwise (also when none is found)."""
    v = version if version is not None else nsys_version_tuple()
    return "old" if v and v[0] < 2023 else "new"


def stats_report(what: str = "nvtx", version: tuple | None = None) -> str:
    """The ``nsys stats --report`` name of ``what`` (nvtx, kernels, memcpy) for this nsys."""
    return REPORT_NAMES[naming(version)][what]


def nsys_on_path() -> str:
    """Put the nsys labkit finds first on this process's PATH, so that a notebook's ``!nsys``
    lines run it (GPU machines often keep it in the CUDA toolkit's folder); its version."""
    found = find_nsys()
    if not found:
        raise nsys.NsysNotFoundError("nsys not found: install it with scripts/install-nsys, or set LABKIT_NSYS to "
                                     "the nsys executable")
    folder = str(Path(found).parent)
    if shutil.which("nsys") != found:
        os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
    return f"nsys {nsys_version(found)} ({found}): `nsys stats` names its NVTX summary '{stats_report('nvtx')}'"


def agreement(csv: str | Path, rep, version: tuple | None = None) -> pd.DataFrame:
    """nsys's ``nvtxsum``/``nvtx_sum`` CSV beside ``labkit.nvtx_summary`` of the same report.

    Returns: range, instances (nsys), instances (labkit), total ms (nsys), total ms (labkit),
        agree (same count, totals within 0.01 %), one row per range, nsys's order.
    """
    theirs = pd.read_csv(csv)
    ours = labkit.nvtx_summary(rep)
    new = naming(version) == "new"  # the nsys that wrote the CSV (default: the installed one)
    labels = [f"{d}:{n}" if new or d else n for d, n in zip(ours["domain"].fillna(""), ours["name"])]
    ours = ours.assign(range=labels).set_index("range")
    out = pd.DataFrame({"range": theirs["Range"], "instances (nsys)": theirs["Instances"],
                        "total ms (nsys)": theirs["Total Time (ns)"] / 1e6})
    out["instances (labkit)"] = out["range"].map(ours["instances"]).fillna(0).astype(int)
    out["total ms (labkit)"] = out["range"].map(ours["total_ns"]) / 1e6
    out["agree"] = (out["instances (nsys)"] == out["instances (labkit)"]) & (
        (out["total ms (nsys)"] - out["total ms (labkit)"]).abs() <= 1e-4 * out["total ms (nsys)"] + 1e-6)
    return out[["range", "instances (nsys)", "instances (labkit)", "total ms (nsys)", "total ms (labkit)", "agree"]]
