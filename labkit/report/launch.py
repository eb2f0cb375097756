"""Which CUDA API call launched each GPU activity (kernel, copy, memset): the one of the same
process with the same correlation id (an id is unique within its process only)."""
from __future__ import annotations

import numpy as np

__all__ = ["call_key", "launching_call"]


def call_key(pid, corr) -> np.ndarray:
    """One int64 per CUDA call or GPU activity that names its launch: process and correlation id
    (a correlation id is unique within its process only)."""
    return (np.asarray(pid, dtype=np.int64) << 32) | (np.asarray(corr, dtype=np.int64) & 0xFFFFFFFF)


def launching_call(api_pid, api_corr):
    """A lookup over the CUDA API calls given by ``api_pid`` and ``api_corr``, sorted once: called
    with GPU activities' ``pid`` and ``corr``, it returns for each the row of the call that launched
    it, -1 where the report lacks that call (joined on :func:`call_key`)."""
    akey = call_key(api_pid, api_corr)
    order = np.argsort(akey, kind="stable")
    sk = akey[order]

    def rows(pid, corr) -> np.ndarray:
        key = call_key(pid, corr)
        if not len(sk):
            return np.full(len(key), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(sk, key), len(sk) - 1)
        return np.where(sk[pos] == key, order[pos], -1)

    return rows
