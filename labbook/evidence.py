"""Evidence for a lever, on every machine: what a step's own profiles show (kernels, GPU
utilization, idle gaps), and, where this machine lacks a GPU or TensorRT, the committed H100
evidence for that lever, labelled as such.

The H100 evidence lives in ``reports/reference/h100/`` (``REFERENCE``), each file with the command
that made it (``EVIDENCE.md`` there):

- ``pipeline_table.jsonl``: the application's configurations, each change alone on the baseline
  and all together (``benchmarks/pipeline_table.py``);
- ``detector_throughput.csv``: frames/s of the detector's forward pass alone, per variant and batch
  (``benchmarks/detector_throughput.py``);
- ``pipeline_batch4.nsys2025.3.sqlite``: an nsys export of the batch-4 GPU pipeline (queues, GPU
  preprocessing, FP32).
"""
from __future__ import annotations

import pandas as pd

import labkit

from labbook.display import report, warmup_batches
from labbook.reference import ledger
from labbook.settings import MODE, REFERENCE, ROOT
from labbook.text import say

H100_EXPORT = REFERENCE / "pipeline_batch4.nsys2025.3.sqlite"
DETECTOR_CSV = REFERENCE / "detector_throughput.csv"
CONFIGURATIONS = REFERENCE / "pipeline_table.jsonl"
H100_WARMUP = 2
"""Batches of the H100 export left out: batch 0 is warm-up, and batch 1, the first timed one, took
246 ms of one-off set-up against about 10 ms for each later batch."""
H100_COMMIT = "ebd5795"
"""The commit whose code made every committed H100 figure (``EVIDENCE.md``, "Provenance")."""
LABEL = f"H100 reference (code at {H100_COMMIT}, committed evidence, not this machine)"
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
                "cuGraphLaunch")
"""CUDA API calls that put work on the GPU: one per kernel when eager, one per graph when replayed."""


def _shown(path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def heading(what: str, path) -> object:
    """The label every piece of H100 evidence is shown under: the machine and its file."""
    how = REFERENCE / "EVIDENCE.md"
    where = f"`{_shown(path)}`" + ("" if path == how else f" (the command that made it is in `{_shown(how)}`)")
    return say(f"**{LABEL}**: {what}; see {where}.")


def h100_report():
    """The committed nsys export of the H100's batch-4 GPU pipeline (``labkit.Report``)."""
    return labkit.load_report(H100_EXPORT)


def infer_window(rep, *, warmup: int = 0) -> tuple[int, int, int]:
    """(start_ns, end_ns, batches) spanned by the ``infer`` ranges of batch ``warmup`` on."""
    nv = rep.nvtx
    inf = nv[(nv["name"] == "infer") & (nv["kind"] != "mark") & (nv["payload"].fillna(-1) >= warmup)]
    if len(inf) == 0:
        raise ValueError(f"the report has no 'infer' range from batch {warmup} on: profile a pipeline run "
                         f"with more frames, or a smaller warmup")
    return int(inf["start_ns"].min()), int(inf["end_ns"].max()), len(inf)


def gpu_evidence(reports: dict, *, warmup: int | dict = 0, min_gap_ms: float = 0.1) -> pd.DataFrame:
    """What the GPU did while the pipeline inferred, one row per labelled report.

    Args:
        reports: label -> ``labkit.Report`` (e.g. ``{"fp16": rep, "fp16_cuda_graphs": rep2}``).
        warmup: batches left out at the start (``lab.warmup_batches``); a dict gives each label its own.
        min_gap_ms: the shortest GPU idle gap counted.
    Returns: index label; columns ``batches``, ``kernels`` (kernel rows, a graph's nodes counted
    when traced with ``--cuda-graph-trace=node``), ``graph_launches`` (whole-graph rows),
    ``kernels_per_batch``, ``launch_calls_per_batch`` (CUDA API launches, :data:`LAUNCH_CALLS`),
    ``median_kernel_us``, ``gpu_busy_pct`` (``labkit.gpu_utilization`` over the window),
    ``idle_gaps`` and ``idle_ms`` (``labkit.gpu_idle_gaps`` of at least ``min_gap_ms`` inside
    it), ``window_ms`` (first to last ``infer`` range).
    """
    rows = {}
    for label, rep in reports.items():
        t0, t1, n = infer_window(rep, warmup=warmup[label] if isinstance(warmup, dict) else warmup)
        ops = rep.gpu_ops()
        ops = ops[(ops["start_ns"] >= t0) & (ops["end_ns"] <= t1)]
        kern = ops[ops["category"] == "kernel"]
        api = rep.cuda_api
        launches = api[api["name"].isin(LAUNCH_CALLS) & (api["start_ns"] >= t0) & (api["start_ns"] <= t1)]
        util = labkit.gpu_utilization(rep, bin_ms=max((t1 - t0) / 1e6, 1e-3), window=(t0, t1))
        gaps = labkit.gpu_idle_gaps(rep, min_gap_ms=min_gap_ms)
        gaps = gaps[(gaps["start_ns"] >= t0) & (gaps["end_ns"] <= t1)]
        rows[label] = {"batches": n, "kernels": len(kern), "graph_launches": int((ops["category"] == "graph").sum()),
                       "kernels_per_batch": len(kern) / n, "launch_calls_per_batch": len(launches) / n,
                       "median_kernel_us": kern["duration_ns"].median() / 1e3 if len(kern) else float("nan"),
                       "gpu_busy_pct": 100 * util["busy_ns"].sum() / max(t1 - t0, 1),
                       "idle_gaps": len(gaps), "idle_ms": gaps["duration_ns"].sum() / 1e6, "window_ms": (t1 - t0) / 1e6}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("report")


def tf32_share(rep) -> dict:
    """How much of a report's convolution kernel time ran as TF32 (cuDNN/CUTLASS kernel names
    with ``tf32``, e.g. ``sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32``).

    Returns: ``conv_ms`` (kernels named ``fprop``/``conv``/``implicit_gemm``), ``tf32_ms`` (those
    naming tf32), ``tf32_pct``, ``example`` (the longest-running TF32 kernel name, '' if none).
    """
    k = labkit.kernel_summary(rep)
    name = k["name"].str.lower()
    conv = k[name.str.contains("fprop|conv|implicit_gemm")]
    tf = conv[conv["name"].str.lower().str.contains("tf32")]
    conv_ms, tf_ms = conv["total_ns"].sum() / 1e6, tf["total_ns"].sum() / 1e6
    return {"conv_ms": conv_ms, "tf32_ms": tf_ms, "tf32_pct": 100 * tf_ms / conv_ms if conv_ms else 0.0,
            "example": str(tf.sort_values("total_ns").iloc[-1]["name"]) if len(tf) else ""}


def detector_throughput() -> pd.DataFrame:
    """The H100's detector forward-pass throughput: index config, one column per batch size
    (frames/s); a config's points whose ``status`` is not ok get a ``*`` column ``suspect`` naming them."""
    df = pd.read_csv(DETECTOR_CSV)
    out = df.pivot(index="config", columns="batch_size", values="frames_per_s").reindex(df["config"].unique())
    out.columns = [f"batch {b}" for b in out.columns]
    bad = df[df["status"] != "ok"].groupby("config")["batch_size"].apply(lambda b: ", ".join(map(str, b)))
    out["suspect batches"] = bad.reindex(out.index).fillna("")
    return out


def variant_gain(variant: str, base: str) -> pd.DataFrame:
    """Speed-up of one detector config over another on the H100, per batch size (frames/s
    ratio, from :func:`detector_throughput`): index batch, columns ``<base>``, ``<variant>``
    (frames/s) and ``gain``."""
    t = detector_throughput()
    for c in (variant, base):
        if c not in t.index:
            raise ValueError(f"no detector config {c!r} in {_shown(DETECTOR_CSV)}; configs: {list(t.index)}")
    cols = [c for c in t.columns if c.startswith("batch ")]
    out = pd.DataFrame({base: t.loc[base, cols].astype(float), variant: t.loc[variant, cols].astype(float)})
    out["gain"] = out[variant] / out[base]
    return out.rename_axis("batch")


def configurations(steps) -> object:
    """The H100 configuration table (``pipeline_table.jsonl``: each change alone on the baseline)
    restricted to ``steps`` (the baseline always kept): a ``labkit`` speed-up table, or a sentence."""
    if not CONFIGURATIONS.exists():
        return say(f"No H100 configurations: `{_shown(CONFIGURATIONS)}` is not in this checkout.")
    df = labkit.Ledger(CONFIGURATIONS).read()
    keep = ["baseline", *[s for s in steps if s != "baseline"]]
    caveat = above_decoding(df, keep)
    if caveat:
        from IPython.display import display

        display(say(caveat))
    return labkit.speedup_table(df[df["step"].isin(keep)])


def above_decoding(df, steps) -> str:
    """The caveat of the configuration rows among ``steps`` whose fps is no speed-up to quote: faster
    than the same machine decoded the clip alone with the same decoder (its ``decode_only`` row of the
    same stream count and queues), or a run whose queues hold more than ``THROUGHPUT_RULE`` of its
    frames (Little's law: the frames queued before the clock started count in its rate). '' when none."""
    from source_code.results import THROUGHPUT_RULE

    from labbook.latency import frames_held

    if "fps" not in df or "step" not in df:
        return ""
    cmd = df["command"] if "command" in df else pd.Series([[]] * len(df), index=df.index)
    df = df.assign(n_streams=df["config.streams"].fillna(1).astype(int) if "config.streams" in df else 1,
                   queued=[("--queues" in c) if isinstance(c, list) else False for c in cmd],
                   batch=[int(c[c.index("--batch-size") + 1]) if isinstance(c, list) and "--batch-size" in c else 1
                          for c in cmd])
    dec = df[df["step"].str.startswith("decode_only")]
    out = []
    for r in df[df["step"].isin(steps)].itertuples():
        mine = dec[(dec["n_streams"] == r.n_streams) & (dec["queued"] == r.queued)]
        frames = getattr(r, "frames", 0)
        frames = int(frames) if frames == frames and frames else 0  # NaN or absent: unknown
        held = frames_held(r.batch, None, r.n_streams) if r.queued else 0
        if len(mine) and r.fps > mine["fps"].min():
            d = mine.loc[mine["fps"].idxmin()]
            out.append(f"`{r.step}` reads {r.fps:.1f} frames/s, above the {d['fps']:.1f} frames/s at which the same "
                       f"machine decoded the clip alone with the same decoder (`{d['step']}`)")
        elif frames and held > THROUGHPUT_RULE * frames:
            out.append(f"`{r.step}` ran {frames} frames while its queues hold up to {held} at batch {r.batch}, over "
                       f"{THROUGHPUT_RULE:.0%} of them")
    if not out:
        return ""
    return ("**Caveat:** " + "; ".join(out) + ". Such a row is no speed-up to quote: frames decoded and queued before "
            "its clock started count in its rate (Little's law). It was recorded before the lab checked every run "
            "against its decode-only ceiling and its queues.")


def _ran(step: str) -> bool:
    rows = ledger([step])
    return len(rows) > 0 and rows.iloc[-1].get("status") in ("ok", None) and isinstance(rows.iloc[-1].get("paths.profile"), str)


def _show_heading(what: str, path) -> None:
    from IPython.display import display

    display(heading(what, path))


def gpu_report(step: str, mode: str = MODE):
    """(report, warm-up batches) of ``step``'s profiled run when it ran here on a GPU; else,
    labelled as such, the committed H100 export of the batch-4 GPU pipeline (FP32, eager)."""
    if _ran(step):
        rep = report(step)
        if rep.has_cuda:
            return rep, warmup_batches(step, mode)
    _show_heading(f"`{step}` did not run on a GPU here; the H100's batch-4 GPU pipeline (FP32, eager) instead",
                  H100_EXPORT)
    return h100_report(), H100_WARMUP


def graph_evidence(steps, mode: str = MODE) -> pd.DataFrame:
    """:func:`gpu_evidence` of ``steps`` (e.g. eager and CUDA graphs, at batch 1 and the lab's
    batch) when all ran here on a GPU; else, labelled as such, the H100 export's."""
    if all(_ran(s) for s in steps):
        reps = {s: report(s) for s in steps}
        if all(r.has_cuda for r in reps.values()):
            return gpu_evidence(reps, warmup={s: warmup_batches(s, mode) for s in steps})
    _show_heading("these steps did not all run on a GPU here; the H100's batch-4 GPU pipeline (FP32, eager, "
                  "no CUDA graphs) instead", H100_EXPORT)
    return gpu_evidence({"H100 eager, batch 4": h100_report()}, warmup=H100_WARMUP)


def lever(outcome, here, h100, what: str, path=CONFIGURATIONS):
    """``here()`` when the step of ``outcome`` ran on this machine; otherwise ``h100()``, the
    committed H100 evidence for that lever, shown under its label (``what``, from ``path``)."""
    if getattr(outcome, "status", None) == "ok":
        return here()
    _show_heading(what, path)
    return h100()
