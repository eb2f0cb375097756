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
from pathlib import Path
from dataclasses import dataclass

from labkit import env

__all__ = ["Check", "run_checks", "doctor", "nvtx_verdict", "onnxruntime_verdict", "compiler_verdict",
           "cuda_probe_verdict", "cuda_pair_verdict", "sharing_verdict", "cli", "MODES", "CUDA_INDEX"]

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

    Measured (see docs/recording.md, "NVTX and nsys versions"): nsys 2022.4 records no ranges from nvtx
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
    gpus = env.visible_gpus()  # cuda:0 first, CUDA_VISIBLE_DEVICES honoured, matched by UUID
    if not gpus:
        seen = " (CUDA_VISIBLE_DEVICES hides them all)" if env.gpu_info() else ""
        return Check("gpu", WARN, f"no NVIDIA GPU found via NVML{seen}: CPU mode",
                     "run on a GPU machine for the GPU steps (reference results are in reports/reference)",
                     ("gpu",))
    g = gpus[0]
    more = f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""
    detail = (f"cuda:0 = NVML {g['index']} {g['name']}{more}, driver {g['driver']} (CUDA {g['cuda_driver']}), "
              f"{g['memory_free_mib']}/{g['memory_total_mib']} MiB free, "
              f"SM {g['sm_clock_mhz']}/{g['sm_clock_max_mhz']} MHz, mem {g['mem_clock_max_mhz']} MHz")
    return Check("gpu", OK, detail, "", ("gpu",))


def sharing_verdict(compute_mode: str | None, *, mps: bool) -> Check:
    """Whether several processes can share the GPU (``processes2``, ``ranks2``, a class on one box):
    its compute mode (``nvidia-smi -c``) and whether MPS serves it."""
    with_mps = "MPS running: their kernels run side by side" if mps else \
        "no MPS: their kernels take turns (nvidia-cuda-mps-control -d lets them run side by side)"
    if compute_mode in (None, "DEFAULT"):
        mode = "compute mode DEFAULT" if compute_mode else "compute mode unknown (NVML did not say)"
        return Check("gpu sharing", OK, f"{mode}: several processes can share the GPU; {with_mps}", "", ())
    if compute_mode == "PROHIBITED":
        return Check("gpu sharing", FAIL, "compute mode PROHIBITED: no process can create a CUDA context on it",
                     "ask its administrator for nvidia-smi -c DEFAULT, or use another GPU", ("gpu",))
    if mps:  # EXCLUSIVE_PROCESS (or _THREAD) with MPS: the MPS server is the one process; clients share it
        return Check("gpu sharing", OK, f"compute mode {compute_mode} with MPS running: processes share the GPU "
                     "through the MPS server", "", ())
    return Check("gpu sharing", WARN, f"compute mode {compute_mode} and no MPS: one process per GPU, so the steps "
                 "that run several processes on one GPU (processes2, ranks2) fail creating their CUDA context",
                 "start MPS (nvidia-cuda-mps-control -d), ask for nvidia-smi -c DEFAULT, or give each process its "
                 "own GPU", ())


def _check_sharing() -> list[Check]:
    gpus = env.visible_gpus()
    return [sharing_verdict(gpus[0].get("compute_mode"), mps=env.mps_running())] if gpus else []


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


def _check_environment() -> Check:
    """What of this environment a profiled program will not see: nsys 2025.x records the whole
    process environment in each report, so labkit removes the secrets (labkit.record.proc.profiled_env)."""
    from labkit.record.proc import SECRET_NAMES, SECRET_SUFFIXES, is_secret

    rule = ", ".join([*SECRET_NAMES, *(f"*{s}" for s in SECRET_SUFFIXES)])
    here = sorted(k for k in os.environ if is_secret(k))
    now = f"; removed here: {', '.join(here)}" if here else "; none is set here"
    return Check("environment", OK, f"nsys records the profiled program's environment in each report (nsys 2025.x): "
                 f"labkit removes {rule}{now}")


_NVTX_PROBE = textwrap.dedent("""
    import nvtx
    for i in range(3):
        with nvtx.annotate("labkit_probe", payload=i):
            pass
""")
# With a GPU, the probe also launches one CUDA kernel: nsys older than the driver records
# none of it (nsys 2022.4 on a CUDA 13 driver), and every GPU analysis would then be empty.
_CUDA_PROBE = textwrap.dedent("""
    import torch
    x = torch.ones(1024, device="cuda")
    (x * 2).sum().item()
    torch.cuda.synchronize()
""")


def _probe(nsys: str, nsys_version: str | None, *, cuda: bool) -> list[Check]:
    """Profile a three-range program with nsys (through labkit.profile) and count its ranges;
    with ``cuda``, the program also launches a kernel and the kernel is looked for."""
    from labkit.record.tool import NsysError
    from labkit.report.load import profile

    with tempfile.TemporaryDirectory(prefix="labkit-doctor-") as tmp:
        script = os.path.join(tmp, "probe.py")
        with open(script, "w") as f:
            f.write(_NVTX_PROBE + (_CUDA_PROBE if cuda else ""))
        try:
            rep = profile([sys.executable, script], name="probe", outdir=tmp,
                          trace=("cuda", "nvtx") if cuda else ("nvtx",), progress=False, nsys=nsys)
            nv = rep.nvtx
            kernels = len(rep.kernels) if cuda else 0
        except NsysError as exc:
            tail = str(exc).strip().splitlines()[-1:] or ["no output"]
            return [Check("nvtx probe", FAIL, f"nsys profile failed: {tail[0]}",
                          "see docs/recording.md (importer symlink fix: scripts/install-nsys)", ("lab", "gpu"))]
    ranges = int(((nv["name"] == "labkit_probe") & (nv["kind"] != "mark")).sum())
    checks = [Check("nvtx probe", OK, f"nsys recorded {ranges}/3 ranges of a probe program", "", ("lab", "gpu"))
              if ranges >= 3 else
              Check("nvtx probe", FAIL, f"nsys recorded {ranges}/3 ranges of a probe program",
                    f"pip install nvtx=={NVTX_KNOWN_GOOD}", ("lab", "gpu"))]
    if cuda:
        checks.append(cuda_probe_verdict(kernels, nsys_version, (env.visible_gpus() or [{}])[0].get("cuda_driver")))
    return checks


def cuda_probe_verdict(kernels: int, nsys_version: str | None, cuda_driver: str | None) -> Check:
    """Did nsys record the probe's CUDA kernel? Without it, every GPU analysis of the lab is empty."""
    if kernels:
        return Check("cuda probe", OK, f"nsys {nsys_version} recorded {kernels} kernel(s) of a probe program",
                     "", ("gpu",))
    return Check("cuda probe", FAIL, f"nsys {nsys_version} recorded no CUDA kernel of a probe program that ran one "
                 f"(driver CUDA {cuda_driver}): nsys is likely older than the driver",
                 "use the Nsight Systems of your CUDA toolkit, or a release newer than the driver "
                 "(developer.nvidia.com/nsight-systems), and point LABKIT_NSYS at it", ("gpu",))


def onnxruntime_verdict(cpu: str | None, gpu: str | None, *, has_gpu: bool) -> Check:
    """ONNX Runtime: exactly one of ``onnxruntime`` (CPU) and ``onnxruntime-gpu`` installed.

    Both ship the same ``onnxruntime`` package folder, so with both, whichever was installed last
    owns the files, and uninstalling either deletes files the other needs.
    """
    if cpu and gpu:
        return Check("onnxruntime", FAIL, f"both onnxruntime {cpu} and onnxruntime-gpu {gpu} are installed: "
                     "they overwrite each other's files",
                     "pip install --force-reinstall --no-deps onnxruntime-gpu (on a CPU-only machine: "
                     "pip uninstall -y onnxruntime-gpu && pip install --force-reinstall --no-deps onnxruntime)",
                     ("lab", "gpu"))
    if not (cpu or gpu):
        return Check("onnxruntime", WARN, "ONNX Runtime is not installed: the ONNX and INT8 steps cannot run",
                     "pip install -e '.[gpu]' on a GPU machine, pip install -e '.[cpu]' elsewhere", ())
    if has_gpu and not gpu:
        return Check("onnxruntime", WARN, f"onnxruntime {cpu} is the CPU build: ONNX Runtime steps run on the CPU",
                     "pip uninstall -y onnxruntime && pip install onnxruntime-gpu", ("gpu",))
    return Check("onnxruntime", OK, f"onnxruntime{'-gpu' if gpu else ''} {gpu or cpu}", "", ())


def _check_onnxruntime() -> Check:
    return onnxruntime_verdict(env.package_version("onnxruntime"), env.package_version("onnxruntime-gpu"),
                               has_gpu=bool(env.gpu_info()))


CUDA_INDEX = {12: "cu128", 13: "cu130"}
"""PyTorch's wheel index for each CUDA major (download.pytorch.org/whl/<tag>)."""


def _major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0]) if version else None
    except ValueError:
        return None


def cuda_pair_verdict(torch_cuda: str | None, ort_cuda: str | None) -> Check:
    """torch (``torch.version.cuda``) and onnxruntime-gpu (its build info's ``cuda_version``) built
    for one CUDA major: a CUDA 13 torch beside a CUDA 12 onnxruntime-gpu loads two CUDA runtimes,
    and ONNX Runtime's CUDA provider fails to start or falls back to the CPU."""
    t, o = _major(torch_cuda), _major(ort_cuda)
    if t is None or o is None:
        return Check("cuda pair", OK, f"CUDA builds: torch {torch_cuda or 'CPU'}, onnxruntime {ort_cuda or 'CPU'} "
                     "(no pair to match)", "", ())
    if t == o:
        return Check("cuda pair", OK, f"CUDA builds match: torch {torch_cuda}, onnxruntime-gpu {ort_cuda}", "", ())
    tag = CUDA_INDEX.get(o, f"cu{o}x")
    return Check("cuda pair", FAIL, f"torch is built for CUDA {torch_cuda} but onnxruntime-gpu for CUDA {ort_cuda}",
                 f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{tag} "
                 f"(as environment.yml does), or an onnxruntime-gpu built for CUDA {t}", ("gpu",))


def _check_cuda_pair() -> Check:
    try:
        from onnxruntime.capi import build_and_package_info as info
        ort_cuda = getattr(info, "cuda_version", None)
    except Exception:  # not installed, or a broken CUDA library under it (its own check says so)
        ort_cuda = None
    return cuda_pair_verdict(env.torch_info()["cuda_build"], ort_cuda)


def compiler_verdict(cc: str | None, cxx: str | None, *, cuda: bool) -> Check:
    """torch.compile needs a C++ compiler on the CPU (Inductor) and a C compiler on a GPU
    (Triton builds a small launcher module for each kernel)."""
    need, have = ("a C compiler (gcc)", cc) if cuda else ("a C++ compiler (g++)", cxx)
    if have:
        return Check("compiler", OK, f"{need.split(' (')[0]} for torch.compile: {have}", "", ())
    where = "Triton, on the GPU," if cuda else "Inductor, on the CPU,"
    return Check("compiler", WARN, f"no {need}: torch.compile's {where} cannot build its code, the compile "
                 "steps are skipped", "apt-get install build-essential (or set CC/CXX)", ())


def _check_compiler() -> Check:
    which = lambda *names: next((shutil.which(n) for n in names if shutil.which(n)), None)  # noqa: E731
    return compiler_verdict(which(os.environ.get("CC", ""), "cc", "gcc", "clang"),
                            which(os.environ.get("CXX", ""), "c++", "g++", "clang++"),
                            cuda=env.torch_info()["cuda_available"])


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


def _check_folder(name: str, folder: Path, variable: str, need_gib: float) -> Check:
    """The folder labkit will really write to: not a file, writable (a real file is created and
    removed: a read-only mount fails even for root), with ``need_gib`` free."""
    given = f"{folder} (from {variable})" if os.environ.get(variable) else str(folder)
    fix_var = f"set {variable} to a writable folder with room"
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return Check(name, FAIL, f"{given}: {probe} is a file, not a folder", fix_var, ("lab", "gpu"))
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".labkit-doctor-"):
            pass
    except OSError as exc:
        return Check(name, FAIL, f"{given}: cannot write in {probe} ({exc.strerror})",
                     f"fix its permissions, or {fix_var}", ("lab", "gpu"))
    free_gib = shutil.disk_usage(probe).free / 2**30
    status = OK if free_gib >= need_gib else (WARN if free_gib >= need_gib / 4 else FAIL)
    return Check(name, status, f"{given}: writable, {free_gib:.1f} GiB free",
                 "" if status == OK else f"free disk space there (each profile takes 10-200 MB), or {fix_var}",
                 ("lab", "gpu"))


def _check_disk(reports) -> list[Check]:
    reports = Path(reports) if reports is not None else env.reports_dir()
    return [_check_folder("disk", reports.absolute(), "LABKIT_REPORTS", 2.0),
            _check_folder("cache", env.cache_dir().absolute(), "LABKIT_CACHE_DIR", 0.5)]


def run_checks(*, reports: str | None = None, probe: bool = False) -> list[Check]:
    """Run every check; ``probe`` also profiles a tiny NVTX program with nsys (about 5-10 s)."""
    checks = [_check_python(), *_check_torch(), _check_gpu(), *_check_sharing()]
    nsys_check, nsys_ver = _check_nsys()
    checks.append(nsys_check)
    checks.append(_check_environment())
    status, detail, fix = nvtx_verdict(env.package_version("nvtx"), nsys_ver)
    checks.append(Check("nvtx", status, detail, fix, ("lab", "gpu") if status == FAIL else ()))
    if probe and nsys_ver is not None:
        checks += _probe(env.find_nsys(), nsys_ver, cuda=env.torch_info()["cuda_available"])
    checks += [_check_onnxruntime(), _check_cuda_pair(), _check_compiler(), _check_tensorrt(), _check_opencv(), *_check_disk(reports)]
    return checks


def _failures(checks: list[Check], mode: str) -> list[Check]:
    return [c for c in checks if c.status != OK and mode in c.needed_by]


def doctor(*, mode: str = "lab", reports: str | None = None, probe: bool = False):
    """The doctor's report as a DataFrame (check, status, detail, fix, required), shown in a
    notebook with whole texts (:func:`labkit.style.full_text`).

    ``required`` is True where the chosen ``mode`` needs the check to pass.
    """
    import pandas as pd

    from labkit.style import full_text

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
    checks = run_checks(reports=reports, probe=probe)
    return full_text(pd.DataFrame([{"check": c.name, "status": c.status, "detail": c.detail, "fix": c.fix,
                                    "required": mode in c.needed_by} for c in checks]))


def cli(argv: list[str]) -> int:
    """``python -m labkit doctor [--mode analysis|lab|gpu] [--probe]``."""
    p = argparse.ArgumentParser(prog="python -m labkit doctor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=MODES, default="lab", help="what the checks are for (default: lab)")
    p.add_argument("--probe", action="store_true", help="also profile a tiny NVTX program with nsys")
    p.add_argument("--reports", default=None, help="reports folder to check (default: $LABKIT_REPORTS, else reports)")
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
