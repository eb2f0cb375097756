"""The lab's helper package, imported by every notebook as ``import labbook as lab``.

It holds what every notebook needs and no lesson; each module has one job:

- ``settings``: run modes and their sizes, the lab's locations (``REPORTS``, ``LEDGER``, ...), and
  ``REPLAY``, a recording replayed instead of running steps (``replay``: its rows, profiles, platform);
- ``video``: the sample clip, its frames and ground truth;
- ``steps``: the step catalogue as data (flags, ``builds_on``, kind);
- ``app``: the application's options and argv (built in one place), what this machine can run;
- ``outcome``: ``Outcome``, the one result of a step (ok / skipped / failed); ``skip_note``, the
  sentence a cell shows instead of its work when a step it needs did not run;
- ``plan``: one step resolved once (flags, builds_on, kind, settings, prediction, guess);
- ``levers``: labkit's lever ids mapped to the application's flags (the one home);
- ``runs``: ``run_step``, ``sweep`` and 08's ``run_scaled`` (over ``labkit.bench``), ledger rows
  with a status;
  ``ensure`` runs what a notebook builds on when the ledger lacks it;
- ``predict``: predict, then measure: ``advice`` before a step, the ``prediction`` its row
  carries, ``verdict`` after it, ``next_lever`` from its own profile;
- ``commands``: the installed nsys for the by-hand lines (``nsys_on_path``, ``stats_report``, ``by_hand``)
  and ``agreement`` of its ``nsys stats`` CSV with labkit's summary;
- ``latency``: Little's law on the ledger, ``frames_held`` by the queues, a ``camera_clip``;
- ``reference``: this machine's ledger and table, and the reference machine's;
- ``display``: reports, comparisons and columns shown in the notebooks; ``text``: sentences
  (``say``), pandas display settings and labkit's warnings as cell lines, applied on import
  (cells in full, no ``1e+07``, a flagged benchmark in markdown);
- ``check`` (the hands-on exercises' check cells: each reads the learner's own profile), ``evidence`` (a lever's GPU evidence, and the committed H100 evidence where this machine lacks
  a GPU), ``loop`` (notebook 03's exercise in code: the detector and frames for the learner's own loop
  under ``%%nsys``), ``interval`` (notebook 06: detected frames, the accuracy floor), ``summary``
  (notebook 07: table or note, figures, take-aways, quiz), ``optimize`` (the optimized step, the best
  within the accuracy floor): modules, as ``lab.evidence`` etc.
"""
from labbook.app import app_argv, app_command, app_options, backends, capture_range, device_of, unavailable
from labbook.commands import agreement, by_hand, nsys_on_path, stats_report
from labbook.display import (best, compare, copies, gui_question, jumps, kernels, overlap, ranges, report, table_columns, tied,
                             warmup_batches, window)
from labbook.latency import camera_clip, frames_held, littles_law
from labbook.latency import lesson as latency_lesson
from labbook.outcome import Outcome, missing_report_note, skip_note
from labbook.predict import advice, next_lever, prediction, verdict
from labbook.reference import (both_machines, fastest, ledger, reference_configurations, reference_rows,
                               reference_table, speedup)
from labbook.runs import ensure, run_scaled, run_step, sweep
from labbook.settings import (APP, DATA, LEDGER, MODE, MODES, PROFILES, REFERENCE, REPLAY, REPORTS, RESULTS, ROOT,
                              SETTINGS, STAGES, VIDEOS, Settings, gpu_available, gpu_count, settings)
from labbook.steps import (SCALE_OUT, Step, builds_on_map, catalogue, flags, recorded_options, scale_out,
                           scale_out_candidates)
from labbook.text import configure_pandas, say, warnings_in_cells
from labbook.video import ground_truth, sample_video, show_frame, video_info

from labbook import check, evidence, interval, loop, optimize, summary  # noqa: E402  (modules for 01-08)

configure_pandas()  # the notebooks' tables: full text, integers as integers
warnings_in_cells()  # a flagged benchmark is a line in its cell, not a stderr box

__all__ = [
    "SCALE_OUT", "recorded_options", "scale_out", "scale_out_candidates", "run_scaled",
    "APP", "DATA", "LEDGER", "MODE", "MODES", "PROFILES", "REFERENCE", "REPORTS", "RESULTS", "ROOT", "SETTINGS",
    "STAGES", "VIDEOS", "Settings", "gpu_available", "gpu_count", "REPLAY", "settings", "sample_video", "video_info", "ground_truth",
    "show_frame", "Step", "catalogue", "flags", "builds_on_map", "app_options", "app_argv", "app_command",
    "backends", "device_of", "unavailable", "capture_range", "Outcome", "skip_note", "missing_report_note", "run_step", "sweep", "ledger",
    "speedup", "reference_table", "reference_configurations", "both_machines", "reference_rows", "fastest", "report",
    "kernels", "gui_question", "copies", "ranges", "overlap", "window", "warmup_batches", "compare", "best", "tied", "table_columns",
    "jumps", "say", "configure_pandas", "advice", "prediction", "verdict", "next_lever",
    "nsys_on_path", "stats_report", "agreement", "by_hand", "camera_clip", "frames_held", "littles_law", "latency_lesson",
    "check", "evidence", "interval", "loop", "optimize", "summary", "ensure",
]
