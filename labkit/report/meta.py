"""A report's metadata: the nsys version and schema that wrote the export, when it was captured and exported, the
profiled command and machine (its CPU cores)."""
from __future__ import annotations

from labkit.report.reader import _Db


def _read_meta(db: _Db) -> dict:
    """What the export's metadata tables say; a NULL value (nsys's schema allows one in each of these
    columns) is unknown: its key is left out, or the command's argument is."""
    meta: dict = {}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(table, "name", "value"):
            kv = dict(db.scalar_rows(f"SELECT name, value FROM [{table}] WHERE value IS NOT NULL"))
            meta["nsys_version"] = kv.get("EXPORT_PRODUCT_VERSION")
            meta["schema_version"] = kv.get("EXPORT_SCHEMA_VERSION")
            meta["export_time_utc"] = kv.get("EXPORT_TIME_UTC")
            meta["export_source"] = kv.get("EXPORT_PARAM_INPUT_FILE") or kv.get("EXPORT_INPUT_FILE")  # 2025.3 / 2022.4
            break
    if db.has("TARGET_INFO_SESSION_START_TIME", "utcTime"):
        row = db.scalar_rows("SELECT utcTime, utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        if row and None not in row[0]:
            meta["capture_time_utc"], meta["capture_epoch_ns"] = row[0]
    if db.has("ANALYSIS_DETAILS", "startTime", "stopTime", "duration"):
        row = db.scalar_rows("SELECT startTime, stopTime, duration FROM ANALYSIS_DETAILS LIMIT 1")
        if row and None not in row[0]:
            meta["start_ns"], meta["stop_ns"], meta["duration_ns"] = (int(x) for x in row[0])
    if db.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):  # the profiled machine's CPU cores
        row = db.scalar_rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CpuCores' LIMIT 1")
        if row and str(row[0][0]).isdigit() and 0 < int(row[0][0]) < 1 << 16:
            meta["cpu_cores"] = int(row[0][0])
    # traced with -t osrt: nsys writes the table, with its markers of the tracing's start, only then (a
    # window of the report may hold no call, yet the time outside its ranges was traced)
    meta["osrt_traced"] = db.has("OSRT_API", "start") and db.any_rows("OSRT_API")
    if db.has("META_DATA_CAPTURE", "name", "value"):
        kv = db.scalar_rows("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_0:%' "
                            "AND value IS NOT NULL")
        d = dict(kv)
        if "PROCESS_0:COMMAND" in d:
            args = [v for k, v in kv if k.startswith("PROCESS_0:ARGUMENT_")]
            meta["command"] = " ".join([d["PROCESS_0:COMMAND"], *args])
    return meta
