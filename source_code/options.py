"""The application's options, declared once: the table generates the argparse parser of
``detect_video.py``, the frozen ``PipelineConfig`` and the argv that labkit runs (``to_argv``).

Each ``Option`` names its ``PipelineConfig`` field (``name``, also the key of ``to_argv``'s
dict), its flag, type, default, help and the smallest value it accepts. Add an option here and
it exists everywhere: ``--help``, the config, the lab's command lines and the range checks.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

PROG = "detect_video"


def parse_hw(text: str) -> tuple[int, int]:
    """``"384x640"`` -> ``(384, 640)`` (network input height and width)."""
    try:
        h, w = (int(v) for v in str(text).lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HxW, e.g. 384x640, got {text!r}") from None
    return h, w


_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def parse_device(text: str) -> str:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``."""
    if not _DEVICE.match(text.strip().lower()):
        raise argparse.ArgumentTypeError(f"invalid device {text!r}: choose auto, cpu, cuda or cuda:N")
    return text.strip().lower()


@dataclass(frozen=True)
class Option:
    """One option: its config field, flag, kind and documentation."""

    name: str  # PipelineConfig field and to_argv key
    flag: str
    help: str
    default: Any = None
    type: Callable | None = None  # for value options; None for switches
    kind: str = "value"  # "value", "switch" (--x) or "toggle" (--x / --no-x)
    choices: tuple | None = None
    minimum: int | None = None  # smallest accepted value (checked by ``check_ranges``)
    nargs: str | None = None
    metavar: str | None = None
    required: bool = False


OPTIONS: tuple[Option, ...] = (
    Option("inputs", "--input", "video file(s); one file is copied to every stream, or give one per stream",
           type=str, nargs="+", metavar="PATH", required=True),
    Option("device", "--device", "auto, cpu, cuda or cuda:N", default="auto", type=parse_device),
    Option("batch_size", "--batch-size", "frames per batch", default=1, type=int, minimum=1),
    Option("streams", "--streams", "sources decoded concurrently, one decoder thread each", default=1, type=int,
           minimum=1),
    Option("decode_workers", "--decode-workers", "decode in N processes (at most one per stream) that hand "
           "frames over through shared memory, so decoding takes no time from this interpreter; 0: decode here",
           default=0, type=int, minimum=0, metavar="N"),
    Option("decode", "--decode", "video decoder: cpu (OpenCV) or nvdec (the GPU's decoder through PyNvVideoCodec, "
           "frames decoded into device memory; needs --gpu-preprocess)", default="cpu", type=str,
           choices=("cpu", "nvdec")),
    Option("queues", "--queues", "every stage in its own thread with bounded queues", default=False, kind="switch"),
    Option("queue_size", "--queue-size", "bound of every stage queue, in batches (a decoder's queue holds N x "
           "batch-size frames)", default=4, type=int, minimum=1, metavar="N"),
    Option("realtime", "--realtime", "pace each source at its native frame rate, as a camera would (latency is "
           "then batch fill plus processing, not backlog)", default=False, kind="switch"),
    Option("osd", "--osd", "draw boxes and ids on the frames (--no-osd: no drawing)", default=True, kind="toggle"),
    Option("gpu_preprocess", "--gpu-preprocess", "upload uint8 frames (pinned) and resize on the GPU", default=False,
           kind="switch"),
    Option("precision", "--precision", "numeric precision of the detector (fp32 on an Ampere or Hopper GPU runs "
           "its convolutions as TF32 under PyTorch's defaults: see --tf32)", default="fp32", type=str,
           choices=("fp32", "fp16", "int8")),
    Option("tf32", "--tf32", "TF32 for FP32 convolutions and matmuls on Ampere/Hopper GPUs (unset: PyTorch's "
           "default, TF32 convolutions but not matmuls; off: true FP32, for the comparison)", type=str,
           choices=("on", "off")),
    Option("backend", "--backend", "inference backend (source_code.backends.make_backend)", default="torch",
           type=str, choices=("torch", "onnxruntime", "tensorrt")),
    Option("interval", "--interval", "run the detector on every K-th frame; track in between", default=1, type=int,
           minimum=1),
    Option("frames", "--frames", "process at most N frames per stream", type=int, minimum=1),
    Option("warmup", "--warmup", "frames excluded from timing", default=10, type=int, minimum=0),
    Option("output", "--output", "output video of stream 0 (default: beside --results, <results stem>.mp4; "
           "none without --results)", type=str),
    Option("results", "--results", "results JSON path (schema: labkit.annotate.RESULTS_FIELDS)", type=str),
    Option("overwrite", "--overwrite", "replace an --output/--results file that this program did not write",
           default=False, kind="switch"),
    Option("cache_dir", "--cache-dir", "folder for converted models (ONNX, INT8, TensorRT engines) and the FLOPs "
           "count (default ~/.cache/labkit/backends)", type=str, metavar="PATH"),
    Option("weights", "--weights", "detector weights (default source_code/weights/detector.pt)", type=str),
    Option("channels_last", "--channels-last", "NHWC memory format for the detector", default=False, kind="switch"),
    Option("cuda_graphs", "--cuda-graphs", "replay the forward pass as a CUDA graph", default=False, kind="switch"),
    Option("compile", "--compile", "torch.compile the detector", default=False, kind="switch"),
    Option("input_hw", "--input-hw", "network input size (multiples of 32; default 384x640)", type=parse_hw,
           metavar="HxW"),
    Option("threads", "--threads", "torch CPU threads (default: torch's choice)", type=int, minimum=1),
    Option("decode_only", "--decode-only", "only decode the same sources with the same decoder threads (the "
           "ceiling for frames/s)", default=False, kind="switch"),
)
BY_NAME = {o.name: o for o in OPTIONS}
REFUSED_TOGETHER: tuple[frozenset, ...] = (frozenset({"compile", "cuda_graphs"}),)
"""Options this application refuses in one run (``make_backend`` exits 3 naming them): a caller
combining options (the lab's ``optimized`` step) reads this rather than learning it from a failed run."""
TORCH_ONLY = ("compile", "channels_last", "cuda_graphs")
"""Options that apply to ``--backend torch`` only (refused with any other backend)."""


def refused(options) -> frozenset | None:
    """The first set of options in ``options`` (names set to a true value) that the application
    refuses together, or None: ``refused({"compile": True, "cuda_graphs": True})``."""
    on = {k for k, v in dict(options).items() if v}
    if dict(options).get("backend", "torch") != "torch" and on & set(TORCH_ONLY):
        return frozenset({"backend", *(on & set(TORCH_ONLY))})
    return next((pair for pair in REFUSED_TOGETHER if pair <= on), None)
TF32 = {None: None, "on": True, "off": False, True: True, False: False}
"""``--tf32`` (or a bool given through the API) as ``make_backend(tf32=...)`` takes it (None: PyTorch's defaults)."""

# fields without a default (``inputs``) must come first
PipelineConfig = dataclasses.make_dataclass(
    "PipelineConfig",
    [(o.name, Any) for o in OPTIONS if o.required]
    + [(o.name, Any, dataclasses.field(default=o.default)) for o in OPTIONS if not o.required],
    frozen=True,
    namespace={"__doc__": "Everything that shapes a run: one field per option of source_code/options.py "
                          "(``inputs`` a tuple of paths, ``input_hw`` a (H, W) tuple or None)."},
)
PipelineConfig.__module__ = __name__


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        print(f"{PROG}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser of ``detect_video.py``, generated from ``OPTIONS``."""
    p = _Parser(prog=PROG, description=description)
    for o in OPTIONS:
        kw: dict[str, Any] = {"help": o.help, "dest": o.name, "default": o.default}
        if o.kind == "switch":
            kw["action"] = "store_true"
        elif o.kind == "toggle":
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw.update(type=o.type, choices=o.choices, nargs=o.nargs, metavar=o.metavar, required=o.required)
        p.add_argument(o.flag, **{k: v for k, v in kw.items() if v is not None or k == "default"})
    return p


def config_from_args(args: argparse.Namespace) -> Any:
    """The ``PipelineConfig`` of parsed arguments."""
    values = {o.name: getattr(args, o.name) for o in OPTIONS}
    values["inputs"] = tuple(values["inputs"])
    if values["input_hw"] is not None:
        values["input_hw"] = tuple(values["input_hw"])
    return PipelineConfig(**values)


def check_ranges(cfg: Any) -> str | None:
    """The first option below its minimum, as a one-line message, or None."""
    for o in OPTIONS:
        value = getattr(cfg, o.name)
        if o.minimum is not None and value is not None and value < o.minimum:
            bound = "0 or more" if o.minimum == 0 else f"at least {o.minimum}"
            return f"{o.flag} must be {bound} (got {value})"
    return None


def _text(value: Any) -> str:
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"  # an HxW size
    return str(value)


def to_argv(flags: dict) -> list[str]:
    """Command-line options from ``flags`` keyed by option name (``OPTIONS``):
    ``{"batch_size": 4}`` -> ``["--batch-size", "4"]``, ``{"queues": True}`` -> ``["--queues"]``,
    ``{"osd": False}`` -> ``["--no-osd"]``; ``None`` (and ``False`` for a switch) leaves an option
    out. Raises ValueError for a name that is not an option."""
    unknown = sorted(set(flags) - set(BY_NAME))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}: choose from {', '.join(BY_NAME)}")
    out: list[str] = []
    for name, value in flags.items():
        o = BY_NAME[name]
        if value is None:
            continue
        if o.kind in ("switch", "toggle"):
            if value:
                out.append(o.flag)
            elif o.kind == "toggle":
                out.append("--no-" + o.flag[2:])
        elif o.nargs == "+":
            out += [o.flag, *([str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)])]
        else:
            out += [o.flag, _text(value)]
    return out
