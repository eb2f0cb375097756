"""Showing: timelines (static and interactive), their layout, and the Perfetto export."""
from labkit.api import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "interactive": ["interactive_timeline", "InteractiveTimeline"],
    "layout": ["NothingToDraw", "Row", "layout", "colours", "colour_key", "thread_labels", "os_calls"],
    "perfetto": ["to_perfetto", "trace_message", "cli_export"],
    "timeline": ["plot_timeline"],
})
