"""The lab's small helper module, imported by every notebook as ``import lab``.

The notebooks run with ``notebooks/`` as their working folder, so this file is importable as
``lab``. It holds what every notebook needs and no lesson: the run settings of each mode,
the sample video, the application's command line, one call to benchmark-and-profile a step
(``run_step``, a thin layer over ``labkit.bench.run``), and the ledger and reference results.

Locations: ``LABKIT_MODE`` (``small`` or ``full``, default ``full``) picks the settings;
``LABKIT_REPORTS`` (default ``<project>/reports``) is where profiles, results and the ledger go.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from labkit.env import reports_dir

MODES = ("small", "full")
MODE = os.environ.get("LABKIT_MODE", "full").strip().lower() or "full"
if MODE not in MODES:
    raise ValueError(f"LABKIT_MODE={MODE!r}: use 'small' (a few minutes) or 'full'")

ROOT = Path(__file__).resolve().parents[1]
REPORTS = reports_dir(ROOT / "reports").resolve()
LEDGER = REPORTS / "ledger.jsonl"
PROFILES = REPORTS / "profiles"
RESULTS = REPORTS / "results"
REFERENCE = ROOT / "reports" / "reference" / "h100"
APP = ROOT / "source_code" / "detect_video.py"
DATA = ROOT / "data"
STAGES = ("decode", "preprocess", "infer", "postprocess", "track", "display")
"""The application's stage names (its NVTX ranges), in pipeline order."""
APP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
"""Environment of every application run (besides ``LABKIT_REPORTS``). With OpenMP's default
(active) waiting, PyTorch's CPU threads spin between parallel regions; where the cores are
shared (other processes, or the pipeline's own threads), inference called from the main thread
was measured many times slower than the same call from another thread, which would distort
every comparison with the synchronous baseline. Passive waiting removes that difference."""


@dataclass(frozen=True)
class Settings:
    """How big each run is in one mode; the notebooks read these, never literal numbers."""

    video_seconds: float
    video_size: tuple[int, int]  # width, height
    seed: int  # scene seed of the sample video (held out from training and calibration)
    frames: int  # frames processed per run (per stream)
    warmup: int  # frames left out of the timing at the start of each run
    repeats: int  # measured runs per step (the profiled run comes on top)
    input_hw: str | None  # network input size; None: the detector's default
    batch_sizes: tuple[int, ...]  # batch sizes swept besides 1 (the step before) and `batch`
    batch: int  # batch size profiled, and the one the later steps build on
    streams: tuple[int, ...]  # stream counts swept besides 1
    intervals: tuple[int, ...]  # detector intervals swept besides 1 and `interval`
    interval: int  # detector interval profiled in notebook 06


SETTINGS = {
    "small": Settings(video_seconds=2.0, video_size=(640, 360), seed=11, frames=24, warmup=4, repeats=1,
                      input_hw="192x320", batch_sizes=(2,), batch=4, streams=(2,), intervals=(2,), interval=4),
    "full-cpu": Settings(video_seconds=10.0, video_size=(1280, 720), seed=11, frames=128, warmup=16, repeats=3,
                         input_hw=None, batch_sizes=(2, 8), batch=4, streams=(2,), intervals=(2, 5), interval=3),
    # GPU runs are short and start-up dominates (a new process each); 2 repeats keep the lab short
    # (the full GPU lab has not been timed end to end yet: see reports/reference/README.md).
    # batch 32: the batch of the H100 configuration that reached 21.5x (benchmarks/pipeline_table.py)
    "full-gpu": Settings(video_seconds=20.0, video_size=(1280, 720), seed=11, frames=600, warmup=40, repeats=2,
                         input_hw=None, batch_sizes=(4, 8, 16), batch=32, streams=(2, 4), intervals=(2, 5), interval=3),
}


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when torch can use a CUDA GPU here."""
    import torch

    return bool(torch.cuda.is_available())


def settings(mode: str = MODE, gpu: bool | None = None) -> Settings:
    """The settings of ``mode`` (``small`` is the same everywhere; ``full`` depends on the GPU)."""
    if mode == "small":
        return SETTINGS["small"]
    return SETTINGS["full-gpu" if (gpu_available() if gpu is None else gpu) else "full-cpu"]


# ----------------------------------------------------------------------------- the video
def sample_video(mode: str = MODE, *, folder: Path = DATA) -> Path:
    """The lab's sample clip (written on first use with the scene generator, then reused).

    Returns the ``.mp4``; its ground truth ``<stem>.gt.csv`` lies beside it.
    """
    from source_code.scenes import SceneConfig, gt_path_for, make_video

    s = settings(mode)
    w, h = s.video_size
    video = Path(folder) / ("sample.mp4" if mode == "full" else f"sample_{mode}.mp4")
    if video.exists() and gt_path_for(video).exists():
        return video
    video.parent.mkdir(parents=True, exist_ok=True)
    make_video(video, seconds=s.video_seconds, config=SceneConfig(seed=s.seed, width=w, height=h))
    return video


def video_info(video: Path) -> dict:
    """Frame count, frames per second and size of a video, as OpenCV reads them."""
    import cv2

    cap = cv2.VideoCapture(str(video))
    try:
        return {"frames": int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), "fps": float(cap.get(cv2.CAP_PROP_FPS)),
                "width": int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), "height": int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))}
    finally:
        cap.release()


def ground_truth(video: Path) -> dict:
    """``{frame: array (K, 6) [x1, y1, x2, y2, class_id, track_id]}`` of a generated clip."""
    from source_code.scenes import gt_path_for, read_gt

    return read_gt(gt_path_for(video))


def show_frame(video: Path, index: int = 0):
    """One frame of ``video`` with its ground-truth boxes drawn (a matplotlib Figure)."""
    import cv2
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from source_code.scenes import CLASS_NAMES

    cap = cv2.VideoCapture(str(video))
    cap.set(cv2.CAP_PROP_POS_FRAMES, index)
    ok, frame = cap.read()
    cap.release()
    if not ok:
        raise ValueError(f"{video} has no frame {index}")
    fig = Figure(figsize=(9, 9 * frame.shape[0] / frame.shape[1]), layout="constrained")
    ax = fig.subplots()
    ax.imshow(frame[:, :, ::-1])
    colors = ("tab:orange", "tab:cyan")
    for x1, y1, x2, y2, cls, tid in ground_truth(video).get(index, []):
        ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, lw=1.5, color=colors[int(cls) % 2]))
        ax.text(x1, y1 - 2, f"{int(tid)} {CLASS_NAMES[int(cls)]}", color=colors[int(cls) % 2], fontsize=7)
    ax.set_axis_off()
    ax.set_title(f"{Path(video).name}, frame {index}: ground truth", fontsize=9)
    return fig


# ----------------------------------------------------------------------------- the application
def app_command(*, video: Path | None = None, mode: str = MODE, **flags) -> list[str]:
    """The application's argv for this mode with ``flags`` set.

    Flags are ``detect_video.py`` options in snake case: ``batch_size=4`` -> ``--batch-size 4``,
    ``queues=True`` -> ``--queues``, ``osd=False`` -> ``--no-osd``; ``None``/``False`` leave an
    option out. ``--warmup`` is left to ``labkit.bench`` (it adds the mode's value).
    """
    s = settings(mode)
    cmd = [sys.executable, str(APP), "--input", str(video or sample_video(mode)), "--frames", str(s.frames)]
    if s.input_hw and "input_hw" not in flags:
        cmd += ["--input-hw", s.input_hw]
    from source_code.detect_video import flag_args

    return cmd + flag_args(flags)


@functools.lru_cache(maxsize=1)
def _backends() -> tuple:
    from source_code.backends import available_backends

    return tuple(available_backends())


def backends():
    """What this machine can run: backend, precision, device, variant, available, reason."""
    import pandas as pd

    return pd.DataFrame(list(_backends()))


def device_of(flags: dict) -> str:
    """The device a run with these flags uses (``auto`` resolved as the application does)."""
    dev = flags.get("device", "auto")
    return ("cuda" if gpu_available() else "cpu") if dev == "auto" else dev


def unavailable(**flags) -> str:
    """Why a run with these flags cannot run here ('' when it can)."""
    device = device_of(flags)
    if device == "cuda" and not gpu_available():
        return "it needs a CUDA GPU and this machine has none"
    if flags.get("gpu_preprocess") and device != "cuda":
        return "--gpu-preprocess needs a CUDA GPU"
    backend, precision = flags.get("backend", "torch"), flags.get("precision", "fp32")
    variants = [v for v in ("channels_last", "cuda_graphs", "compile") if flags.get(v)] or [""]
    rows = {(r["backend"], r["precision"], r["device"], r["variant"]): r for r in _backends()}
    for variant in variants:
        row = rows.get((backend, precision, device, variant))
        if row is None:
            return f"{backend} {precision} {variant} is not offered on {device}".replace("  ", " ")
        if not row["available"]:
            return row["reason"]
    return ""


@dataclass(frozen=True)
class Skipped:
    """A step that could not run on this machine; shows itself as a plain sentence."""

    step: str
    reason: str
    ok = False
    fps = math.nan
    profile = None

    def __str__(self) -> str:
        where = " (see the reference results below)" if (REFERENCE / "ledger.jsonl").exists() else ""
        return f"Step '{self.step}' was not run here: {self.reason}{where}."

    def _repr_markdown_(self) -> str:
        return f"**Not run here.** {self}"


@dataclass(frozen=True)
class Failed(Skipped):
    """A step whose run failed here (the application's error line in ``reason``). The notebook
    goes on, as after a Skipped; ``scripts/run_lab.py`` lists every failure at the end and exits
    non-zero. With ``LABKIT_STRICT=1`` (the tests), the error is raised instead."""

    def __str__(self) -> str:
        return f"Step '{self.step}' {FAILED_MARK} {self.reason}"

    def _repr_markdown_(self) -> str:
        return f"**Failed.** {self}"


FAILED_MARK = "failed here:"
"""The words a failed step prints; ``scripts/run_lab.py`` finds failures by them."""


def _strict() -> bool:
    return os.environ.get("LABKIT_STRICT", "") not in ("", "0")


class Note(str):
    """A computed sentence that renders as markdown in a notebook."""

    def _repr_markdown_(self) -> str:
        return str(self)


def app_env() -> dict:
    """Environment variables set for each application run: ``APP_ENV`` and ``LABKIT_REPORTS``
    (where the application writes its output video)."""
    return {**APP_ENV, "LABKIT_REPORTS": str(REPORTS)}


@contextlib.contextmanager
def _quiet():
    """Silence two messages that say nothing here: tqdm's missing-widget warning (progress is off)
    and, on a machine without a GPU, the report loader's 'no CUDA tables'."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        if not gpu_available():
            warnings.filterwarnings("ignore", message=".*no CUDA tables.*")
        yield


def capture_range(flags: dict) -> str | None:
    """What nsys records of a step's profiled run: TensorRT steps from the application's
    cudaProfilerStart (its first frame) on, so that the engine build, with its thousands of
    tactic-timing kernels, stays out of the kernel tables (TensorRT's guide advises this);
    every other step the whole run, so that set-up such as ``torch_compile`` shows in it."""
    if flags.get("backend") == "tensorrt" and device_of(flags) == "cuda":
        return "cudaProfilerApi"
    return None


def run_step(step: str, *, profile: bool = True, mode: str = MODE, **flags):
    """Benchmark one lab step: a profiled run under nsys, then the mode's measured repeats.

    Appends a row to ``LEDGER`` and returns the ``labkit.bench.Result``; returns
    :class:`Skipped` (no run, no ledger row) when the flags need what this machine lacks, and
    :class:`Failed` (no ledger row) when the run fails, unless ``LABKIT_STRICT`` is set.
    """
    from labkit import bench

    reason = unavailable(**flags)
    if reason:
        return Skipped(step, reason)
    s = settings(mode)
    with _quiet():
        try:
            return bench.run(app_command(mode=mode, **flags), step=step, repeats=s.repeats, warmup=s.warmup,
                             profile=profile, ledger=LEDGER, results_dir=RESULTS, profile_dir=PROFILES,
                             env=app_env(), progress=False, capture_range=capture_range(flags))
        except bench.BenchError as e:
            if _strict():
                raise
            return Failed(step, bench.error_line(e))


def sweep(base: dict, option: str, values, *, step: str, mode: str = MODE):
    """``labkit.bench.sweep`` of one option over ``values`` on top of the flags ``base``
    (no profiles, one ledger row per value); returns its frame, or :class:`Skipped`. A value
    whose run fails is a row with its ``error`` (and a printed :class:`Failed` line), unless
    ``LABKIT_STRICT`` is set."""
    from labkit import bench

    reason = unavailable(**base)
    if reason:
        return Skipped(step, reason)
    s = settings(mode)
    with _quiet():
        swept = bench.sweep(app_command(mode=mode, **base), "--" + option.replace("_", "-"), list(values),
                            step=step, repeats=s.repeats, warmup=s.warmup, ledger=LEDGER, results_dir=RESULTS,
                            env=app_env(), progress=False, on_error="raise" if _strict() else "record")
    for _, row in swept[swept["error"].notna()].iterrows() if "error" in swept else ():
        print(Failed(row["step"], row["error"]))  # the words run_lab looks for
    return swept


def report(result):
    """The Nsight Systems report of a step's profiled run: ``result`` is a ``Result`` or a step
    name (its latest ledger row with a profile). None for a skipped step; a failed step raises
    ValueError naming it (a cell that needs its profile cannot go on)."""
    import warnings

    import labkit

    if isinstance(result, Failed):
        raise ValueError(f"{result}. It has no profile to analyse: fix the error and run that step again.")
    path = getattr(result, "profile", None)
    if isinstance(result, str):
        rows = ledger([result])
        paths = rows["paths.profile"].dropna() if "paths.profile" in rows.columns else []
        if len(paths) == 0:
            raise ValueError(f"no profiled '{result}' row in {LEDGER}: run that step first")
        path = paths.iloc[-1]
    if path is None:
        return None
    with warnings.catch_warnings():
        # a CPU-only run has no CUDA tables; the notebooks say so where it matters
        warnings.filterwarnings("ignore", message=".*no CUDA tables.*")
        warnings.filterwarnings("ignore", message=".*no GPU activity.*")
        return labkit.load_report(path)


def _report_or_note(result):
    """The step's report, or a Note saying why there is none (skipped, failed, not profiled)."""
    rep = None if isinstance(result, Skipped) else report(result)
    return rep if rep is not None else Note(f"No profile: {result}")


def kernels(result, n: int = 10):
    """The ``n`` GPU kernels with the most total time in a step's profile, or a Note saying
    why there are none."""
    rep = _report_or_note(result)
    if isinstance(rep, Note):
        return rep
    k = rep.kernel_summary()
    if len(k) == 0:
        return Note("No GPU kernels in this profile: the run used the CPU only.")
    return k.head(n)


def copies(result, mode: str = MODE):
    """Host-device memory copies of a step's profiled run after warm-up, per direction and kind
    of host memory (pinned or pageable): ``Report.copy_table`` (copies, MB, KB per copy, ms).
    A Note when there are none. A copy from pageable host memory makes the calling thread wait
    (``Report.pageable_copies`` lists those calls)."""
    rep = _report_or_note(result)
    if isinstance(rep, Note):
        return rep
    out = rep.copy_table(warmup=warmup_batches(result, mode))
    if len(out) == 0:
        return Note("No host-device copies after warm-up in this profile: the run used the CPU only.")
    return out.round(3)


def warmup_batches(result, mode: str = MODE) -> int:
    """Batches at the start of a step's runs that were warm-up (left out of analyses);
    ``result`` is a ``Result`` or a step name (its latest ledger row)."""
    if isinstance(result, str):
        rows = ledger([result])
        col = "config.batch_size"
        batch = rows[col].iloc[-1] if len(rows) and col in rows.columns else 1
    else:
        batch = getattr(result, "config", {}).get("batch_size", 1)
    batch = int(batch) if batch == batch and batch else 1
    return math.ceil(settings(mode).warmup / batch)


def ranges(result, names):
    """NVTX summary rows (name, instances, total_ns, avg_ns) of the range ``names`` in a step's
    profile, or a Note when the step did not run."""
    rep = _report_or_note(result)
    if isinstance(rep, Note):
        return rep
    s = rep.nvtx_summary()
    return s[s["name"].isin(list(names))][["name", "instances", "total_ns", "avg_ns"]].reset_index(drop=True)


def overlap(rep, *, warmup: int = 0) -> dict:
    """How much the pipeline's stages ran at the same time: ``rep.stage_overlap(STAGES)``
    (``labkit.analysis.stage_overlap``), batches below ``warmup`` left out."""
    from labkit.analysis import stage_overlap

    return stage_overlap(rep, STAGES, warmup=warmup)


def window(rep, *, warmup: int = 0, count: int = 3, stage: str = "infer") -> tuple[int, int]:
    """A timeline window ``count`` batches wide in steady state: ``rep.steady_window``
    (``labkit.analysis.steady_window``)."""
    from labkit.analysis import steady_window

    return steady_window(rep, stage=stage, warmup=warmup, count=count)


def _as_result(x):
    """A Result, a Skipped, or a step name looked up in the ledger (latest row)."""
    if not isinstance(x, str):
        return x
    rows = ledger([x])
    if len(rows) == 0 or "fps" not in rows.columns:
        return Skipped(x, f"it has no row in {LEDGER} yet (run its notebook first)")
    row = rows.iloc[-1]
    return SimpleNamespace(step=x, fps=float(row["fps"]), spread=float(row.get("spread", math.nan)),
                           metrics={"repeats": row.get("repeats", 1)},
                           ok=row.get("status", "ok") in ("ok", None) and row["fps"] == row["fps"])


def compare(new, old) -> Note:
    """One sentence: throughput of ``new`` against ``old`` (each a Result, Skipped or step name)."""
    new, old = _as_result(new), _as_result(old)
    if not getattr(new, "ok", False) or not getattr(old, "ok", False):
        bad = new if not getattr(new, "ok", False) else old
        return Note(f"No comparison: {bad}")
    ratio = new.fps / old.fps
    word = "the same" if round(ratio, 2) == 1 else "faster" if ratio > 1 else "slower"
    n = new.metrics.get("repeats", 1)
    n = int(n) if n == n and n is not None else 1
    spread = (f"run-to-run spread of '{new.step}' {new.spread:.0%} over {n} runs" if n > 1
              else "one measured run each, so no spread to judge the noise by")
    change = word if word == "the same" else f"{abs(ratio - 1):.0%} {word}"
    return Note(f"'{new.step}': {new.fps:.2f} frames/s against {old.fps:.2f} for '{old.step}': "
                f"{ratio:.2f}x ({change}); {spread}.")


def best(frame, option: str, metric: str = "fps"):
    """The value of ``option`` with the highest ``metric`` in a sweep or ledger frame."""
    f = frame.dropna(subset=[metric])
    if len(f) == 0:
        raise ValueError(f"no row has a {metric!r} value")
    return f.loc[f[metric].idxmax(), option]


# ----------------------------------------------------------------------------- ledger and tables
def ledger(steps=None):
    """This machine's ledger as a frame (``labkit.Ledger.read``), latest row per step, in
    ``steps`` order when given."""
    from labkit import Ledger
    from labkit.tables import latest_rows

    df = Ledger(LEDGER).read()
    if len(df) == 0:
        return df
    df = latest_rows(df)
    if steps is not None:
        steps = list(steps)
        df = df[df["step"].isin(steps)]
        df = df.iloc[sorted(range(len(df)), key=lambda i: steps.index(df["step"].iloc[i]))]
    return df.reset_index(drop=True)


def speedup(steps=None, *, reference: bool = False):
    """The relative speed-up table over 'baseline' from the ledger (``labkit.speedup_table``).

    ``steps`` keeps only those steps (in ledger order); ``reference`` adds the committed
    reference machine's columns when its ledger is present.
    """
    import pandas as pd

    import labkit
    from labkit import Ledger

    frames = [Ledger(LEDGER).read()]
    if reference and (REFERENCE / "ledger.jsonl").exists():
        frames.append(Ledger(REFERENCE / "ledger.jsonl").read())
    df = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else frames[0]
    if steps is not None and len(df):
        df = df[df["step"].isin(list(steps))]
    return labkit.speedup_table(df)


def reference_table():
    """The reference machine's own speed-up table, or a Note saying there is none yet."""
    import labkit

    path = REFERENCE / "ledger.jsonl"
    if not path.exists():
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        also = (" The reference machine's table of pipeline configurations is there, though: "
                "`lab.reference_configurations()`." if (REFERENCE / "pipeline_table.jsonl").exists() else "")
        return Note(f"No reference results yet: `{shown}` is not in this checkout. "
                    f"Run the lab on a GPU machine (`make lab`), then "
                    f"`python scripts/save_reference.py h100`.{also}")
    return labkit.speedup_table(path)


def reference_configurations():
    """The reference machine's table of pipeline configurations, computed from the ledger that
    ``benchmarks/pipeline_table.py`` wrote there (``pipeline_table.jsonl``): the baseline, each
    change on its own, all changes together, and the decode-only ceilings. Its rows are single
    changes from the baseline, not the lab's cumulative steps, so it stays a table of its own.
    A Note when the file is absent."""
    import labkit

    path = REFERENCE / "pipeline_table.jsonl"
    if not path.exists():
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        return Note(f"No reference configurations: `{shown}` is not in this checkout. "
                    f"`python benchmarks/pipeline_table.py` on a GPU machine writes it (in its `--out` folder).")
    return labkit.speedup_table(path)


def both_machines():
    """The speed-up table with this machine's and the reference machine's columns, or a Note
    when no reference results are committed."""
    if not (REFERENCE / "ledger.jsonl").exists():
        return reference_table()
    return speedup(reference=True)


def reference_rows(steps):
    """The reference machine's ledger rows of ``steps`` (latest per step), or a Note."""
    from labkit import Ledger
    from labkit.tables import latest_rows

    path = REFERENCE / "ledger.jsonl"
    if not path.exists():
        return reference_table()
    df = latest_rows(Ledger(path).read())
    cols = [c for c in ("step", "machine", "fps", "latency_p50_ms", "map50", "mota") if c in df.columns]
    return df[df["step"].isin(list(steps))][cols].reset_index(drop=True)


def plot_tradeoff(frame, *, label: str, title: str = ""):
    """Median latency (p50, ms) against throughput (frames/s), one labelled point per row of a
    ledger or sweep frame; ``label`` names the column written beside each point."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4), layout="constrained")
    ax = fig.subplots()
    ax.plot(frame["fps"], frame["latency_p50_ms"], "o-", zorder=3)
    for value, x, y in zip(frame[label], frame["fps"], frame["latency_p50_ms"]):
        ax.annotate(f"{label} {value}", (x, y), fontsize=8, xytext=(5, 4), textcoords="offset points")
    ax.set_xlabel("throughput (frames/s)")
    ax.set_ylabel("latency p50 (ms)")
    ax.set_title(title or f"latency against throughput, by {label}")
    ax.grid(alpha=0.3)
    ax.margins(0.15)
    return fig


# ----------------------------------------------------------------------------- the lab's steps
def steps(mode: str = MODE, gpu: bool | None = None) -> dict[str, dict]:
    """Every step of the lab in order: name -> flags of ``detect_video.py``.

    Each step keeps the changes of the steps before it on the main path (queues, no OSD,
    batching); channels_last, compile and the ONNX Runtime steps are alternatives built on the
    batched pipeline; the GPU steps (fp16, CUDA graphs, TensorRT) build on ``gpu_preprocess``
    (the batched pipeline with preprocessing on the GPU).
    The interval steps (notebook 06) build on whichever step was fastest, so they are added
    there (see ``fastest``).
    """
    s = settings(mode, gpu)
    batched = {"queues": True, "osd": False, "batch_size": s.batch}
    on_gpu = {**batched, "device": "cuda", "gpu_preprocess": True}  # the GPU steps build on this
    out = {
        "baseline": {},
        "queues": {"queues": True},
        "no_osd": {"queues": True, "osd": False},
        **{f"batch{b}": {"queues": True, "osd": False, "batch_size": b} for b in s.batch_sizes},
        **{f"streams{n}": {**batched, "streams": n} for n in s.streams},
        "channels_last": {**batched, "channels_last": True},
        "compile": {**batched, "compile": True},
        "gpu_preprocess": on_gpu,
        "fp16": {**on_gpu, "precision": "fp16"},
        "fp16_cuda_graphs": {**on_gpu, "precision": "fp16", "cuda_graphs": True},
        "tensorrt_fp16": {**on_gpu, "backend": "tensorrt", "precision": "fp16"},
        "ort_fp32": {**batched, "device": "cpu", "backend": "onnxruntime"},
        "ort_int8": {**batched, "device": "cpu", "backend": "onnxruntime", "precision": "int8"},
        "tensorrt_int8": {**on_gpu, "backend": "tensorrt", "precision": "int8"},
    }
    out[f"batch{s.batch}"] = batched  # the batched pipeline, whether or not it was swept
    return out


def flags(step: str, mode: str = MODE) -> dict:
    """The flags of one step (a copy: change it freely)."""
    return dict(steps(mode)[step])


def fastest(candidates, *, accuracy_floor: float | None = None) -> str:
    """The step among ``candidates`` with the highest fps in this machine's ledger.

    ``accuracy_floor``: leave out steps whose mAP@0.5 is below it (e.g. 0.95 x the baseline's).
    """
    df = ledger(candidates)
    if "fps" not in df.columns or df["fps"].notna().sum() == 0:
        raise ValueError(f"none of {list(candidates)} has a ledger row with fps yet: run those steps first")
    if accuracy_floor is not None and "map50" in df.columns:
        df = df[df["map50"].isna() | (df["map50"] >= accuracy_floor)]
    return str(df.loc[df["fps"].idxmax(), "step"])


def table_columns(frame, *extra: str):
    """The columns of a ledger or sweep frame worth showing: step, fps, latency, accuracy."""
    cols = ["step", *extra, "fps", "spread", "latency_p50_ms", "latency_p99_ms", "map50", "mota"]
    if "error" in frame.columns and frame["error"].notna().any():
        cols.append("error")  # a sweep value that failed (say, out of memory) says why
    return frame[[c for c in dict.fromkeys(cols) if c in frame.columns]]
