"""Where per-report work runs: in this process, or as tasks on a Dask cluster (as nsys's recipes do).

:func:`run_tasks` calls one function per item and returns the results in order. ``scheduler``:

- ``None`` (the default): the Dask scheduler named by ``DASK_SCHEDULER_ADDRESS`` when that is set
  (nsys's recipes and Dask read the same variable), else in this process, one item after another;
- ``"serial"``: in this process, whatever the environment says;
- ``"local"``: a ``distributed.LocalCluster`` of worker processes (one per core, one thread each,
  at most one per item), started for this call and stopped after it (its workers are started by
  ``multiprocessing``'s spawn: a script that asks for it needs ``if __name__ == "__main__":``);
- ``"tcp://HOST:PORT"`` (any ``PROTOCOL://`` address): a running scheduler (``dask scheduler``);
- the path of a scheduler file (``dask scheduler --scheduler-file F``, as under Slurm);
- a ``distributed.Client``: used as it is, left open.

The workers must be able to import labkit and read the reports' paths (a shared file system). Only
what the function returns travels back; Dask is imported only when a cluster is used.

Every wait on a cluster is bounded and each failure is one line (:class:`ClusterError`): an address
is first asked who it is (Dask's ``identity`` call, :data:`CONNECT_S` seconds at most: a port that
speaks HTTP, or never answers, hung the Client), a cluster with no worker is waited for
:func:`workers_wait_s` seconds, a worker that dies on an item (killed by memory, a crash) names that
item, and ``"local"`` from a script whose call is not under ``if __name__ == "__main__":`` says so
before any worker starts (each spawned worker ran the script again: a dozen tracebacks).
"""
from __future__ import annotations

import ast
import logging
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from labkit.errors import LabkitError

__all__ = ["run_tasks", "ClusterError", "scheduler_from_env", "ENV_ADDRESS"]

ENV_ADDRESS = "DASK_SCHEDULER_ADDRESS"
CONNECT_S = 10.0
"""Seconds a scheduler's address has to answer Dask's ``identity`` call."""
ENV_WORKERS_S = "LABKIT_DASK_WORKERS_S"
WORKERS_S = 60.0
"""Seconds a cluster with no worker is waited for (``$LABKIT_DASK_WORKERS_S`` when set)."""


def workers_wait_s() -> float:
    """How long to wait for a first worker: ``$LABKIT_DASK_WORKERS_S`` (a positive number), else WORKERS_S."""
    text = os.environ.get(ENV_WORKERS_S)
    if not text:
        return WORKERS_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise ClusterError(f"{ENV_WORKERS_S}={text!r:.40} is not a positive number of seconds: set it to one "
                           f"(e.g. 60), or unset it")
    return value


class ClusterError(LabkitError):
    """A Dask scheduler that cannot be used (unknown name, unreachable address, missing scheduler file)."""


def scheduler_from_env(scheduler=None):
    """What ``scheduler=None`` means here: ``$DASK_SCHEDULER_ADDRESS`` when set, else ``"serial"``."""
    if scheduler is None:
        return os.environ.get(ENV_ADDRESS) or "serial"
    return scheduler


def _file_address(path: Path) -> str | None:
    """The address in a scheduler file (``dask scheduler --scheduler-file``: a JSON object whose
    ``address`` is ``PROTOCOL://HOST:PORT``); None when ``path`` is no file; ClusterError in one line
    when it is a file but not a scheduler file."""
    import json

    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            data = json.loads(f.read(1_000_001)[:1_000_000])
    except OSError:
        return None
    except (ValueError, RecursionError) as exc:  # not JSON (UnicodeDecodeError is a ValueError)
        data = exc
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or "://" not in address:
        raise ClusterError(f"{str(path)!r:.200} is not a Dask scheduler file (a JSON object whose 'address' is "
                           f"PROTOCOL://HOST:PORT, as `dask scheduler --scheduler-file` writes it): pass the file the "
                           f"scheduler wrote, its address, or scheduler='local'")
    return address


def _check_address(address: str) -> None:
    """ValueError unless ``address`` is ``PROTOCOL://LOCATION`` with a protocol Dask knows and, for
    the socket protocols, a host and a port that is a number (checked here, synchronously: a Client
    given a bad one raised in its own event loop thread, and the caller could wait forever)."""
    from distributed.comm import get_address_host_port
    from distributed.comm.addressing import parse_address
    from distributed.comm.registry import get_backend

    scheme, _ = parse_address(address)
    get_backend(scheme)
    if scheme in ("tcp", "tls", "ws", "wss"):
        get_address_host_port(address)


def _identify(address: str, timeout: float = CONNECT_S) -> dict:
    """Dask's ``identity`` of the scheduler at ``address``, every step within ``timeout`` seconds
    (in a thread of its own: the caller may be inside an event loop, a notebook's); OSError or
    TimeoutError in words when it does not answer as a scheduler does."""
    import asyncio
    import threading

    from distributed.comm import connect

    async def ask():
        comm = await asyncio.wait_for(connect(address, timeout=timeout), timeout)
        try:
            await asyncio.wait_for(comm.write({"op": "identity", "reply": True}), timeout)
            return await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()

    got: list = []

    def probe() -> None:
        try:
            got.append(asyncio.run(ask()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            got.append(exc)

    thread = threading.Thread(target=probe, name="labkit-dask-probe", daemon=True)  # never holds up exit
    thread.start()
    thread.join(timeout + 5)
    reply = got[0] if got else TimeoutError()
    if isinstance(reply, (asyncio.TimeoutError, TimeoutError)):
        raise TimeoutError(f"no answer as a Dask scheduler within {timeout:g} s")
    if isinstance(reply, BaseException):  # the comm closed on us (a server of another protocol), a refused port
        text = str(reply).splitlines()[0][:150] if str(reply) else "closed"
        raise OSError(f"{type(reply).__name__}: {text}")
    if not (isinstance(reply, dict) and reply.get("type") == "Scheduler"):
        raise OSError(f"it answered, but not as a Dask scheduler ({str(reply)[:80]})")
    return reply


def _unguarded_main_call() -> str | None:
    """``FILE:LINE`` of this call in the ``__main__`` script when that line runs at the script's
    top level outside an ``if __name__ == "__main__":`` block; else None (a notebook, ``python -c``,
    a guarded call). A LocalCluster's spawned workers import that script again, and run the call."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"):
        frame = frame.f_back
    if frame is None or not main_file or os.path.abspath(frame.f_code.co_filename) != os.path.abspath(main_file):
        return None
    try:
        tree = ast.parse(Path(main_file).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    for node in tree.body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
                return None
            return f"{main_file}:{line}"
    return None


def _connect(scheduler, n_items: int):
    """(client, [what to close after]) for a scheduler that is not "serial": the client and the cluster
    this call opened, never a client it was given."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ClusterError("Dask's distributed is not installed: pip install 'dask[distributed]' (labkit "
                           "depends on it; reinstall labkit), or pass scheduler='serial'") from None
    if not isinstance(scheduler, (str, os.PathLike)):
        if isinstance(scheduler, Client):
            return scheduler, []
        raise ClusterError(f"scheduler={scheduler!r}: pass None, 'serial', 'local', a scheduler address "
                           f"(tcp://HOST:PORT), a scheduler file or a distributed.Client")
    text = str(scheduler)
    if text == "local":
        import multiprocessing

        if getattr(multiprocessing.current_process(), "_inheriting", False):  # a spawned worker, importing __main__
            raise ClusterError("scheduler='local' ran again in one of its own workers: put the call under "
                               "`if __name__ == \"__main__\":` in your script")
        where = _unguarded_main_call()
        if where is not None:
            raise ClusterError(f"scheduler='local' starts worker processes that import your script again ({where}): "
                               f"put the code that calls it under `if __name__ == \"__main__\":`, or pass "
                               f"scheduler='serial'")
        workers = max(1, min(os.cpu_count() or 1, n_items))
        import dask

        # the statistical profiler samples every 10 ms: a third more CPU on tasks of ~50 ms here
        with dask.config.set({"distributed.worker.profile.enabled": False}):
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.ERROR)
        client = Client(cluster)
        return client, [client, cluster]
    address = text if "://" in text else _file_address(Path(text).expanduser())
    try:
        if address is not None:
            _check_address(address)  # before Client: its event loop thread may never report a bad one
            _identify(address)  # before Client too: a port of another protocol hung it for ever
            client = Client(address, timeout=f"{CONNECT_S:g}s")
            return client, [client]
    except ValueError as exc:  # no port, a port that is not a number, an unknown scheme
        raise ClusterError(f"the Dask scheduler address {address!r:.200} is not valid ({str(exc)[:200]}): give "
                           f"PROTOCOL://HOST:PORT, e.g. tcp://10.0.0.5:8786 (as `dask scheduler` prints it), or "
                           f"pass scheduler='local'") from None
    except (OSError, TimeoutError) as exc:
        where = text if "://" in text else f"the scheduler in {text}"
        raise ClusterError(f"cannot reach the Dask scheduler at {where} ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else 'no answer'}): start it (dask scheduler; "
                           f"dask worker ADDRESS), check the address, or pass scheduler='local'") from None
    raise ClusterError(f"scheduler {text!r} is neither 'serial', 'local', an address (tcp://HOST:PORT) nor an "
                       f"existing scheduler file: pass one of those (from ${ENV_ADDRESS} when unset)")


def _wait_for_workers(client, where: str) -> None:
    wait = workers_wait_s()
    try:
        client.wait_for_workers(1, timeout=wait)
    except (TimeoutError, OSError):
        raise ClusterError(f"no workers joined the Dask scheduler at {where} within {wait:g} s: start some "
                           f"(dask worker {client.scheduler.address}), or pass scheduler='local' "
                           f"(${ENV_WORKERS_S} sets the wait)") from None


def _killed(exc, futures, items, client=None, func=None, kwargs=None) -> ClusterError:
    """One line for a task whose worker died each time it ran (KilledWorker): the item it was on.

    Every task a dying worker held is a suspect, the ones queued behind the culprit too, and the
    first suspect gathered need not be the culprit; so the suspects run again one at a time, and the
    one whose worker dies again is named (the first suspect where none does)."""
    from distributed import KilledWorker

    key = getattr(exc, "task", None)
    if key is None and exc.args:
        key = exc.args[0]
    suspects = [items[i] for i, f in enumerate(futures) if f.key == key or f.status == "error"]
    item = suspects[0] if suspects else None
    if client is not None and len(suspects) > 1:
        for one in suspects:
            f = client.submit(func, one, pure=False, **(kwargs or {}))
            try:
                f.result()
            except KilledWorker:
                item = one
                break
            except Exception:  # noqa: BLE001 (another error of its own: not what killed the worker)
                continue
            finally:
                client.cancel([f])
    what = f"{str(item)!r:.200}" if item is not None else "one of the items"
    return ClusterError(f"a Dask worker died each time it worked on {what} (killed: out of memory, or a crash "
                        f"reading it): check that file, give the workers more memory (dask worker "
                        f"--memory-limit), or pass scheduler='serial' to see its error here")


def run_tasks(func: Callable, items: Sequence, *, scheduler=None, **kwargs) -> list:
    """``[func(item, **kwargs) for item in items]``, run where ``scheduler`` says (see the module doc).

    An exception raised by ``func`` on a worker is raised here, as it is (a LabkitError stays one);
    a worker that died on an item, or no worker at all, is a ClusterError.
    """
    scheduler = scheduler_from_env(scheduler)
    if scheduler == "serial":
        return [func(item, **kwargs) for item in items]
    client, opened = _connect(scheduler, len(items))
    items = list(items)
    try:
        _wait_for_workers(client, str(scheduler) if isinstance(scheduler, (str, os.PathLike)) else "its address")
        from distributed import KilledWorker

        # pure=False: a report read twice is read again (its file may have changed in between)
        futures = client.map(func, items, pure=False, **kwargs)
        try:
            return client.gather(futures)
        except KilledWorker as exc:
            raise _killed(exc, futures, items, client, func, kwargs) from None
        finally:
            client.cancel(futures)  # on an error, the rest stop; on success, the workers drop the results
    finally:
        for thing in opened:
            thing.close()
