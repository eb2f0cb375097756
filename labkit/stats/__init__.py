"""Statistics: the summaries equal to `nsys stats`, stage and batch tables, GPU busy and idle time, copies, kernel statistics (percentiles, launch latency, queues, streams, bandwidth), and comparing two reports."""
from labkit.api import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "compare": ["plot_compare", "headline", "Headline", "COMPARE_COLUMNS"],  # compare(): labkit.compare (labkit.stats.compare is the module)
    "copies": ["copy_table", "pageable_copies"],
    "kernels": ["kernel_percentiles", "launch_latency", "queue_depth", "stream_summary", "copy_bandwidth"],
    "idle": ["busy_intervals", "gpu_utilization", "gpu_idle_gaps", "gpu_idle_breakdown", "SYNC_CALLS", "SM_KINDS", "COPY_KINDS", "sync_calls", "copy_calls"],
    "stages": ["steady_window", "stage_overlap", "stage_table", "batches", "choose_stages", "ITEMS_MARK"],
    "summaries": ["nvtx_summary", "kernel_summary", "memcpy_summary", "gpu_projection", "gpu_projection_summary", "cuda_api_summary", "memcpy_size_summary", "osrt_summary", "SIZE_COLUMNS"],
})
