"""Reading: one report as DataFrames (the SQLite readers, Report, load_report, profile), windows of a report, and ONNX Runtime op profiles."""
from labkit.api import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "cpu": ["read_threads", "profiled_pids", "read_osrt"],
    "load": ["Report", "load_report", "profile", "ReportError", "NVTX_COLUMNS", "KERNEL_COLUMNS", "MEMCPY_COLUMNS", "MEMSET_COLUMNS", "CUDA_API_COLUMNS", "SYNC_COLUMNS", "GRAPH_COLUMNS", "OSRT_COLUMNS", "OFFCPU_COLUMNS", "SUMMARY_COLUMNS", "PROJECTION_COLUMNS"],
    "nvtx": ["read_nvtx", "nvtx_frame_empty", "range_durations"],
    "ort_profile": ["CLASSES", "INT8_TYPES", "ProfileError", "QDQ_OPS", "QUANTIZED_OPS", "class_shares", "op_class", "op_profile", "profile_model", "read_profile", "takes"],
    "trim": ["trim_export"],
    "window": ["restrict", "windowed", "WindowError", "span_of"],
})
