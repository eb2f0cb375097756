"""Facts about this machine: where nsys is, GPU and driver, library versions.

Used by the doctor, by profiling (to locate nsys) and by the ledger (environment
fingerprint of each run). Everything here is cheap and never raises on a missing tool.
"""
from __future__ import annotations

import functools
import glob
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

__all__ = [
    "find_nsys",
    "nsys_version",
    "nsys_version_tuple",
    "package_version",
    "reports_dir",
    "cache_dir",
    "gpu_info",
    "visible_gpus",
    "match_cuda_devices",
    "torch_info",
    "cpu_model",
    "usable_cpus",
    "fingerprint",
    "NSYS_SEARCH_GLOBS",
]

NSYS_SEARCH_GLOBS = (
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)
"""Usual install folders, searched after $LABKIT_NSYS, $NSYS and PATH."""


def find_nsys() -> str | None:
    """Path of the nsys executable, or None.

    Order: ``$LABKIT_NSYS``, ``$NSYS`` (either may name the executable or its folder), PATH,
    then the usual install folders. An environment variable that names a missing file is
    honoured as "not found" rather than silently falling back, so a typo is noticed.
    """
    for var in ("LABKIT_NSYS", "NSYS"):
        value = os.environ.get(var)
        if value:
            path = os.path.join(value, "nsys") if os.path.isdir(value) else value
            return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    found = shutil.which("nsys")
    if found:
        return found
    for pattern in NSYS_SEARCH_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


@functools.lru_cache(maxsize=8)
def _nsys_version_of(path: str) -> str | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out.stdout + out.stderr)
    return m.group(1) if m else None


def nsys_version(path: str | None = None) -> str | None:
    """Version string of nsys (e.g. ``"2022.4.2.1"``), or None where nsys is absent."""
    path = path or find_nsys()
    return _nsys_version_of(path) if path else None


def nsys_version_tuple(path: str | None = None) -> tuple[int, ...] | None:
    """nsys version as a tuple of ints, e.g. ``(2022, 4, 2, 1)``."""
    v = nsys_version(path)
    return tuple(int(p) for p in v.split(".")) if v else None


def project_root() -> Path | None:
    """The checkout labkit runs from (the folder holding its ``pyproject.toml``), or None when
    labkit is installed elsewhere."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


LEDGER_NAME = "ledger.jsonl"
"""The ledger's file name in a reports folder (``labkit.bench``'s runs append to it)."""


def reports_dir(default: str | os.PathLike = "reports", *, env: dict | None = None) -> Path:
    """Where runs write profiles, results and the ledger: ``$LABKIT_REPORTS``, else ``default``
    (``reports`` under the working folder; the project's scripts pass their own ``reports/``).

    A relative ``$LABKIT_REPORTS`` is the project's (under :func:`project_root`, else the working
    folder): the same folder from a kernel in ``notebooks/``, ``run_lab`` and ``make reset``.
    Read at call time, so a notebook may set the variable after importing labkit; ``env``: an
    environment to read instead of ``os.environ``.
    """
    value = (os.environ if env is None else env).get("LABKIT_REPORTS")
    if not value:
        return Path(default)
    path = Path(value).expanduser()
    return path if path.is_absolute() else (project_root() or Path.cwd()) / path


def cache_dir() -> Path:
    """labkit's per-user cache root: ``$LABKIT_CACHE_DIR``, else ``~/.cache/labkit``.

    The one home of that folder: nsys exports of read-only reports go to ``exports/`` under it,
    and the lab passes ``backends/`` under it to the application as a command-line option (the
    application reads no labkit variable). Read at call time; nothing is created here.
    """
    return Path(os.environ.get("LABKIT_CACHE_DIR") or Path.home() / ".cache" / "labkit")


def package_version(name: str) -> str | None:
    """Installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_info() -> list[dict]:
    """One dict per NVIDIA GPU from NVML: name, driver, memory, clocks. Empty without a GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded on CPU machines
        return []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            cuda = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:
            cuda = None
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            row = _nvml_row(pynvml, h, index=i, driver=driver, cuda=cuda)
            gpus.append(row)
            gpus.extend(_mig_rows(pynvml, h, row))
        return gpus
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _nvml_row(pynvml, h, *, index: int, driver, cuda) -> dict:
    """One :func:`gpu_info` row for an NVML device handle (a GPU or a MIG instance)."""
    def get(fn, *args):
        try:
            return fn(h, *args)
        except Exception:  # a MIG instance has no clocks of its own; an old driver lacks a call
            return None

    mem = get(pynvml.nvmlDeviceGetMemoryInfo)
    return {
        "index": index,
        "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
        "name": _text(pynvml.nvmlDeviceGetName(h)),
        "driver": driver,
        "cuda_driver": cuda,
        "memory_total_mib": mem.total // 2**20 if mem else None,
        "memory_free_mib": mem.free // 2**20 if mem else None,
        "sm_clock_max_mhz": get(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
        "mem_clock_max_mhz": get(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_MEM),
        "sm_clock_mhz": get(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
        "compute_mode": COMPUTE_MODES.get(get(pynvml.nvmlDeviceGetComputeMode)),
    }


COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
"""NVML's compute modes (``nvmlComputeMode_t``) by value, named as ``nvidia-smi -c`` names them."""


def mps_running(environ: dict | None = None) -> bool:
    """Whether an MPS control daemon serves this user: its control pipe in ``CUDA_MPS_PIPE_DIRECTORY``
    (default ``/tmp/nvidia-mps``), where ``nvidia-cuda-mps-control -d`` creates it."""
    environ = os.environ if environ is None else environ
    return (Path(environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps") / "control").exists()


def _mig_rows(pynvml, h, parent: dict) -> list[dict]:
    """The MIG instances of a GPU in MIG mode (nvidia-ml-py's MIG calls), each a row with
    ``mig_index`` and ``parent_uuid``; the parent's clocks stand for the instance's. Empty
    when MIG is off or unsupported."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(h)
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
    except Exception:  # NVMLError_NotSupported: no MIG on this GPU
        return []
    rows = []
    for j in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except Exception:  # NVMLError_NotFound: an empty slot
            continue
        row = _nvml_row(pynvml, mig, index=parent["index"], driver=parent["driver"], cuda=parent["cuda_driver"])
        try:
            owner = _text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)))
        except Exception:
            owner = parent["uuid"]
        for k in ("sm_clock_max_mhz", "mem_clock_max_mhz", "sm_clock_mhz"):
            row[k] = row[k] if row[k] is not None else parent[k]
        rows.append({**row, "mig_index": j, "parent_uuid": owner})
    return rows


def _uuid_key(uuid: str) -> str:
    """NVML says ``GPU-1a2b...`` (``MIG-1a2b...`` for a MIG instance), torch and CUDA say
    ``1a2b...`` or ``GPU-``/``MIG-``: compare without prefix or case. The old MIG form
    ``MIG-GPU-<uuid>/<gi>/<ci>`` keeps its instance suffix, so it never matches the whole GPU."""
    uuid = str(uuid).strip().lower()
    for prefix in ("mig-", "gpu-"):
        if uuid.startswith(prefix):
            uuid = uuid[len(prefix):]
    return uuid


def match_cuda_devices(gpus: list[dict], *, visible: str | None, cuda_uuids: list[str] | None = None) -> list[dict]:
    """NVML devices in CUDA's order (``cuda:0`` first), matched by UUID.

    Args:
        gpus: :func:`gpu_info` rows (NVML order, with ``uuid``).
        visible: ``$CUDA_VISIBLE_DEVICES`` (None: every GPU). Entries are NVML indices or UUIDs
            (or their unique prefixes, as CUDA accepts); parsing stops at the first invalid one,
            as CUDA's does.
        cuda_uuids: torch's device UUIDs in CUDA order, when torch can see the GPUs; the
            authority where it exists (CUDA orders devices fastest first, NVML by PCI bus).
    Returns: the matched rows, each with ``cuda_index`` added. On a GPU in MIG mode the rows
    are its MIG instances (``mig_index``; CUDA sees instances, never the whole GPU).
    """
    migged = {g.get("parent_uuid") for g in gpus if g.get("mig_index") is not None}
    if cuda_uuids is not None:
        by_uuid = {_uuid_key(g["uuid"]): g for g in gpus if g.get("uuid")}
        picked = [by_uuid.get(_uuid_key(u)) for u in cuda_uuids]
    elif visible is None:
        picked = [g for g in gpus if g.get("uuid") not in migged]
    else:
        picked = []
        for entry in (e.strip() for e in visible.split(",")):
            if entry.isdigit():  # an index names a whole GPU, or on a GPU in MIG mode its first instance
                g = next((g for g in gpus if g["index"] == int(entry) and g.get("uuid") not in migged), None)
            else:
                hits = [g for g in gpus if g.get("uuid") and _uuid_key(g["uuid"]).startswith(_uuid_key(entry))]
                g = hits[0] if len(hits) == 1 and entry else None
            if g is None or g in picked:
                break
            picked.append(g)
    return [dict(g, cuda_index=i) for i, g in enumerate(picked) if g is not None]


def visible_gpus() -> list[dict]:
    """:func:`gpu_info` rows of the GPUs this process's CUDA sees, in ``cuda:N`` order, honouring
    ``CUDA_VISIBLE_DEVICES`` (matched by UUID; torch's device list is used when torch is
    already imported, so that this never pays for importing it)."""
    gpus = gpu_info()
    uuids = None
    torch = sys.modules.get("torch")
    if gpus and torch is not None:
        try:
            if torch.cuda.is_available():
                uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
        except Exception:  # an old torch without .uuid, or a broken driver: fall back to the variable
            uuids = None
    matched = match_cuda_devices(gpus, visible=os.environ.get("CUDA_VISIBLE_DEVICES"), cuda_uuids=uuids)
    if uuids and not matched:  # NVML and CUDA disagree (a UUID form not known here): torch's names, never "CPU"
        matched = [{"index": i, "cuda_index": i, "uuid": u, "name": torch.cuda.get_device_name(i),
                    "driver": gpus[0]["driver"], "cuda_driver": gpus[0]["cuda_driver"]} for i, u in enumerate(uuids)]
    return matched


def torch_info() -> dict:
    """torch version, its CUDA build, and whether CUDA works here (imports torch)."""
    try:
        import torch
    except ImportError:
        return {"torch": None, "cuda_build": None, "cuda_available": False}
    return {
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
    }


def cpu_model() -> str:
    """Human-readable CPU model, e.g. 'AMD EPYC 7B13'."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _quota(folder: Path, v2: bool) -> float | None:
    """CPUs the cgroup ``folder`` allows (quota over period), None without a limit or a readable file."""
    try:
        if v2:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
        else:
            quota, period = ((folder / f).read_text().strip() for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
        q, p = int(quota), int(period)  # "max" (v2) or -1 (v1): no limit
    except (OSError, ValueError):
        return None
    return q / p if q > 0 and p > 0 else None


def usable_cpus(fs: str | os.PathLike = "/") -> int | None:
    """How many CPUs this process can run on at once: its affinity (``taskset``, ``docker --cpuset-cpus``),
    less its container's CPU quota (``docker --cpus``: cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``
    on its own cgroup or any above it; a fractional quota counts as the next whole CPU). None where the
    affinity is unknown. ``fs``: the root the ``proc`` and ``sys`` folders are read under."""
    root = Path(fs)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count()
    if not n:
        return None
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    limits = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        v2 = parts[0] == "0" and parts[1] == ""
        if not v2 and "cpu" not in parts[1].split(","):
            continue
        mounts = [root / "sys/fs/cgroup"] if v2 else list(dict.fromkeys([root / "sys/fs/cgroup" / parts[1],
                                                                         root / "sys/fs/cgroup/cpu"]))
        rel = Path(parts[2].lstrip("/"))
        for base in mounts:
            for sub in [rel, *rel.parents]:  # its own cgroup, then each above it (inside a container: "/")
                q = _quota(base / sub, v2)
                if q is not None:
                    limits.append(q)
    if limits:
        n = min(n, max(1, int(-(-min(limits) // 1))))
    return n


def fingerprint() -> dict:
    """Environment fingerprint of a run: host, CPU, GPU, driver, CUDA and library versions."""
    t = torch_info()  # imports torch first, so that visible_gpus can match by torch's UUIDs
    gpus = visible_gpus()  # cuda:0 first: the GPU a run uses by default
    return {
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu": gpus[0]["name"] if gpus else None,
        "gpu_count": len(gpus),
        "driver": gpus[0]["driver"] if gpus else None,
        "cuda": (gpus[0]["cuda_driver"] if gpus else None) or t["cuda_build"],
        "python": platform.python_version(),
        "torch": t["torch"],
        "tensorrt": package_version("tensorrt"),
        "onnxruntime": package_version("onnxruntime") or package_version("onnxruntime-gpu"),
        "opencv": package_version("opencv-python") or package_version("opencv-python-headless"),
        "nsys": nsys_version(),
        "nvtx": package_version("nvtx"),
        "platform": platform.platform(),
    }


if __name__ == "__main__":  # pragma: no cover
    import json

    json.dump(fingerprint(), sys.stdout, indent=2)
