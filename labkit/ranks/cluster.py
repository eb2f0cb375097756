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
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Sequence

from labkit.errors import LabkitError

__all__ = ["run_tasks", "ClusterError", "scheduler_from_env", "ENV_ADDRESS"]

ENV_ADDRESS = "DASK_SCHEDULER_ADDRESS"


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
            client = Client(address, timeout="10s")
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


def run_tasks(func: Callable, items: Sequence, *, scheduler=None, **kwargs) -> list:
    """``[func(item, **kwargs) for item in items]``, run where ``scheduler`` says (see the module doc).

    An exception raised by ``func`` on a worker is raised here, as it is (a LabkitError stays one).
    """
    scheduler = scheduler_from_env(scheduler)
    if scheduler == "serial":
        return [func(item, **kwargs) for item in items]
    client, opened = _connect(scheduler, len(items))
    try:
        # pure=False: a report read twice is read again (its file may have changed in between)
        futures = client.map(func, list(items), pure=False, **kwargs)
        try:
            return client.gather(futures)
        finally:
            client.cancel(futures)  # on an error, the rest stop; on success, the workers drop the results
    finally:
        for thing in opened:
            thing.close()
