"""The Report: one Nsight Systems profile as pandas DataFrames, and the two ways to get one
(``load_report`` an existing report, ``profile`` a command under nsys).

Frames are read by :mod:`labkit.report.reader` (CUDA tables on first use), summaries mirroring
``nsys stats`` live in :mod:`labkit.stats.summaries` and the lab's analyses in :mod:`labkit.stats.stages`;
all of them take a Report.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from labkit.record.nsys import TRACE
from labkit.report.reader import (_TID_MASK, CUDA_API_COLUMNS, GRAPH_COLUMNS, GRAPH_TABLE, KERNEL_COLUMNS,
                                  MEMCPY_COLUMNS, MEMSET_COLUMNS, NVTX_COLUMNS, OFFCPU_COLUMNS, OSRT_COLUMNS,
                                  PROJECTION_COLUMNS,
                                  SUMMARY_COLUMNS, SYNC_COLUMNS, ReportError, _Db, _empty, _read_cuda_api,
                                  _read_gpu, _read_graphs, _read_kernels, _read_memcpy, _read_memset,
                                  _read_sync, pid_of, read_strings)
from labkit.report.columnar import Columnar
from labkit.report.meta import _read_meta
from labkit.report.cpu import profiled_pids, read_offcpu, read_osrt, read_threads
from labkit.report.nvtx import nvtx_frame_empty, read_nvtx

__all__ = ["Report", "load_report", "profile", "ReportError",
           # the frames' columns (defined with their readers, named here beside the data)
           "NVTX_COLUMNS", "KERNEL_COLUMNS", "MEMCPY_COLUMNS", "MEMSET_COLUMNS", "CUDA_API_COLUMNS", "SYNC_COLUMNS",
           "GRAPH_COLUMNS", "OSRT_COLUMNS", "OFFCPU_COLUMNS",
           "SUMMARY_COLUMNS", "PROJECTION_COLUMNS"]

_DAMAGE = (ValueError, TypeError, IndexError, KeyError, OverflowError, UnicodeDecodeError)
_GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", GRAPH_TABLE)


@dataclass(eq=False)
class Report:
    """One profile as DataFrames (times in ns on the report clock).

    Frames (columns listed in ``NVTX_COLUMNS``, ``KERNEL_COLUMNS``, ...): ``nvtx``, ``kernels``,
    ``memcpy``, ``memset``, ``cuda_api``, ``sync``, ``osrt``, ``offcpu``, ``gpu`` (one row per GPU), ``threads`` (the
    threads of the processes the profile is about: those with CUDA or NVTX events, else OS runtime
    calls; ``all_threads`` also holds the machine's other processes that nsys listed).
    Frames are read from the export on first use (and kept; large ones also go to the columnar
    cache, :mod:`labkit.report.columnar`, which later loads read), so loading costs next to nothing
    and a summary that needs two columns of a million kernels reads only those. ``meta`` holds nsys/schema versions,
    capture time and trace span; ``has_cuda`` / ``has_nvtx`` say what the report holds, and
    ``notes`` says in words what it lacks (a CPU run has no CUDA tables: that is data, not a fault).
    """

    path: Path
    gpu: pd.DataFrame
    all_threads: pd.DataFrame
    meta: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    log_path: Path | None = None
    _db: _Db | None = field(default=None, repr=False)
    _strings: np.ndarray | None = field(default=None, repr=False)
    _frames: dict = field(default_factory=dict, repr=False)
    _columnar: Columnar | None = field(default=None, repr=False)

    _LOADERS = {
        "nvtx": lambda r: read_nvtx(r._db, r._strings,
                                    dict(zip(r.all_threads["global_tid"], r.all_threads["thread_name"])), r.notes),
        "threads": lambda r: r._profiled_threads(),
        "kernels": lambda r: _read_kernels(r._db, r._strings),
        "memcpy": lambda r: _read_memcpy(r._db),
        "memset": lambda r: _read_memset(r._db),
        "cuda_api": lambda r: _read_cuda_api(r._db, r._strings),
        "sync": lambda r: _read_sync(r._db),
        "graphs": lambda r: _read_graphs(r._db),
        "osrt": lambda r: read_osrt(r._db, r._strings),
        "offcpu": lambda r: read_offcpu(r._db),
    }

    _TABLES = {"nvtx": "NVTX_EVENTS", "kernels": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
               "memset": "CUPTI_ACTIVITY_KIND_MEMSET", "cuda_api": "CUPTI_ACTIVITY_KIND_RUNTIME"}
    """The table each frame with durations reads (:meth:`_note_reversed`)."""

    def _note_reversed(self, table: str | None, df) -> None:
        """Say (a note) how many events of ``table`` end before they start, when what was just read
        from it (``df``, a frame or a summary's own read) holds a negative duration: a crafted or
        damaged export. Said once per table, and only then is the export counted; a load reads no
        table, and a read costs one comparison per row. A frame that left a note is never cached, so
        a later load that reads the cache found none."""
        if table is None or df is None or "duration_ns" not in df or ("order", table) in self._frames:
            return
        d = pd.to_numeric(df["duration_ns"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        if not (d < 0).any():
            return
        self._frames[("order", table)] = True
        n = int(self._db.scalar_rows(f"SELECT count(*) FROM [{table}] WHERE [end] < [start]", table)[0][0])
        self.notes.append(f"{self.path.name}: {max(n, 1):,} event(s) in {table} end before they start (a damaged "
                          f"or edited export): their durations are negative; export it again from the .nsys-rep")

    def _frame(self, name: str) -> pd.DataFrame:
        if name not in self._frames:
            cache = self._columnar if name != "threads" else None
            df = cache.get(name) if cache is not None else None  # the columnar cache of this very export
            if df is None:
                said = len(self.notes)
                try:
                    df = self._LOADERS[name](self)
                except _DAMAGE as exc:  # values no nsys export holds (a damaged file): say so, in one line
                    raise self._db.fail(name, exc) from None
                self._note_reversed(self._TABLES.get(name), df)
                if cache is not None and len(self.notes) == said:  # a frame that left a note is read again
                    cache.put(name, df)
            self._frames[name] = df
        return self._frames[name]

    def _derived(self, name: str, build, table: str | None = None) -> pd.DataFrame | None:
        """A frame derived from the export's ``table`` for a summary (``build()``; None where it does
        not apply), built once per Report and, when large, kept in the columnar cache like the frames."""
        key = f"_{name}"
        if key not in self._frames:
            df = self._columnar.get(name) if self._columnar is not None else None
            if df is None:
                said = len(self.notes)
                try:
                    df = build()
                except _DAMAGE as exc:  # as in _frame: values no nsys export holds, said in one line
                    if self._db is None:
                        raise
                    raise self._db.fail(table or name, exc) from None
                self._note_reversed(table, df)
                if df is not None and self._columnar is not None and len(self.notes) == said:
                    self._columnar.put(name, df)
            self._frames[key] = df
        return self._frames[key]

    def memo(self, key: tuple, build):
        """A value derived from this report (``build()``), built once per Report: analyses that
        several judgements read (blocked time per thread, say) ask for it by ``key``."""
        key = ("memo", *key)
        if key not in self._frames:
            self._frames[key] = build()
        return self._frames[key]

    nvtx = property(lambda self: self._frame("nvtx"), doc="NVTX ranges and marks, nested per thread: NVTX_COLUMNS.")
    kernels = property(lambda self: self._frame("kernels"), doc="Kernels: see KERNEL_COLUMNS.")
    memcpy = property(lambda self: self._frame("memcpy"), doc="Memory copies: see MEMCPY_COLUMNS.")
    memset = property(lambda self: self._frame("memset"), doc="Memsets: see MEMSET_COLUMNS.")
    cuda_api = property(lambda self: self._frame("cuda_api"), doc="CUDA runtime/driver calls: CUDA_API_COLUMNS.")
    sync = property(lambda self: self._frame("sync"), doc="CUDA synchronization activity: SYNC_COLUMNS.")
    threads = property(lambda self: self._frame("threads"),
                       doc="Threads of the profiled processes: global_tid, tid, pid, thread_name.")
    osrt = property(lambda self: self._frame("osrt"), doc="OS runtime calls (traced with -t osrt): OSRT_COLUMNS.")
    offcpu = property(lambda self: self._frame("offcpu"),
                      doc="When each thread was off its CPU (recorded with --cpuctxsw): OFFCPU_COLUMNS.")
    graphs = property(lambda self: self._frame("graphs"),
                      doc="Whole CUDA graph executions (nsys --cuda-graph-trace=graph, its default): GRAPH_COLUMNS.")

    @classmethod
    def from_frames(cls, *, nvtx: pd.DataFrame | None = None, kernels: pd.DataFrame | None = None,
                    memcpy: pd.DataFrame | None = None, memset: pd.DataFrame | None = None,
                    cuda_api: pd.DataFrame | None = None, path="(frames)", meta: dict | None = None) -> "Report":
        """A Report over frames built in memory (tests, synthetic data); missing frames are empty."""
        nv = nvtx_frame_empty() if nvtx is None else nvtx
        frames = {"nvtx": nv, "kernels": _empty(KERNEL_COLUMNS) if kernels is None else kernels,
                  "memcpy": _empty(MEMCPY_COLUMNS) if memcpy is None else memcpy,
                  "memset": _empty(MEMSET_COLUMNS) if memset is None else memset,
                  "cuda_api": _empty(CUDA_API_COLUMNS) if cuda_api is None else cuda_api,
                  "sync": _empty(SYNC_COLUMNS), "graphs": _empty(GRAPH_COLUMNS), "osrt": _empty(OSRT_COLUMNS),
                  "offcpu": _empty(OFFCPU_COLUMNS)}
        threads = pd.DataFrame({"global_tid": pd.Series(dtype="int64")})
        frames["threads"] = threads
        return cls(path=Path(path), gpu=pd.DataFrame({"device_id": pd.Series(dtype="int64")}),
                   all_threads=threads, meta=dict(meta or {}), _frames=frames)

    def _profiled_threads(self) -> pd.DataFrame:
        t = self.all_threads
        pids = profiled_pids(self._db) if self._db is not None else set()
        if not pids or "pid" not in t:
            return t
        return t[t["pid"].isin(pids)].reset_index(drop=True)

    def load_all(self) -> "Report":
        """Read every frame now (otherwise each is read on first use)."""
        for name in self._LOADERS:
            self._frame(name)
        return self

    # -- what the report holds
    @property
    def has_nvtx(self) -> bool:
        """True when the report holds at least one NVTX range or mark."""
        return len(self.nvtx) > 0

    @property
    def has_cuda(self) -> bool:
        """True when CUDA was traced: CUDA API calls or GPU operations are present (a CPU run: False)."""
        if self._db is None:
            return any(len(self._frames[n]) for n in ("kernels", "memcpy", "memset", "cuda_api", "graphs"))
        return any(self._db.any_rows(t) for t in ("CUPTI_ACTIVITY_KIND_RUNTIME",) + _GPU_TABLES)

    @property
    def nsys_version(self) -> str | None:
        """Version of the nsys that recorded the report where known (read from a loaded ``.nsys-rep``
        or ``.qdrep``; the 2022.4 and 2025.3 SQLite exports do not carry it), else of the nsys that
        exported it (e.g. ``"2022.4.2.1"``)."""
        return self.meta.get("capture_nsys_version") or self.meta.get("nsys_version")

    @property
    def log(self) -> str:
        """The profiled program's stdout/stderr as saved beside the report ('' if none)."""
        if self.log_path and Path(self.log_path).exists():
            return Path(self.log_path).read_text(errors="replace")
        return ""

    def __repr__(self) -> str:  # DataFrames make the default repr unreadable
        n = {t: self._db.count(f"CUPTI_ACTIVITY_KIND_{t.upper()}") if self._db else 0
             for t in ("kernel", "memcpy", "memset", "runtime")}
        return (f"Report({str(self.path)!r}, nsys {self.nsys_version}, nvtx={len(self.nvtx)}, "
                f"kernels={n['kernel']}, memcpy={n['memcpy']}, memset={n['memset']}, cuda_api={n['runtime']})")

    # -- GPU operations
    def gpu_ops(self) -> pd.DataFrame:
        """Kernels, copies, memsets and whole CUDA graphs together: name, category, device_id, stream_id,
        correlation_id, pid, start_ns, end_ns, duration_ns; sorted by start (built once and
        shared: copy it before changing it)."""
        if "_gpu_ops" in self._frames:  # built once: concatenating a million rows is not free
            return self._frames["_gpu_ops"]
        cols = ["name", "device_id", "stream_id", "correlation_id", "pid", "start_ns", "end_ns", "duration_ns"]
        parts = []
        for cat, df in (("kernel", self.kernels), ("memcpy", self.memcpy), ("memset", self.memset),
                        ("graph", self.graphs)):
            if len(df):
                parts.append(df[cols].assign(category=cat))
        if not parts:
            return _empty(cols + ["category"]).astype({"category": object})
        out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
        self._frames["_gpu_ops"] = out.sort_values("start_ns", kind="stable", ignore_index=True)
        return self._frames["_gpu_ops"]

    def gpu_arrays(self) -> dict[str, np.ndarray]:
        """start_ns, end_ns, correlation_id, pid of every GPU operation, as arrays (reads at most
        4 columns; the pid column is skipped when only one process had a CUDA context)."""
        cols = ("start_ns", "end_ns", "correlation_id", "pid")
        parts = []
        single_pid = self._single_cuda_pid()
        for name, table in zip(("kernels", "memcpy", "memset", "graphs"), _GPU_TABLES):
            if name in self._frames:
                f = self._frames[name]
                parts.append({c: f[c].to_numpy() for c in cols})
            elif self._db is not None and self._db.has(table, "start", "end"):
                want = ["start", "end", "correlationId"] + ([] if single_pid is not None else ["globalPid"])
                c = self._db.cols(table, want)
                pid = np.full(len(c["start"]), single_pid, dtype=np.int64) if single_pid is not None \
                    else pid_of(c["globalPid"])
                parts.append({"start_ns": c["start"], "end_ns": c["end"], "correlation_id": c["correlationId"],
                              "pid": pid})
        return {c: np.concatenate([np.asarray(p[c], dtype=np.int64) for p in parts])
                if parts else np.empty(0, dtype=np.int64) for c in cols}

    def _single_cuda_pid(self) -> int | None:
        """The pid when exactly one process had a CUDA context (2025.3 exports say so), else None."""
        t = "TARGET_INFO_CUDA_CONTEXT_INFO"
        if self._db is None or not self._db.has(t, "processId"):
            return None
        pids = self._db.scalar_rows(f"SELECT DISTINCT processId FROM {t}")
        return int(pids[0][0]) if len(pids) == 1 and pids[0][0] is not None else None

    def api_arrays(self) -> dict[str, np.ndarray]:
        """start_ns, end_ns, global_tid, pid, correlation_id of CUDA API calls, as arrays."""
        cols = ["start_ns", "end_ns", "global_tid", "pid", "correlation_id"]
        if "cuda_api" in self._frames or self._db is None:
            return {c: self.cuda_api[c].to_numpy() for c in cols}
        t = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if not self._db.has(t, "start", "end", "correlationId"):
            return {c: np.empty(0, dtype=np.int64) for c in cols}
        c = self._db.cols(t, ["start", "end", "globalTid", "correlationId"])
        g = c["globalTid"]
        return {"start_ns": c["start"], "end_ns": c["end"], "global_tid": g, "pid": pid_of(g),
                "correlation_id": c["correlationId"]}


# ----------------------------------------------------------------------------- loading
def load_report(path, *, nsys: str | None = None) -> Report:
    """Load a ``.nsys-rep`` (exported to SQLite once, beside it or in the export cache) or a
    ``.sqlite`` export.

    Args:
        path: the report; a ``.sqlite`` needs no nsys, a ``.nsys-rep`` does (for the export).
        nsys: nsys executable to export with (default: ``labkit.env.find_nsys()``).
    Returns: a :class:`Report`; absent parts are empty frames with their columns, ``has_cuda`` /
        ``has_nvtx`` say whether CUDA and NVTX were recorded and ``notes`` says what is missing.
    Raises: ReportError naming the file (and the table, for a damaged export) and the fix.
    """
    if not isinstance(path, (str, Path)) and not hasattr(path, "__fspath__"):
        raise ReportError(f"load_report takes a path (str or pathlib.Path), not {type(path).__name__}: "
                          f"pass the .nsys-rep or .sqlite file name")
    path = Path(path)
    if not path.exists():
        raise ReportError(f"report not found: {path} (profile with labkit.profile(...) or "
                          f"`python -m labkit profile`, or check the path)")
    if path.is_dir():
        raise ReportError(f"{path} is a folder: pass the .nsys-rep or .sqlite file inside it")
    if not path.is_file():  # a FIFO or a device: reading its first bytes would never end
        raise ReportError(f"{path} is a special file (FIFO, device or socket), not a report: pass the .nsys-rep "
                          f"or .sqlite file")
    with open(path, "rb") as f:
        head = f.read(16)
    log_path = None
    if head.startswith(b"SQLite format 3"):
        db_path = path
    elif path.suffix in (".nsys-rep", ".qdrep"):
        from labkit.record import export  # only for a report to export: a .sqlite needs no nsys module

        db_path = export.export_sqlite(path, nsys=nsys)
    elif path.suffix == ".qdstrm":
        raise ReportError(f"{path} is an unimported .qdstrm: nsys could not finish the report; "
                          f"run scripts/install-nsys (it fixes the importer link) and profile again")
    else:
        raise ReportError(f"{path} is neither an Nsight Systems report (.nsys-rep) nor an SQLite export")
    for cand in (path.with_suffix(".log"), db_path.with_suffix(".log")):
        if cand.exists():
            log_path = cand
            break
    rep = _load_sqlite(db_path)
    rep.log_path = log_path
    rep.path = path
    if db_path != path:
        from labkit.record import export

        rep.meta["capture_nsys_version"] = export.report_version(path)
    if path.with_suffix(".log").exists() and path.with_suffix(".nsys-rep").exists():
        from labkit.record.nsys import recording_facts  # labkit recorded it

        notes, cpus = recording_facts(path)
        rep.notes.extend(notes)  # a killed or interrupted run says so
        _usable_cpus(rep, cpus)
    return rep


def _usable_cpus(rep: Report, cpus: int | None) -> None:
    """Where the recorded program could use fewer CPUs than the machine has (an affinity, a container's
    quota), the judgement counts those (``meta['cpu_cores']``), the machine's stay in
    ``meta['machine_cpu_cores']``, and the report says so."""
    machine = rep.meta.get("cpu_cores")
    if not cpus or (machine and cpus >= machine):
        return
    rep.meta["cpu_cores"] = cpus
    if machine:
        rep.meta["machine_cpu_cores"] = machine
        rep.notes.append(f"the program could use {cpus} of the machine's {machine} CPUs (its affinity or its "
                         f"container's CPU quota): the judgement counts {cpus}")


def _load_sqlite(path: Path) -> Report:
    db = _Db(path)
    try:
        return _load_tables(db, path)
    except _DAMAGE as exc:
        raise db.fail("the export's metadata", exc) from None


def _load_tables(db: _Db, path: Path) -> Report:
    notes: list[str] = []
    if "StringIds" not in db.tables:
        raise ReportError(f"{path} is an SQLite file but not an Nsight Systems export (no StringIds table)")
    strings = read_strings(db)
    meta = _read_meta(db)
    threads = read_threads(db, strings)
    gpu = _read_gpu(db)
    cuda_tables = [t for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL") if t in db.tables]
    if not cuda_tables:
        notes.append(f"{path.name}: no CUDA tables (was the run traced with -t cuda, and did it use the GPU?)")
    elif not any(db.any_rows(t) for t in _GPU_TABLES):
        ver = meta.get("nsys_version") or "unknown"
        notes.append(f"{path.name}: no GPU activity recorded (CUDA API only): the nsys that recorded it "
                     f"({ver}) may be too old for the GPU driver; profile with a newer nsys")
    return Report(path=path, gpu=gpu, all_threads=threads, meta=meta, notes=notes,
                  _db=db, _strings=strings, _columnar=Columnar(path))


def profile(command, *, name: str, trace=TRACE, outdir="reports/profiles", capture_range=None,
            nsys_args: Sequence[str] = (), env: dict | None = None, overwrite: bool = False,
            progress: bool = True, nsys: str | None = None, timeout_s: float | None = None) -> Report:
    """Run ``command`` under ``nsys profile``, export the report to SQLite and load it.

    Args: as :func:`labkit.record.nsys.record` (name: writes ``outdir/name.nsys-rep``, ``.sqlite``, ``.log``).
    Returns: :class:`Report` with ``log_path`` pointing at the program's output, and
        ``meta["profile_command"]`` / ``meta["profile_wall_s"]``.
    Raises: NsysNotFoundError, ReportExistsError, CaptureRangeError, ProfileTimeoutError, NsysError,
        ReportError.
    """
    from labkit.record import export
    from labkit.record import nsys as _nsys

    rec = _nsys.record(command, name=name, trace=trace, outdir=outdir, capture_range=capture_range,
                       nsys_args=nsys_args, env=env, overwrite=overwrite, progress=progress, nsys=nsys,
                       timeout_s=timeout_s)
    try:
        export.export_sqlite(rec.nsys_rep, nsys=rec.nsys, progress=progress)
    except KeyboardInterrupt:  # the export leaves nothing partial; the report itself is whole
        raise KeyboardInterrupt(f"interrupted while exporting; the report is kept: {rec.nsys_rep} "
                                f"(labkit.load_report exports it again)") from None
    report = load_report(rec.nsys_rep, nsys=rec.nsys)
    report.log_path = rec.log
    report.meta["profile_command"] = shlex.join(rec.argv)
    report.meta["profile_wall_s"] = rec.wall_s
    return report
