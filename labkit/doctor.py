"""Check this machine for the lab: ``python -m labkit doctor`` or ``labkit.doctor()``.

Each check gives OK / WARN / FAIL, a one-line detail and, where not OK, a one-line fix.
The exit code is non-zero when something the chosen mode needs is missing:

- ``analysis``: reading exported reports only (pandas); nothing else is required.
- ``lab`` (default): running the lab on CPU or GPU: torch, OpenCV with mp4 I/O, nsys.
- ``gpu``: the lab on a GPU: everything in ``lab`` plus a CUDA GPU that torch can use.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap
from dataclasses import dataclass

from labkit import env

__all__ = ["Check", "run_checks", "doctor", "nvtx_verdict", "cli", "MODES"]

MODES = ("analysis", "lab", "gpu")
OK, WARN, FAIL = "OK", "WARN", "FAIL"
NVTX_KNOWN_GOOD = "0.2.11"


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report. ``needed_by`` lists the modes that require it."""

    name: str
    status: str
    detail: str
    fix: str = ""
    needed_by: tuple[str, ...] = ()


def _vtuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def nvtx_verdict(nvtx_version: str | None, nsys_version: str | None) -> tuple[str, str, str]:
    """Will this nsys record ranges from this Python ``nvtx``? Returns (status, detail, fix).

    Measured (see README, "NVTX and nsys versions"): nsys 2022.4 records no ranges from nvtx
    0.2.12 and newer (0.2.12 made calls no-ops unless the tool answers
    ``nvtxDomainIsEnabled``; NVIDIA/NVTX issue 126 reports the same with nsys 2023.2).
    nvtx 0.2.11 is recorded by nsys 2022.4 and 2025.3 alike.
    """
    pin = f"pip install nvtx=={NVTX_KNOWN_GOOD}"
    if nvtx_version is None:
        return FAIL, "Python nvtx is not installed: no ranges will be emitted", pin
    nv = _vtuple(nvtx_version)
    if nsys_version is None:
        return WARN, f"nvtx {nvtx_version}; no nsys to record it", "install nsys (scripts/install-nsys)"
    ns = _vtuple(nsys_version)
    if nv <= _vtuple(NVTX_KNOWN_GOOD):
        return OK, f"nvtx {nvtx_version}: ranges are recorded by nsys {nsys_version}", ""
    if ns < (2024,):
        return (WARN, f"nvtx {nvtx_version} ranges will NOT be recorded by nsys {nsys_version} "
                      "(nvtx >= 0.2.12 is invisible to nsys 2022-2023)", pin)
    return (WARN, f"nvtx {nvtx_version} with nsys {nsys_version} is untested here; "
                  f"{NVTX_KNOWN_GOOD} is known to work with nsys 2022.4-2025.3", pin)


def _check_python() -> Check:
    v = sys.version_info
    status = OK if v >= (3, 10) else FAIL
    return Check("python", status, f"Python {sys.version.split()[0]} at {sys.executable}",
                 "" if status == OK else "use Python 3.10 or newer", ("analysis", "lab", "gpu"))


def _check_torch() -> list[Check]:
    t = env.torch_info()
    if t["torch"] is None:
        return [Check("torch", FAIL, "torch is not installed",
                      "pip install torch (CPU: pip install torch==2.13.0 here)", ("lab", "gpu"))]
    detail = f"torch {t['torch']}, CUDA build {t['cuda_build'] or 'none (CPU build)'}"
    checks = [Check("torch", OK, detail, "", ("lab", "gpu"))]
    if t["cuda_available"]:
        checks.append(Check("torch.cuda", OK, "torch can use the GPU", "", ("gpu",)))
    else:
        fix = ("install a CUDA build of torch (see pytorch.org) on a GPU machine"
               if not t["cuda_build"] else "check the NVIDIA driver (nvidia-smi) matches torch's CUDA")
        checks.append(Check("torch.cuda", WARN, "torch cannot use a GPU: the lab runs on the CPU", fix, ("gpu",)))
    return checks


def _check_gpu() -> Check:
    gpus = env.gpu_info()
    if not gpus:
        return Check("gpu", WARN, "no NVIDIA GPU found via NVML: CPU mode",
                     "run on a GPU machine for the GPU steps (reference results are in reports/reference)",
                     ("gpu",))
    g = gpus[0]
    more = f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""
    detail = (f"{g['name']}{more}, driver {g['driver']} (CUDA {g['cuda_driver']}), "
              f"{g['memory_free_mib']}/{g['memory_total_mib']} MiB free, "
              f"SM {g['sm_clock_mhz']}/{g['sm_clock_max_mhz']} MHz, mem {g['mem_clock_max_mhz']} MHz")
    return Check("gpu", OK, detail, "", ("gpu",))


def _check_nsys() -> tuple[Check, str | None]:
    path = env.find_nsys()
    if path is None:
        bad = [v for v in ("LABKIT_NSYS", "NSYS") if os.environ.get(v)]
        why = f"${bad[0]}={os.environ[bad[0]]} is not an executable" if bad else "nsys not found on PATH or usual folders"
        return Check("nsys", FAIL, why,
                     "run scripts/install-nsys (Debian/Ubuntu) or install Nsight Systems and set LABKIT_NSYS",
                     ("lab", "gpu")), None
    version = env.nsys_version(path)
    if version is None:
        return Check("nsys", FAIL, f"{path} does not run (nsys --version failed)",
                     "reinstall Nsight Systems or point LABKIT_NSYS at a working nsys", ("lab", "gpu")), None
    return Check("nsys", OK, f"nsys {version} at {path}", "", ("lab", "gpu")), version


_NVTX_PROBE = textwrap.dedent("""
    import nvtx
    for i in range(3):
        with nvtx.annotate("labkit_probe", payload=i):
            pass
""")


def _probe_nvtx(nsys: str) -> Check:
    """Profile a three-range program with nsys (through labkit.profile) and count its ranges."""
    import warnings

    from labkit.nsys import NsysError, profile

    with tempfile.TemporaryDirectory(prefix="labkit-doctor-") as tmp:
        script = os.path.join(tmp, "probe.py")
        with open(script, "w") as f:
            f.write(_NVTX_PROBE)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "no CUDA tables": expected, the probe is NVTX only
                rep = profile([sys.executable, script], name="probe", outdir=tmp, trace=("nvtx",),
                              progress=False, nsys=nsys)
                nv = rep.nvtx
        except NsysError as exc:
            tail = str(exc).strip().splitlines()[-1:] or ["no output"]
            return Check("nvtx probe", FAIL, f"nsys profile failed: {tail[0]}",
                         "see README 'Nsight Systems' (importer symlink fix: scripts/install-nsys)", ("lab", "gpu"))
    ranges = int(((nv["name"] == "labkit_probe") & (nv["kind"] != "mark")).sum())
    if ranges >= 3:
        return Check("nvtx probe", OK, f"nsys recorded {ranges}/3 ranges of a probe program", "", ("lab", "gpu"))
    return Check("nvtx probe", FAIL, f"nsys recorded {ranges}/3 ranges of a probe program",
                 f"pip install nvtx=={NVTX_KNOWN_GOOD}", ("lab", "gpu"))


def _check_tensorrt() -> Check:
    try:
        import tensorrt  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA library under it
        reason = "not installed" if isinstance(exc, ImportError) else f"import failed: {exc}"
        return Check("tensorrt", WARN, f"TensorRT {reason}: the TensorRT steps show reference results",
                     "optional, GPU machines only: pip install tensorrt", ())
    return Check("tensorrt", OK, f"TensorRT {tensorrt.__version__}", "", ())


def _check_opencv() -> Check:
    try:
        import cv2
        import numpy as np
    except ImportError:
        return Check("opencv", FAIL, "OpenCV is not installed", "pip install opencv-python", ("lab", "gpu"))
    with tempfile.TemporaryDirectory(prefix="labkit-doctor-") as tmp:
        path = os.path.join(tmp, "probe.mp4")
        w = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), 30, (64, 48))
        for i in range(8):
            w.write(np.full((48, 64, 3), i * 30, np.uint8))
        w.release()
        cap = cv2.VideoCapture(path)
        n = 0
        while cap.read()[0]:
            n += 1
        cap.release()
    if n == 8:
        return Check("opencv", OK, f"OpenCV {cv2.__version__}: wrote and read back an 8-frame mp4", "", ("lab", "gpu"))
    return Check("opencv", FAIL, f"OpenCV {cv2.__version__}: mp4 round trip gave {n}/8 frames",
                 "install opencv-python (with FFmpeg) from PyPI", ("lab", "gpu"))


def _check_disk(reports: str) -> Check:
    probe = reports
    while not os.path.exists(probe):
        probe = os.path.dirname(os.path.abspath(probe))
    free_gib = shutil.disk_usage(probe).free / 2**30
    status = OK if free_gib >= 2 else (WARN if free_gib >= 0.5 else FAIL)
    return Check("disk", status, f"{free_gib:.1f} GiB free under {os.path.abspath(reports)}",
                 "" if status == OK else "free disk space: each profile takes 10-200 MB", ("lab", "gpu"))


def run_checks(*, reports: str = "reports", probe: bool = False) -> list[Check]:
    """Run every check; ``probe`` also profiles a tiny NVTX program with nsys (about 5-10 s)."""
    checks = [_check_python(), *_check_torch(), _check_gpu()]
    nsys_check, nsys_ver = _check_nsys()
    checks.append(nsys_check)
    status, detail, fix = nvtx_verdict(env.package_version("nvtx"), nsys_ver)
    checks.append(Check("nvtx", status, detail, fix, ("lab", "gpu") if status == FAIL else ()))
    if probe and nsys_ver is not None:
        checks.append(_probe_nvtx(env.find_nsys()))
    checks += [_check_tensorrt(), _check_opencv(), _check_disk(reports)]
    return checks


def _failures(checks: list[Check], mode: str) -> list[Check]:
    return [c for c in checks if c.status != OK and mode in c.needed_by]


def doctor(*, mode: str = "lab", reports: str = "reports", probe: bool = False):
    """The doctor's report as a DataFrame (check, status, detail, fix, required).

    ``required`` is True where the chosen ``mode`` needs the check to pass.
    """
    import pandas as pd

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
    checks = run_checks(reports=reports, probe=probe)
    return pd.DataFrame([{"check": c.name, "status": c.status, "detail": c.detail, "fix": c.fix,
                          "required": mode in c.needed_by} for c in checks])


def cli(argv: list[str]) -> int:
    """``python -m labkit doctor [--mode analysis|lab|gpu] [--probe]``."""
    p = argparse.ArgumentParser(prog="python -m labkit doctor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=MODES, default="lab", help="what the checks are for (default: lab)")
    p.add_argument("--probe", action="store_true", help="also profile a tiny NVTX program with nsys")
    p.add_argument("--reports", default="reports", help="reports folder whose disk is checked")
    args = p.parse_args(argv)
    checks = run_checks(reports=args.reports, probe=args.probe)
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
        if c.fix:
            print(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
    bad = _failures(checks, args.mode)
    if bad:
        print(f"\nnot ready for mode '{args.mode}': {', '.join(c.name for c in bad)}", file=sys.stderr)
        return 1
    print(f"\nready for mode '{args.mode}'")
    return 0
