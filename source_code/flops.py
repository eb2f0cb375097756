"""FLOPs per frame of the detector, cached on disk (``<folder>/flops.json``) by architecture
and input size: counting traces a whole forward pass and imports torch's compiler stack,
seconds that every run would pay."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def flops_per_frame(model, input_hw, count, folder: Path) -> int:
    """FLOPs per frame of ``model`` at ``input_hw``: from the cache in ``folder``, else counted
    with ``count(model, input_hw)`` and stored (a read-only cache only costs time)."""
    arch = hashlib.sha1(repr([(k, tuple(v.shape)) for k, v in model.state_dict().items()]).encode()).hexdigest()[:16]
    key = f"{type(model).__name__}-{arch}-{input_hw[0]}x{input_hw[1]}"
    path = Path(folder) / "flops.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    try:
        return int(known[key])
    except (KeyError, TypeError, ValueError):
        pass
    value = int(count(model, input_hw))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"flops.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**known, key: value}))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs time
    return value
