"""What the notebooks show of a step: its report, kernels, copies and ranges, comparisons, and
the columns worth showing; a sentence (``say``) where there is nothing to show, and why.

The report analyses are called as ``Report`` methods here, each once (``stage_overlap``,
``steady_window``, ``kernel_summary``, ``copy_table``, ``nvtx_summary``).
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import labkit
from labkit.bench.tables import compare as compare_rows
from labkit.show.text import bottleneck_lines

from labbook.app import device_kind, device_of
from labbook.outcome import Outcome
from labbook.reference import ledger
from labbook.settings import LEDGER, MODE, STAGES, settings
from labbook.text import folded, say


def _row_of(x) -> dict:
    """The figures of an Outcome, a ``labkit.bench.Result`` or a step name's latest ledger row."""
    if isinstance(x, Outcome):
        return x.row()
    if not isinstance(x, str):  # a bench Result (run_parallel's, say)
        return Outcome(x.step, "ok", result=x).row()
    rows = ledger([x])
    if len(rows) == 0:
        return {"step": x, "status": "skipped", "reason": f"it has no row in {LEDGER} yet (run its notebook first)"}
    return rows.iloc[-1].to_dict()


def compare(new, old):
    """One sentence: throughput of ``new`` against ``old`` (each an Outcome or a step name),
    ``labkit.bench.tables.compare``."""
    return say(compare_rows(_row_of(new), _row_of(old)))


def report(x):
    """The Nsight Systems report of a step's profiled run: ``x`` is an Outcome, a step name (its
    latest ledger row) or anything with a ``profile`` path. None for a skipped step; a failed
    step, or one without a profile, raises ValueError naming it."""
    if isinstance(x, Outcome) and x.status == "skipped":
        return None
    if isinstance(x, Outcome) and x.status == "failed":
        raise ValueError(f"{x}. It has no profile to analyse: fix the error and run that step again.")
    path = getattr(x, "profile", None)
    if isinstance(x, str):
        row = _row_of(x)
        if row.get("status") in ("skipped", "failed"):
            return report(Outcome(x, row["status"], str(row.get("reason"))))
        path = row.get("paths.profile")
        if not isinstance(path, str):
            raise ValueError(f"no profiled '{x}' row in {LEDGER}: run that step first")
    if path is None:
        return None
    rep = labkit.load_report(path)
    config = row_config(_row_of(x)) if isinstance(x, str) else getattr(x, "config", {})
    why = no_gpu_activity(rep, config)
    if why:
        warnings.warn(why, NoGpuActivityWarning, stacklevel=2)
    return rep


class NoGpuActivityWarning(UserWarning):
    """A GPU run's report holds no GPU activity: the nsys that recorded it is likely too old for the driver."""


def row_config(row: dict) -> dict:
    """The ``config`` of a flattened ledger row (``config.device`` -> ``device``)."""
    return {k.split(".", 1)[1]: v for k, v in row.items() if k.startswith("config.") and v == v}  # NaN: unset


def no_gpu_activity(rep, config: dict) -> str | None:
    """One line when a run on a CUDA device (``config``'s ``device``, ``auto`` resolved here) left a
    report with no kernels, copies, memsets or graphs, naming the likely cause and the fix; else None."""
    if not config:  # nothing says where it ran
        return None
    if device_kind(config) != "cuda" or len(rep.gpu_ops()):
        return None
    what = "only CUDA API calls" if rep.has_cuda else "no CUDA activity at all"
    return (f"{rep.path.name}: a {device_of(config)} run, but its report holds {what}: the nsys that recorded it "
            f"({rep.nsys_version or 'unknown version'}) is likely too old for the GPU driver (nsys 2022.4 records no "
            "CUDA on a CUDA 13 driver); profile with the CUDA toolkit's nsys (python -m labkit doctor --probe checks it)")


def _report_or_why(x):
    """The step's report, or a sentence saying why there is none (skipped, failed, not profiled)."""
    rep = report(x) if not (isinstance(x, Outcome) and x.status != "ok") else None
    return rep if rep is not None else say(f"No profile: {x}")


def gui_question(x, question: str, mode: str = MODE):
    """A question to answer in the Nsight Systems GUI on a step's own report (``x``: an Outcome or a
    step name): one line with the command that opens the report in the GUI in a browser tab
    (``make nsys-ui``, notebook 01) and the question; under a fold, what labkit reads from the same
    report (the limiter, the runner-up and the window of ``labkit.bottleneck``), to check the answer
    against. A sentence instead where the step has no report."""
    try:
        rep = _report_or_why(x)
    except ValueError as e:
        return say(f"No report to open in the GUI: {e}.")
    if not isinstance(rep, labkit.Report):
        return rep
    gui = Path(rep.path).with_suffix(".nsys-rep")
    opener = (f"in a terminal, `make nsys-ui REPORT={gui} PORT=6080`, then the URL it prints." if gui.exists() else
              f"this report has no `.nsys-rep` beside it (`{Path(rep.path).name}`: a recording keeps its export), "
              "so open one of your own runs with `make nsys-ui REPORT=...`.")
    b = labkit.bottleneck(rep, warmup=warmup_batches(x, mode))
    answer = "; ".join(line for line in bottleneck_lines(b, [], explain=False) if not line.startswith("note:"))
    return folded(f"**In the GUI**: {question} Open the report: {opener}",
                  f"What labkit reads from the same report (`labkit.bottleneck`): {answer}.",
                  summary="Check your answer (from this report)")


def kernels(x, n: int = 10):
    """The ``n`` GPU kernels with the most total time in a step's profile, or a sentence."""
    rep = _report_or_why(x)
    if not isinstance(rep, labkit.Report):
        return rep
    k = labkit.kernel_summary(rep)
    return k.head(n) if len(k) else say("No GPU kernels in this profile: the run used the CPU only.")


def copies(x, mode: str = MODE):
    """Host-device memory copies of a step's profiled run after warm-up, per direction and kind
    of host memory (``Report.copy_table``: copies, MB, KB per copy, ms), or a sentence. A copy
    from pageable host memory makes the calling thread wait (``Report.pageable_copies``)."""
    rep = _report_or_why(x)
    if not isinstance(rep, labkit.Report):
        return rep
    out = labkit.copy_table(rep, warmup=warmup_batches(x, mode))
    return out.round(3) if len(out) else say("No host-device copies after warm-up in this profile: "
                                             "the run used the CPU only.")


def ranges(x, names):
    """NVTX summary rows (name, instances, total_ns, avg_ns) of the range ``names`` in a step's
    profile, or a sentence when the step did not run."""
    rep = _report_or_why(x)
    if not isinstance(rep, labkit.Report):
        return rep
    s = labkit.nvtx_summary(rep)
    return s[s["name"].isin(list(names))][["name", "instances", "total_ns", "avg_ns"]].reset_index(drop=True)


def overlap(rep, *, warmup: int = 0) -> dict:
    """How much the pipeline's stages ran at the same time (``Report.stage_overlap`` over the
    six stages), batches below ``warmup`` left out."""
    return labkit.stage_overlap(rep, STAGES, warmup=warmup)


def window(rep, *, warmup: int = 0, count: int = 3, stage: str = "infer") -> tuple[int, int]:
    """A timeline window ``count`` batches wide in steady state (``Report.steady_window``)."""
    return labkit.steady_window(rep, stage=stage, warmup=warmup, count=count)


def warmup_batches(x, mode: str = MODE) -> int:
    """Batches at the start of a step's runs that were warm-up (left out of analyses); ``x``
    is an Outcome, a step name (its latest ledger row), or anything with a ``config``."""
    if isinstance(x, str):
        row = _row_of(x)
        batch, warm = row.get("config.batch_size", 1), row.get("config.warmup")
    else:
        config = getattr(x, "config", {}) or {}
        batch, warm = config.get("batch_size", 1), config.get("warmup")
    batch = int(batch) if batch == batch and batch else 1
    warm = int(warm) if warm == warm and warm is not None else settings(mode).warmup  # the run's own, else its mode's
    return math.ceil(warm / batch)


def best(frame, option: str, metric: str = "fps"):
    """The value of ``option`` with the highest ``metric`` in a sweep or ledger frame."""
    f = frame.dropna(subset=[metric])
    if len(f) == 0:
        raise ValueError(f"no row has a {metric!r} value")
    return f.loc[f[metric].idxmax(), option]


def tied(frame, option: str) -> list:
    """The values of ``option`` whose frames/s are within noise of the best's: their 95 % intervals
    (``fps_ci_low``/``fps_ci_high``) overlap the best row's. Only the best where rows have no interval."""
    f = frame.dropna(subset=["fps"])
    if len(f) == 0:
        raise ValueError("no row has a 'fps' value")
    top = f.loc[f["fps"].idxmax()]
    if not {"fps_ci_low", "fps_ci_high"} <= set(f.columns) or not top["fps_ci_low"] == top["fps_ci_low"]:
        return [top[option]]
    lo, hi = f["fps_ci_low"].fillna(f["fps"]), f["fps_ci_high"].fillna(f["fps"])
    return list(f.loc[(hi >= top["fps_ci_low"]) & (lo <= top["fps_ci_high"]), option])


def table_columns(frame, *extra: str):
    """The columns of a ledger or sweep frame worth showing: step, fps, latency, accuracy, and
    why a step did not run (``status``, ``reason``, a sweep's ``error``) where one did not."""
    # fps with its 95 % interval; the spread of repeats only where there were repeats to spread
    spread = ["spread"] if "spread" in frame.columns and frame["spread"].notna().any() else []
    cols = ["step", *extra, "fps", "fps_ci_low", "fps_ci_high", *spread, "latency_p50_ms", "latency_p99_ms", "map50",
            "mota"]
    for why in ("error", "reason"):
        if why in frame.columns and frame[why].notna().any():
            cols += ["status", why] if why == "reason" else [why]
    return frame[[c for c in dict.fromkeys(cols) if c in frame.columns]]


def jumps(table):
    """Speed-up of each step over the step it builds on, on this machine (the table's first
    column), largest first; steps whose base is unknown or did not run are left out."""
    col = table.over_builds_on.columns[0] if len(table.over_builds_on.columns) else None
    if col is None:
        raise ValueError("the table has no builds_on column: its rows do not say what each step builds on")
    return table.over_builds_on[col].dropna().sort_values(ascending=False)
