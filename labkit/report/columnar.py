"""A columnar cache of each export's frames: Parquet files (through pyarrow) in the per-user cache.

Reading an export's frames from SQLite rebuilds them every time (the NVTX nesting, the names);
a frame read once is written as Parquet under ``labkit.env.cache_dir() / "columnar"`` and every
later load of the same export reads it from there. An export is known by its identity
(:func:`labkit.record.export.report_identity`: size and a SHA-256 of its first MiB and last
64 KiB, where SQLite keeps its header and change counter) and its modification time, so a changed
or replaced file at the same path gets a cache of its own and never reads a stale one; the cache
format has a version (:data:`FORMAT`), so a labkit whose frames changed never reads old files.

An entry is input, as any file labkit reads back: it is used only when this user owns it and it
carries labkit's mark (format, frame, row count and columns, written with it) that matches what it
holds; another program's Parquet, an emptied or cut file, or another user's entry is skipped and the
frame rebuilt from the export. Where another user owns an export's folder (a ``LABKIT_CACHE_DIR``
shared by two users), this user's frames go to a folder of their own beside it, or stay in memory;
that is said once, in one line.

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
import stat
import sys
from pathlib import Path

import pandas as pd

from labkit.paths import bounded_name

__all__ = ["Columnar", "columnar_dir", "FORMAT", "MIN_ROWS", "MIN_BYTES"]

FORMAT = 2
"""Version of the cached frames' layout: bump it when a frame's columns or dtypes change."""
MIN_ROWS = 20_000
"""Frames with fewer rows are not cached (SQLite reads them faster than pyarrow imports)."""
MIN_BYTES = 4 << 20
"""Exports smaller than this are never cached nor looked up (their frames read quickly from SQLite;
the cache's key would cost more than it saves)."""
_OBJECT_CATEGORIES = b"labkit.object_categories"  # categorical columns whose categories are object, not str
_MARK = b"labkit.columnar"  # {"format", "frame", "rows", "columns"}: what labkit wrote, checked on every read
_SAID: set[str] = set()  # the caches already said to belong to another user (one line per process)


def _uid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def _ours(path: Path, *, folder: bool) -> bool | None:
    """Whether ``path`` is this user's own folder or regular file (no link); None when absent."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    except OSError:  # a folder above it this user may not enter: another user's
        return False
    kind = stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)
    uid = _uid()
    return kind and (uid is None or st.st_uid == uid)


def _say_foreign(path: Path, instead: str) -> None:
    key = str(path.parent)
    if key not in _SAID:
        _SAID.add(key)
        print(f"labkit: the columnar cache {path} belongs to another user: skipped, {instead} "
              f"(set LABKIT_CACHE_DIR to a folder of your own)", file=sys.stderr)


def columnar_dir() -> Path:
    """Where the cached frames live: ``labkit.env.cache_dir() / "columnar"`` (one folder per export)."""
    from labkit.env import cache_dir

    return cache_dir() / "columnar"


class Columnar:
    """The cached frames of one export (``get``/``put`` by frame name); the key is computed on first use."""

    def __init__(self, db_path: Path):
        self.db_path = Path(db_path)
        self._folder: Path | None | bool = False  # False: not yet chosen; None: no cache for this user
        self._key: str | None = None  # the export's key, set with the folder
        try:
            self._size = self.db_path.stat().st_size
        except OSError:
            self._size = 0

    @property
    def used(self) -> bool:
        """Whether this export is large enough to be cached (MIN_BYTES)."""
        return self._size >= MIN_BYTES

    @property
    def folder(self) -> Path | None:
        """This export's folder in the cache: ``<stem>-<key>``, key from identity, mtime and FORMAT;
        ``<stem>-<key>-u<uid>`` where another user owns that one; None where neither is this user's."""
        if self._folder is False:
            from labkit.record.export import report_identity

            ident = report_identity(self.db_path)
            mtime = self.db_path.stat().st_mtime_ns
            key = hashlib.sha256(f"{FORMAT}:{ident['size']}:{ident['sha256']}:{mtime}".encode()).hexdigest()[:24]
            self._key = key  # written into each frame's mark: another export's frame is not this one's
            base = columnar_dir() / bounded_name(f"{self.db_path.stem}-{key}")  # a 240-byte name fits
            self._folder = base if _ours(base, folder=True) is not False else None
            if self._folder is None:
                own = base.with_name(bounded_name(f"{base.name}-u{_uid()}"))
                self._folder = own if _ours(own, folder=True) is not False else None
                _say_foreign(base, "this user's frames are kept beside it" if self._folder else
                             "frames are read from the export")
        return self._folder

    def get(self, name: str):
        """The cached frame ``name`` as a DataFrame, or None (not cached, or unreadable: then removed)."""
        if not self.used or self.folder is None:
            return None
        path = self.folder / f"{name}.parquet"
        mine = _ours(path, folder=False)
        if not mine:  # absent; or another user's file, a link, a folder: never read, rebuilt over
            return None
        try:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            meta = table.schema.metadata or {}
            mark = json.loads(meta[_MARK])
            if mark != {"format": FORMAT, "key": self._key, "frame": name, "rows": table.num_rows,
                        "columns": table.column_names}:
                raise ValueError(f"not labkit's frame {name!r} as written: {mark}")
            df = table.to_pandas()
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
        if len(df) < MIN_ROWS or not self.used or self.folder is None:
            return False
        folder = self.folder
        tmp = folder / f".{name}.{os.getpid()}.partial"
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq

            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not _ours(folder, folder=True):  # made meanwhile by another user, or a link
                return False
            table = pa.Table.from_pandas(df, preserve_index=False)
            objcat = [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)
                      and df[c].cat.categories.dtype == object]
            mark = {"format": FORMAT, "key": self._key, "frame": name, "rows": table.num_rows,
                    "columns": table.column_names}
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                   _OBJECT_CATEGORIES: json.dumps(objcat).encode(),
                                                   _MARK: json.dumps(mark).encode()})
            pq.write_table(table, tmp)
            os.replace(tmp, folder / f"{name}.parquet")  # readers see a whole file or none
            return True
        except Exception:  # read-only or full cache, a column pyarrow cannot hold: the export stays the source
            try:
                tmp.unlink(missing_ok=True)
            except OSError:  # no folder to hold it: nothing was written
                pass
            return False
