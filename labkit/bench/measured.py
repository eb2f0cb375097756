"""The measured runs behind two profiled reports: the ledger rows (``labkit.bench``) whose profile is the
report (or whose step is named as the report), so :func:`labkit.compare`'s headline gives the measured
speed-up where a ledger has one, and says it is the profiled wall time where none has."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Measured", "measured_speedup", "ledger_files"]


@dataclass(frozen=True)
class Measured:
    """The measured speed-up of B over A (``fps_b / fps_a``), its 95 % interval where both rows have
    one (``fps_ci_low``/``fps_ci_high``), the two rows' steps, their machine and the ledger."""

    speedup: float
    interval: tuple[float, float] | None
    fps_a: float
    fps_b: float
    step_a: str
    step_b: str
    machine: str
    ledger: str


def _stem(path) -> str:
    name = Path(str(path)).name
    for suffix in (".nsys-rep", ".qdrep", ".sqlite"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def ledger_files(report) -> list[Path]:
    """The ledgers a report may have been measured into: ``ledger*.jsonl`` in its folder and the two
    above it (``reports/profiles/x.nsys-rep`` sits two below ``reports/ledger.jsonl``)."""
    here = Path(str(report)).resolve().parent
    out: list[Path] = []
    for d in [here, *list(here.parents)[:2]]:
        out += sorted(p for p in d.glob("ledger*.jsonl") if p.is_file())
    return list(dict.fromkeys(out))


def _row_for(report, rows: list[dict]) -> dict | None:
    """The latest usable row measured with this report's profile, else the latest of the step the
    report is named after (a reference copy such as ``baseline.sqlite``)."""
    stem = _stem(report)
    ok = [r for r in rows if r.get("status") in (None, "ok") and _fps(r) is not None]
    by_profile = [r for r in ok if (r.get("paths") or {}).get("profile")
                  and _stem((r.get("paths") or {})["profile"]) == stem]
    by_step = [r for r in ok if r.get("step") == stem]
    found = by_profile or by_step
    return found[-1] if found else None


def _fps(row: dict) -> float | None:
    v = (row.get("metrics") or {}).get("fps")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def measured_speedup(report_a, report_b) -> Measured | None:
    """The measured speed-up of ``report_b``'s run over ``report_a``'s from one ledger beside them
    (both rows in one ledger, on one machine), or None where no ledger has both."""
    from labkit.bench.ledger import Ledger, LedgerWarning, machine_label  # noqa: F401 - one room

    for f in list(dict.fromkeys(ledger_files(report_a) + ledger_files(report_b))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LedgerWarning)  # a corrupt line is the table's to report
            try:
                rows = Ledger(f).rows()
            except Exception:  # noqa: BLE001 - a ledger that cannot be read measures nothing here
                continue
        a, b = _row_for(report_a, rows), _row_for(report_b, rows)
        if a is None or b is None or a is b:
            continue
        machine = machine_label(a.get("env"))
        if machine != machine_label(b.get("env")):
            continue
        fa, fb = _fps(a), _fps(b)
        ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
        bounds = [ma.get("fps_ci_low"), ma.get("fps_ci_high"), mb.get("fps_ci_low"), mb.get("fps_ci_high")]
        iv = None
        if all(isinstance(x, (int, float)) and x > 0 for x in bounds):
            iv = (bounds[2] / bounds[1], bounds[3] / bounds[0])
        return Measured(fb / fa, iv, fa, fb, str(a["step"]), str(b["step"]), machine, str(f))
    return None
