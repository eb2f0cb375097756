"""Results ledger: one JSON line per benchmark run, appended safely, read back as a DataFrame.

A row (``schema`` 1) is a JSON object::

    {"schema": 1, "time": "2026-11-23T06:40:00+00:00", "step": "baseline", "name": "...",
     "command": [...], "config": {"batch_size": 1, ...},
     "env": {...labkit.env.fingerprint()...},
     "metrics": {"fps": 41.2, "latency_p50_ms": 23.1, "latency_p99_ms": 30.5,
                 "spread": 0.02, "stage_ms": {"decode": 1.2, ...},
                 "map50": 0.81, "mota": 0.7, "idf1": 0.8, "hota": 0.6},
     "paths": {"profile": "reports/x.nsys-rep", "results": ["reports/x.r0.json", ...]}}

Only ``step`` is required. Optional top-level fields: ``status`` (``ok``; ``flagged``, a run
whose results were suspect; ``skipped``, not run here, with its ``reason``; ``failed``, the run
failed, with the application's error line in ``reason``; ``repeat``, one finished run of a
benchmark, written before the step's own row); ``kind`` (what the step is in the lab:
see :data:`KINDS`); ``builds_on`` (the step whose flags it starts from); ``predicted_speedup``
and ``finding`` (the prediction it was run under). Appends never rewrite the file: re-running a step adds a row and
earlier rows stay. Concurrent writers (processes or threads) are serialized with ``fcntl.flock``
on the ledger file, and each row goes out as one ``write`` of one line on an ``O_APPEND``
descriptor, then ``fsync``; a writer killed mid-line leaves at most that line corrupt, and the
next append starts on a fresh line. Corrupt lines are skipped on read with a
:class:`LedgerWarning` naming the file and line number.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import functools
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from labkit.errors import OutputError, check_writable, claim_written, output_error, record_written, written_by_labkit

__all__ = ["Ledger", "LedgerWarning", "SCHEMA", "BASE_COLUMNS", "KINDS", "STATUSES", "machine_label", "flatten",
           "not_run", "row_problem"]

SCHEMA = 1
"""Version of the row layout written by :meth:`Ledger.append`."""

BASE_COLUMNS = ["schema", "time", "step", "name", "machine", "ledger", "line"]
"""Columns every frame from :meth:`Ledger.read` has, even when the ledger is empty."""

STATUSES = ("ok", "flagged", "skipped", "failed", "repeat")
"""Values of a row's ``status``; only ``ok`` rows (or rows without a status) carry a step's figures.
``repeat`` rows are single runs that ``labkit.bench.run`` appends as each completes (``repeat``:
its number), so an interrupted or failed benchmark keeps its finished runs; the step's own row follows them."""

KINDS = ("cumulative", "alternative", "sweep", "exercise")
"""Values of a row's ``kind``: a step that keeps every change before it; an alternative to a
step (built on it, not built on by the next); one value of a swept option; an exercise run
(left out of the lab's speed-up table unless asked for)."""


def not_run(step: str, *, status: str, reason: str, config: Mapping[str, Any] | None = None,
            labels: Mapping[str, Any] | None = None) -> dict:
    """The ledger record of a step that was skipped or failed: no figures, a ``reason``."""
    if status not in ("skipped", "failed"):
        raise ValueError(f"status={status!r}: a step that did not run is 'skipped' or 'failed'")
    return {**(labels or {}), "step": step, "status": status, "reason": reason, "config": dict(config or {})}


_NUMBER_METRICS = ("fps", "fps_ci_low", "fps_ci_high", "spread", "map50", "mota", "idf1", "hota", "repeats",
                   "decode_ceiling_fps")
_TEXT_FIELDS = ("name", "reason", "builds_on", "finding", "kind", "time")
_SECTIONS = ("env", "config", "metrics", "provenance", "paths")


def _kind_of(value: Any) -> str:
    return "null" if value is None else {"str": "text", "int": "a number", "float": "a number", "bool": "true/false",
                                         "list": "a list", "dict": "an object"}.get(type(value).__name__, "a value")


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


class _TwiceError(ValueError):
    """A JSON object that gives one field twice."""


def _object(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object of a ledger line; a field given twice is refused (readers disagree on which
    value counts: a row could show one step here and another elsewhere)."""
    row = dict(pairs)
    if len(row) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _TwiceError(f"field {twice!r:.40} is given twice in one object")
    return row


def _not_unicode(value: Any) -> str | None:
    """The first text in ``value`` (keys included) that is not valid Unicode (an unpaired surrogate
    such as ``\\ud800``, which JSON can spell but no output can encode), as ``repr``; else None."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return repr(exc.object[max(0, exc.start - 20):exc.end])
    except (TypeError, ValueError):
        return None
    return None


def row_problem(row: Any) -> str | None:
    """What makes a decoded ledger line unusable, as ``field 'x' should be ..., not ...``; None
    for a good row. The one schema every reader of the ledger relies on: ``step`` non-empty
    text; ``schema`` a whole number; ``status`` one of :data:`STATUSES`; the sections (``env``,
    ``config``, ``metrics``, ``provenance``, ``paths``) objects; text fields text; the figures
    numbers (``stage_ms`` an object of numbers); every text valid Unicode."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    odd = _not_unicode(row)
    if odd:
        return f"text that is not valid Unicode (an unpaired surrogate): {odd}"
    step = row.get("step")
    if not step:
        return "no 'step' field"
    if not isinstance(step, str):
        return f"field 'step' should be text, not {_kind_of(step)}"
    if "schema" in row and (not isinstance(row["schema"], int) or isinstance(row["schema"], bool)):
        return f"field 'schema' should be a whole number, not {_kind_of(row['schema'])} ({row['schema']!r:.40})"
    if row.get("status") is not None and row["status"] not in STATUSES:
        return f"field 'status' should be one of {', '.join(STATUSES)}, not {row['status']!r:.40}"
    for key in _SECTIONS:
        if row.get(key) is not None and not isinstance(row[key], Mapping):
            return f"field '{key}' should be an object, not {_kind_of(row[key])} ({row[key]!r:.40})"
    for key in _TEXT_FIELDS:
        if row.get(key) is not None and not isinstance(row[key], str):
            return f"field '{key}' should be text, not {_kind_of(row[key])}"
    if "time" in row and row["time"] is not None and pd.isna(pd.to_datetime(row["time"], utc=True, errors="coerce",
                                                                             format="ISO8601")):
        return f"field 'time' should be an ISO 8601 time, not {row['time']!r:.40}"
    metrics = row.get("metrics") or {}
    for key in _NUMBER_METRICS:
        if key in metrics and not _number(metrics[key]):
            return f"field 'metrics.{key}' should be a number, not {_kind_of(metrics[key])} ({metrics[key]!r:.40})"
    for key, value in metrics.items():
        if str(key).startswith(("latency_", "stage_ms")) or str(key).endswith("_ms"):
            bad = [v for v in (value.values() if isinstance(value, Mapping) else [value]) if not _number(v)]
            if bad:
                return f"field 'metrics.{key}' should hold numbers, not {_kind_of(bad[0])} ({bad[0]!r:.40})"
    return None


class LedgerWarning(UserWarning):
    """A ledger line could not be read (corrupt JSON, not an object, no step) and was skipped."""


@functools.lru_cache(maxsize=1)
def _fingerprint() -> dict:
    # Imported lazily and cached: the fingerprint imports torch and asks NVML once per process.
    from labkit import env

    return env.fingerprint()


def machine_label(env: Mapping[str, Any] | None) -> str:
    """Label of the machine a row ran on: the GPU name if any, else ``"CPU (<cpu model or host>)"``."""
    env = env or {}
    gpu = env.get("gpu")
    if gpu and not _is_missing(gpu):
        return str(gpu)
    what = env.get("cpu") or env.get("host")
    return f"CPU ({what})" if what and not _is_missing(what) else "CPU (unknown)"


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _jsonable(value: Any) -> Any:
    """Plain-JSON copy: numpy scalars unwrapped, paths as strings, NaN/inf as null (strict JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        try:
            value = value.item()
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def flatten(row: Mapping[str, Any]) -> dict:
    """One flat dict per row: nested dicts become dotted keys, and ``metrics.`` loses its prefix.

    ``{"config": {"batch_size": 4}, "metrics": {"fps": 9, "stage_ms": {"infer": 3}}}`` becomes
    ``{"config.batch_size": 4, "fps": 9, "stage_ms.infer": 3}``: metrics are what tables and
    charts use, so they get the short names; everything else keeps its section as a prefix
    (``env.gpu``, ``paths.profile``). A metric whose short name collides with a top-level
    field keeps its ``metrics.`` prefix. Lists stay as cell values.
    """
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, Mapping):
            return  # empty section: no column
        else:
            out[prefix] = value

    for key, value in row.items():
        if key == "metrics" and isinstance(value, Mapping):
            for mk, mv in value.items():
                name = mk if mk not in row else f"metrics.{mk}"
                walk(name, mv)
        else:
            walk(key, value)
    return out


class Ledger:
    """A JSON Lines results ledger at ``path`` (created with its folder on first append).

    Example::

        led = Ledger("reports/ledger.jsonl")
        led.append({"step": "baseline", "config": {"batch_size": 1}, "metrics": {"fps": 41.0}})
        led.read()[["step", "machine", "fps"]]
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def append(self, record: Mapping[str, Any]) -> dict:
        """Append one run; returns the row as written.

        Fills ``schema``, ``time`` (UTC, ISO 8601) and ``env`` (``labkit.env.fingerprint()``,
        computed once per process) where the record lacks them. Safe with concurrent writers.

        Raises:
            ValueError: the record has no non-empty ``step``.
            OutputError: the folder is not writable or its disk is full (the file is left as it was).
        """
        if not isinstance(record, Mapping) or not record.get("step"):
            raise ValueError("a ledger record needs a non-empty 'step' (e.g. {'step': 'baseline', ...})")
        row: dict[str, Any] = {"schema": SCHEMA,
                               "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")}
        row.update(record)
        if row.get("env") is None:
            row["env"] = _fingerprint()
        row = _jsonable(row)
        data = (json.dumps(row, separators=(",", ":"), allow_nan=False) + "\n").encode()
        try:
            self._write_line(data)
        except OSError as exc:  # full disk, read-only folder: one line naming the folder and the space
            raise output_error(self.path, exc, need_bytes=len(data), what="append a row to the ledger") from None
        return row

    def check(self) -> None:
        """Raise :class:`OutputError` (one line, the fix) when the ledger path is a folder or
        cannot be read; a missing file is fine (an empty ledger)."""
        if self.path.is_dir():
            raise OutputError(f"the ledger {self.path} is a folder, not a file: pass the ledger file inside it "
                              f"(e.g. {self.path / 'ledger.jsonl'}) or another path")
        if self.path.exists() and not self.path.is_file():  # a FIFO or a device: reading it never ends
            raise OutputError(f"the ledger {self.path} is a special file (FIFO, device or socket), not a file: pass "
                              f"a ledger file")
        if self.path.exists() and not os.access(self.path, os.R_OK | os.W_OK):
            raise OutputError(f"the ledger {self.path} cannot be read and appended to (permission denied): fix its "
                              f"permissions (chmod u+rw) or pass another path")

    def _write_line(self, data: bytes) -> None:
        self.check()
        check_writable(self.path.parent, what="write the ledger into")
        claim_written(self.path)  # listed first: a disk full at its first row never leaves it unlisted
        ours = not self.path.exists() or written_by_labkit(self.path)  # a ledger the user edited stays theirs
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                size = os.fstat(fd).st_size
                # A writer killed mid-line leaves no newline: start ours on a fresh line so
                # only the broken line is lost, not ours too.
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data
                view = memoryview(data)
                try:
                    while view:  # one write in practice; the loop guards a short write
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                except OSError:
                    os.ftruncate(fd, size)  # a disk that filled mid-line: the file is as it was (we hold the lock)
                    raise
                if ours:
                    record_written(self.path)  # still the lab's, as it is now (make reset trusts the mark)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def rows(self, *, repeats: bool = False) -> list[dict]:
        """The rows as dicts, in file order, with ``ledger`` (file) and ``line`` (1-based) added.

        Corrupt lines are skipped with a :class:`LedgerWarning` naming file and line. A missing
        file is an empty ledger. ``status: "repeat"`` rows (one benchmark run each, kept in case
        the benchmark stops) are left out unless ``repeats=True``.
        """
        if not self.path.exists():
            return []
        self.check()
        rows = []
        with open(self.path, "rb") as f:
            # Shared lock: never read a row another process is half-way through writing.
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            try:
                lines = f.read().split(b"\n")
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        for lineno, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw, object_pairs_hook=_object)
                problem = row_problem(row)  # one schema: a row every reader can use, or skipped here
            except _TwiceError as exc:
                problem = str(exc)
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                problem = f"not valid JSON: {str(exc)[:200]}"
            if problem:
                warnings.warn(f"{self.path}:{lineno}: corrupt ledger line skipped ({problem})",
                              LedgerWarning, stacklevel=3)
                continue
            if (row.get("schema") or 0) > SCHEMA:
                warnings.warn(f"{self.path}:{lineno}: row has schema {row['schema']}, newer than this "
                              f"labkit ({SCHEMA}); upgrade labkit to read all its fields",
                              LedgerWarning, stacklevel=3)
            row["ledger"] = str(self.path)
            row["line"] = lineno
            if repeats or row.get("status") != "repeat":
                rows.append(row)
        return rows

    def read(self, *, repeats: bool = False) -> pd.DataFrame:
        """The ledger as a DataFrame, one row per run in file order (``repeat`` rows: see :meth:`rows`).

        Returns:
            DataFrame with :data:`BASE_COLUMNS` (``schema``, ``time``, ``step``, ``name``,
            ``machine`` — derived from ``env``, see :func:`machine_label` —, ``ledger`` file,
            ``line`` number) and one column per flattened field (see :func:`flatten`):
            metrics by short name (``fps``, ``latency_p50_ms``, ``latency_p99_ms``, ``spread``,
            ``stage_ms.<stage>``, ``map50``, ``mota``, ``idf1``, ``hota``), other sections
            dotted (``config.batch_size``, ``env.gpu``, ``paths.profile``). ``time`` is a
            UTC timestamp.
        """
        return frame_of(self.rows(repeats=repeats))


def frame_of(rows: list[Mapping[str, Any]]) -> pd.DataFrame:
    """Flattened DataFrame of ledger rows (as from :meth:`Ledger.rows`); see :meth:`Ledger.read`."""
    flat = []
    for row in rows:
        f = flatten(row)
        f.setdefault("name", None)
        f["machine"] = machine_label(row.get("env"))
        flat.append(f)
    df = pd.DataFrame(flat)
    for col in BASE_COLUMNS:
        if col not in df.columns:
            df[col] = pd.Series(dtype=object)
    df["time"] = pd.to_datetime(df["time"], utc=True, errors="coerce", format="ISO8601")
    rest = [c for c in df.columns if c not in BASE_COLUMNS]
    return df[BASE_COLUMNS + rest].reset_index(drop=True)
