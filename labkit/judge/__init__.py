"""Judgement: where a run spent its time, what limited it, and which lever would pay (bottleneck, advice)."""
from labkit.api import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "advice": ["RULES", "advise", "next_lever", "finding_sentence", "AdviseError", "ADVICE_COLUMNS", "LEVERS", "annotated_stages", "MIN_GAIN"],
    "bottleneck": ["Bottleneck"],  # bottleneck(): labkit.bottleneck (labkit.judge.bottleneck is the module)
    "evidence": ["DECODE_BOUND", "DOMINANT_SHARE", "Evidence", "IDLE_GAP_MS", "LOW_GPU_BUSY", "MANY_KERNELS", "MANY_KERNELS_PER_BATCH", "SKIP_EVERY", "UNDERFILL", "row"],
    "launches": ["Launches", "TINY_KERNEL_US", "launch_steps"],
    "rules": ["STAGE_TIMES", "dominant", "latency", "on_path", "one_at_a_time", "removable", "serial", "taking_turns"],
    "batch_rules": ["fitted_batch", "per_call", "underfilled"],
    "gpu_rules": ["OTHERS_KEEP", "gpu_bound", "launch_bound", "low_utilization", "pageable", "starvation", "sync_apis", "sync_copies"],
})
