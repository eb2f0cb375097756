"""A columnar cache of each export's frames: Parquet files (through pyarrow) in the per-user cache.

Reading an export's frames from SQLite rebuilds them every time (the NVTX nesting, the names);
a frame read once is written as Parquet under ``labkit.env.cache_dir() / "columnar"`` and every
later load of the same export reads it from there. An export is known by its identity
(:func:`labkit.record.export.report_identity`: size and a SHA-256 of its first MiB and last
64 KiB, where SQLite keeps its header and change counter) and its modification time, so a changed
or replaced file at the same path gets a cache of its own and never reads a stale one; the cache
format has a version (:data:`FORMAT`), so a labkit whose frames changed never reads old files.

Only frames of at least :data:`MIN_ROWS` rows of exports of :data:`MIN_BYTES` or more are cached:
below that, reading SQLite is quicker than importing pyarrow and computing the key. Summaries keep
what they read this way too (:meth:`labkit.report.load.Report._derived`: NVTX durations, packed
kernel durations). The cache is an optimisation: a cache that cannot be written (read-only, full
disk) or read (damaged file) is skipped, and the frame comes from the export as before.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pandas as pd

__all__ = ["Columnar", "columnar_dir", "FORMAT", "MIN_ROWS", "MIN_BYTES"]

FORMAT = 1
"""Version of the cached frames' layout: bump it when a frame's columns or dtypes change."""
MIN_ROWS = 20_000
"""Frames with fewer rows are not cached (SQLite reads them faster than pyarrow imports)."""
MIN_BYTES = 4 << 20
"""Exports smaller than this are never cached nor looked up (their frames read quickly from SQLite;
the cache's key would cost more than it saves)."""
_OBJECT_CATEGORIES = b"labkit.object_categories"  # categorical columns whose categories are object, not str


def columnar_dir() -> Path:
    """Where the cached frames live: ``labkit.env.cache_dir() / "columnar"`` (one folder per export)."""
    from labkit.env import cache_dir

    return cache_dir() / "columnar"


class Columnar:
    """The cached frames of one export (``get``/``put`` by frame name); the key is computed on first use."""

    def __init__(self, db_path: Path):
        self.db_path = Path(db_path)
        self._folder: Path | None = None
        try:
            self._size = self.db_path.stat().st_size
        except OSError:
            self._size = 0

    @property
    def used(self) -> bool:
        """Whether this export is large enough to be cached (MIN_BYTES)."""
        return self._size >= MIN_BYTES

    @property
    def folder(self) -> Path:
        """This export's folder in the cache: ``<stem>-<key>``, key from identity, mtime and FORMAT."""
        if self._folder is None:
            from labkit.record.export import report_identity

            ident = report_identity(self.db_path)
            mtime = self.db_path.stat().st_mtime_ns
            key = hashlib.sha256(f"{FORMAT}:{ident['size']}:{ident['sha256']}:{mtime}".encode()).hexdigest()[:24]
            self._folder = columnar_dir() / f"{self.db_path.stem}-{key}"
        return self._folder

    def get(self, name: str):
        """The cached frame ``name`` as a DataFrame, or None (not cached, or unreadable: then removed)."""
        if not self.used:
            return None
        path = self.folder / f"{name}.parquet"
        if not path.is_file():
            return None
        try:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            df = table.to_pandas()
            meta = table.schema.metadata or {}
            for c in json.loads(meta.get(_OBJECT_CATEGORIES, b"[]")):  # as the reader built them, not str
                cats = pd.Index(df[c].cat.categories, dtype=object)
                df[c] = pd.Categorical.from_codes(df[c].cat.codes, categories=cats)
            return df
        except Exception:  # a damaged or foreign file: the export is the truth, read it again
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
            return None

    def put(self, name: str, df) -> bool:
        """Write frame ``name`` (when it has MIN_ROWS rows or more); False when it was not cached."""
        if len(df) < MIN_ROWS or not self.used:
            return False
        folder = self.folder
        tmp = folder / f".{name}.{os.getpid()}.partial"
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq

            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            table = pa.Table.from_pandas(df, preserve_index=False)
            objcat = [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)
                      and df[c].cat.categories.dtype == object]
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                   _OBJECT_CATEGORIES: json.dumps(objcat).encode()})
            pq.write_table(table, tmp)
            os.replace(tmp, folder / f"{name}.parquet")  # readers see a whole file or none
            return True
        except Exception:  # read-only or full cache, a column pyarrow cannot hold: the export stays the source
            try:
                tmp.unlink(missing_ok=True)
            except OSError:  # no folder to hold it: nothing was written
                pass
            return False
