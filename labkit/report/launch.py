"""Which CUDA API call launched each GPU activity (kernel, copy, memset): the one of the same
process with the same correlation id (an id is unique within its process only)."""
from __future__ import annotations

import numpy as np

__all__ = ["call_key", "call_of"]


def call_key(pid, corr) -> np.ndarray:
    """One int64 per CUDA call or GPU activity that names its launch: process and correlation id
    (a correlation id is unique within its process only)."""
    return (np.asarray(pid, dtype=np.int64) << 32) | (np.asarray(corr, dtype=np.int64) & 0xFFFFFFFF)


def call_of(api_pid, api_corr, pid, corr) -> np.ndarray:
    """For each GPU activity (its process ``pid`` and correlation id ``corr``), the row, among the
    CUDA API calls given by their ``api_pid`` and ``api_corr``, of the call that launched it; -1
    where the report lacks that call (joined on :func:`call_key`)."""
    akey = call_key(api_pid, api_corr)
    key = call_key(pid, corr)
    if not len(akey):
        return np.full(len(key), -1, dtype=np.int64)
    order = np.argsort(akey, kind="stable")
    sk = akey[order]
    pos = np.minimum(np.searchsorted(sk, key), len(sk) - 1)
    return np.where(sk[pos] == key, order[pos], -1)
