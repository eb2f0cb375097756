"""What a trace's calls and ranges say about waiting: which OS runtime calls block, wait on the
outside world (latency), nap, take a lock or hand something over to a peer; which NVTX ranges are
waits by their names; which threads are the CUDA runtime's, CUPTI's or nsys's own. The vocabulary
that :mod:`labkit.stats.blocked` and :mod:`labkit.stats.peers` read the trace with."""
from __future__ import annotations

import re

import pandas as pd

__all__ = ["BLOCKING_OSRT", "LATENCY_OSRT", "LOCK_OSRT", "RELEASING_OSRT", "RUNTIME_THREADS", "SLEEP_OSRT",
           "WAIT_WORDS", "blocking_osrt", "is_wait", "osrt_traced", "runtime_threads", "work_ranges"]

BLOCKING_OSRT = re.compile(
    r"^(nanosleep|clock_nanosleep|usleep|sleep|pause|sigsuspend|sigwait\w*|sigtimedwait"
    r"|pthread_cond_(timed|clock)?wait|sem_(timed|clock)?wait|pthread_mutex_(timed|clock)?lock"
    r"|pthread_rwlock_(timed|clock)?(rd|wr)lock|pthread_join|pthread_barrier_wait|futex"
    r"|poll|ppoll|select|pselect6?|epoll_p?wait2?"
    r"|read|pread(64)?|readv|preadv2?|fread|fgets|getline|recv|recvfrom|recvmsg|recvmmsg|accept4?|msgrcv"
    r"|wait|waitpid|wait3|wait4|waitid|flock|lockf|fsync|fdatasync)(_v\d+)?$")
"""OS runtime calls (as nsys names them) that wait: time in them is blocked, not work."""

LATENCY_OSRT = re.compile(
    r"^(nanosleep|clock_nanosleep|usleep|sleep|poll|ppoll|select|pselect6?|epoll_p?wait2?"
    r"|read|pread(64)?|readv|preadv2?|fread|fgets|getline|recv|recvfrom|recvmsg|recvmmsg|accept4?|msgrcv"
    r"|fsync|fdatasync)(_v\d+)?$")
"""The blocking calls that wait on the outside world (a device, a file, the network, a timer): their
time is *latency*, which stays on the thread unless the lever overlaps it. Every other blocked
time (locks, condition variables, joins, CUDA syncs, blocking copies, wait ranges) waits on a peer:
another thread or the GPU. A polling loop's sleeps and the reads that a peer ends are peer waits (:func:`peer_polls`,
:func:`peer_reads`)."""

SLEEP_OSRT = re.compile(r"^(nanosleep|clock_nanosleep|usleep|sleep)(_v\d+)?$")
"""The OS runtime calls that nap for a set time: a run of them is a polling loop (:func:`peer_polls`)."""

RELEASING_OSRT = re.compile(
    r"^(write|writev|pwrite(64)?|pwritev2?|fwrite|fputs|fflush|send|sendto|sendmsg|sendmmsg"
    r"|pthread_cond_(signal|broadcast)|sem_post|pthread_mutex_unlock|pthread_rwlock_unlock|kill|tgkill|raise"
    r"|mq_send|msgsnd|eventfd_write)(_v\d+)?$")
"""OS runtime calls that hand something to another thread or process (data, a signal, a permit): the
events that can end a peer's poll (:func:`peer_polls`), besides the end of a work range."""

RUNTIME_THREADS = re.compile(r"^(cuda-EvtHandlr|cuda[0-9a-f]{8,}|CUPTI worker thread|\[NSys[^\]]*\])$")
"""Names of the threads the CUDA driver (its event handler, its workers), CUPTI and nsys start in a
profiled process: they wait for work, whatever they are blocked in; never the program's own."""

LOCK_OSRT = re.compile(
    r"^(pthread_cond_(timed|clock)?wait|sem_(timed|clock)?wait|pthread_mutex_(timed|clock)?lock"
    r"|pthread_rwlock_(timed|clock)?(rd|wr)lock|futex)(_v\d+)?$")
"""Waits for a lock or a condition. Between two naps they are the polling thread taking the lock its
check needs (Python's GIL: CPython waits for it in ``pthread_cond_timedwait``), not the end of its
loop: a thread whose loop such waits split would end its loops whenever its peers hold the GIL,
that is, when they act."""
WAIT_WORDS = ("wait", "await", "idle", "queue", "sleep", "sync", "blocked", "blocking")
"""NVTX range names with one of these words count as waiting, not as work. Words, not substrings: the
name is split at anything but letters and at case changes (``queue_wait``, ``QueueWait``,
``main->test->wait``), and a word counts when it is one of these or starts with ``wait``, ``idle``,
``sleep`` or ``synchron`` (``waiting``, ``synchronize``). ``async_infer``, ``resblock``,
``transformer_block`` or TensorRT's ``/blocks.0/Conv`` layers are work."""
_STEMS = ("wait", "idle", "sleep", "synchron")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")

def is_wait(name) -> bool:
    """Whether an NVTX range name says it waits (:data:`WAIT_WORDS`)."""
    words = [w.lower() for w in _WORD.findall(str(name))]
    return any(w in WAIT_WORDS or w.startswith(_STEMS) for w in words)


def blocking_osrt(rep) -> pd.DataFrame:
    """The OS runtime calls of ``rep`` that block (:data:`BLOCKING_OSRT`), as the ``osrt`` frame."""
    o = rep.osrt
    if len(o) == 0:
        return o
    names = o["name"].astype(str)
    return o[names.str.match(BLOCKING_OSRT)]


def osrt_traced(rep) -> bool:
    """Whether the run was traced with ``-t osrt`` (:func:`labkit.report.meta._read_meta`), though a window of
    it may hold no call: then a thread's time outside its ranges, CUDA calls and traced waits is not a
    traced kind of wait (it may still be one nsys 2022.4 does not trace: a timed ``sem_clockwait``)."""
    return bool(rep.meta.get("osrt_traced", len(rep.osrt) > 0))


def _memo(rep, key: tuple, build):
    """``build()``, once per report where the report keeps derived values (``Report.memo``)."""
    memo = getattr(rep, "memo", None)
    return memo(key, build) if memo is not None else build()


def _ranges(rep, waiting: bool) -> pd.DataFrame:
    nv = rep.nvtx
    if len(nv) == 0:
        return nv
    r = nv[nv["kind"] != "mark"]
    return r[r["name"].map(is_wait).astype(bool) == waiting]


def _wait_ranges(rep) -> pd.DataFrame:
    return _memo(rep, ("wait_ranges",), lambda: _ranges(rep, True))


def work_ranges(rep) -> pd.DataFrame:
    """The report's NVTX ranges that are work: not marks, not named as waits (:func:`is_wait`). Built
    once per report; callers filter it, never change it."""
    return _memo(rep, ("work_ranges",), lambda: _ranges(rep, False))


def runtime_threads(rep) -> set[int]:
    """Global tids of the report's :data:`RUNTIME_THREADS`."""
    t = rep.threads
    if len(t) == 0 or "thread_name" not in t.columns:
        return set()
    named = t["thread_name"].fillna("").astype(str).str.match(RUNTIME_THREADS)
    return set(t.loc[named, "global_tid"].astype("int64"))
