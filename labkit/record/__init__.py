"""Recording: running a program under Nsight Systems, exporting its report to SQLite, and the child processes around both."""
from labkit.api import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "export": ["export_cache_dir", "export_is_complete", "report_version", "export_sqlite", "report_identity"],
    "nsys": ["record", "Recording", "profile_command", "recording_notes", "recording_cpus", "recording_facts",
             "note_ranks_report", "CaptureRangeError", "ProgramFailedError", "ProfileTimeoutError", "TRACE",
             "ReportExistsError", "PROFILE_SPACE"],
    "tool": ["NsysError", "NsysNotFoundError", "supports_option"],
    "proc": ["profiled_env", "is_secret", "child_setup", "exit_reason", "program_lines", "last_error_line", "wait_with_progress", "remove_stream_files",
             "process_reason", "UMASK", "REPORT_GRACE_S"],
})
