"""Read the CPU side of an export: threads, the processes the profile is about, OS runtime calls, and
when each thread was off its CPU (context switches)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.report.reader import _TID_MASK, OFFCPU_COLUMNS, OSRT_COLUMNS, _Db, _empty, _lookup, _names, pid_of

__all__ = ["read_threads", "profiled_pids", "read_osrt", "read_offcpu"]


def read_threads(db: _Db, strings: np.ndarray) -> pd.DataFrame:
    if not db.has("ThreadNames", "nameId", "globalTid"):
        return pd.DataFrame({"global_tid": pd.Series(dtype="int64"), "tid": pd.Series(dtype="int64"),
                             "pid": pd.Series(dtype="int64"), "thread_name": pd.Series(dtype=object)})
    c = db.cols("ThreadNames", ["globalTid", "nameId"])
    df = pd.DataFrame({"global_tid": c["globalTid"], "thread_name": _lookup(strings, c["nameId"])})
    df = df.drop_duplicates("global_tid", keep="last").reset_index(drop=True)
    g = df["global_tid"].to_numpy()
    df.insert(1, "tid", g & _TID_MASK)
    df.insert(2, "pid", pid_of(g))
    return df


def profiled_pids(db: _Db) -> set[int]:
    """The processes the profile is about: those with CUDA or NVTX events (ProcessStreams, CUDA API
    calls, GPU work, NVTX), else those with OS runtime calls; empty when the export cannot tell
    (then every thread counts). ThreadNames also lists the machine's other processes."""
    def pids(table: str, col: str) -> set[int]:
        if not db.has(table, col):
            return set()
        return {int(r[0]) for r in db.scalar_rows(f"SELECT DISTINCT ([{col}] >> 24) & {_TID_MASK} FROM [{table}] "
                                                   f"WHERE [{col}] IS NOT NULL", table)}
    out = pids("ProcessStreams", "globalPid") | pids("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid") \
        | pids("NVTX_EVENTS", "globalTid")
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if not out:
            out |= pids(t, "globalPid")
    return out or pids("OSRT_API", "globalTid")


def osrt_calls(osrt: pd.DataFrame) -> pd.DataFrame:
    """The calls of an OS runtime frame (event class 27): nsys's markers of the tracing's start and
    end in each process (classes 31 and 32, on its thread 0, which runs nothing) left out. Read as a
    thread, a child process's markers were a thread busy for the child's whole life."""
    if len(osrt) and "event_class" in osrt and (osrt["event_class"] >= 0).any():
        return osrt[osrt["event_class"] == 27]
    return osrt


def read_osrt(db: _Db, strings: np.ndarray) -> pd.DataFrame:
    """OS runtime calls (``-t osrt``): name, thread, times, return value, event class (27: a call)."""
    t = "OSRT_API"
    if not db.has(t, "start", "end", "nameId"):
        return _empty(OSRT_COLUMNS)
    c = db.cols(t, ["start", "end", "globalTid", "nameId", "returnValue", "eventClass"])
    g = c["globalTid"]
    return pd.DataFrame({
        "name": _names(strings, c["nameId"]), "tid": g & _TID_MASK, "pid": pid_of(g),
        "global_tid": g, "start_ns": c["start"], "end_ns": c["end"], "duration_ns": c["end"] - c["start"],
        "return_value": c["returnValue"], "event_class": c["eventClass"], "name_id": c["nameId"],
    })


def read_offcpu(db: _Db) -> pd.DataFrame:
    """When each thread was off its CPU (``nsys profile --cpuctxsw=process-tree``, nsys's default; the
    ``SCHED_EVENTS`` table): from each switch out to the thread's next switch in, as OFFCPU_COLUMNS.
    Empty where the report has no context switches. nsys 2022.4 records no thread state, so an
    interval is a block or a preemption alike."""
    t = "SCHED_EVENTS"
    if not db.has(t, "start", "isSchedIn", "globalTid"):
        return _empty(OFFCPU_COLUMNS)
    c = db.cols(t, ["start", "isSchedIn", "globalTid"])
    ev = pd.DataFrame({"g": c["globalTid"], "t": c["start"], "into": c["isSchedIn"]})
    ev = ev[ev["g"] >= 0].sort_values(["g", "t"], kind="stable")
    nxt = ev.groupby("g", sort=False).shift(-1)
    out = ev[(ev["into"] == 0) & (nxt["into"] == 1)]
    end = nxt.loc[out.index, "t"].astype("int64")
    g = out["g"].to_numpy(np.int64)
    return pd.DataFrame({"tid": g & _TID_MASK, "pid": pid_of(g), "global_tid": g,
                         "start_ns": out["t"].to_numpy(np.int64), "end_ns": end.to_numpy(np.int64),
                         "duration_ns": end.to_numpy(np.int64) - out["t"].to_numpy(np.int64)}).reset_index(drop=True)
