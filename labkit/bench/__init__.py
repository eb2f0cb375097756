"""Benchmarks: repeated runs of a program, their results and truth rules, the ledger, speed-up tables and their charts."""
from labkit.api import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "charts": ["speedup_bars", "fps_vs_accuracy", "stage_bars", "tradeoff", "predicted_vs_measured", "predictions"],
    "ledger": ["Ledger", "LedgerWarning", "SCHEMA", "BASE_COLUMNS", "KINDS", "STATUSES", "machine_label", "flatten", "not_run"],
    "parallel": ["run_parallel"],
    "results": ["BenchError", "BenchWarning", "HEADLINE", "RESULT_FIELDS", "Result", "config_of", "error_line", "read_results", "spread"],
    "runner": ["LAUNCHERS", "launch", "with_flag"],
    "runs": ["run", "sweep"],
    "table_view": ["ABOVE", "MODE_NOTES", "SHORT", "caption_of", "class_frame", "display_frame", "intervals", "provenance_frame", "styled", "to_markdown"],
    "tables": ["speedup_table", "class_view", "SpeedupTable", "SpeedupTableError", "SpeedupWarning", "load_ledgers", "ACCURACY_METRICS", "lower_is_better", "latest_rows", "compare"],
    "table_cli": ["cli_table"],
    "truth": ["CEILING", "MIN_REPEATS_FOR_CI", "bootstrap_ci", "check_ceiling", "find_ceiling", "ledger_ceiling", "measured_figures", "parallel_figures", "provenance"],
})
