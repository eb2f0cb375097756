"""A recorded lab's folder read as it is (``reports/reference/<machine>``): its ledger, its rows by step,
its mode, the recording machine's platform and the exports it kept. Below the lab's settings, which
ask it for the recording's platform when replaying (``labbook.replay`` replays the steps)."""
from __future__ import annotations

import functools
import json
from pathlib import Path


LEDGER_NAMES = ("ledger.jsonl", "ledger.reference.jsonl")
"""A recording's ledger: a GPU folder's name, or a CPU folder's (named apart: reports/reference/README.md)."""


class ReplayError(ValueError):
    """The folder named to replay holds no recorded ledger."""


def recording_ledger(folder: Path) -> Path:
    """The ledger file of the recording in ``folder``.

    Raises:
        ReplayError: ``folder`` has none of :data:`LEDGER_NAMES` (one line naming the fix).
    """
    for name in LEDGER_NAMES:
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    raise ReplayError(f"{folder} holds no recorded ledger ({' or '.join(LEDGER_NAMES)}): "
                      "name a folder under reports/reference/ that has one")


@functools.lru_cache(maxsize=4)
def recorded_rows(folder: Path) -> dict[str, dict]:
    """step -> its latest recorded row (the raw ledger record) in ``folder``'s recording."""
    rows: dict[str, dict] = {}
    for line in recording_ledger(folder).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["step"]] = row
    return rows


def recorded_mode(folder: Path) -> str:
    """The mode the recording ran in (its rows' ``provenance.mode``): ``record``, ``full`` or ``small``."""
    modes = [(r.get("provenance") or {}).get("mode") for r in recorded_rows(Path(folder)).values()]
    modes = [m for m in modes if m]
    if not modes:
        raise ReplayError(f"{recording_ledger(folder)}: no row says its mode (provenance.mode)")
    return max(set(modes), key=modes.count)


def recorded_env(folder: Path) -> dict:
    """The recording machine's ``env`` (gpu, cpu, cpu_count, torch, ...), from its first row with one."""
    return next((dict(r["env"]) for r in recorded_rows(Path(folder)).values() if r.get("env")), {})


def recorded_gpu(folder: Path | None) -> str | None:
    """The recording machine's GPU name, or None where it had none."""
    gpu = recorded_env(folder).get("gpu") if folder else None
    return gpu if isinstance(gpu, str) and gpu else None


def profile_of(folder: Path, step: str) -> Path | None:
    """The recording's export of ``step``'s profiled run (``<step>.sqlite``, as save_reference
    keeps them), or None where it kept none."""
    path = Path(folder) / f"{step}.sqlite"
    return path if path.is_file() else None


def recorded_backends(folder: Path, combos) -> list[dict]:
    """What the recording machine could run, for each of ``combos`` (rows of backend, precision,
    device, variant, as this machine's list has them): available where a recorded step with that
    combination ran, not where one was skipped or failed (with its recorded reason), unknown (None)
    where none tried it. A step's device unset is the recording's own (``cuda`` where it had a GPU); its
    variant is the one of the list's variants (each a flag: ``channels_last``, ...) that it set."""
    combos = list(combos)
    variants = list(dict.fromkeys(c["variant"] for c in combos if c["variant"]))
    own = "cuda" if recorded_gpu(folder) else "cpu"
    seen: dict[tuple, tuple] = {}
    for name, row in recorded_rows(Path(folder)).items():
        c = row.get("config") or {}
        if not c or c.get("decode_only"):
            continue
        variant = next((v for v in reversed(variants) if c.get(v)), "")
        key = (c.get("backend") or "torch", c.get("precision") or "fp32", c.get("device") or own, variant)
        ok = row.get("status", "ok") == "ok"
        if key not in seen or (ok and not seen[key][0]):  # the first step that ran it names it
            seen[key] = (True, f"ran in the recording `{Path(folder).name}` (`{name}`)") if ok else \
                (False, str(row.get("reason", "")))
    out = []
    for combo in combos:
        key = (combo["backend"], combo["precision"], combo["device"], combo["variant"])
        available, reason = seen.get(key, (None, f"not tried in the recording `{Path(folder).name}`"))
        out.append({**combo, "available": available, "reason": reason})
    return out
