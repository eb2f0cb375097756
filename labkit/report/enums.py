"""The codes an nsys export's CUPTI tables use, as nsys names them: copy kinds, memory kinds and
synchronization kinds (an export's own ``ENUM_*`` tables, where it has them, take precedence). Plain
dicts, so that the light readers (``labkit.stats.lean``) can name copies without numpy or pandas."""

# copyKind -> label, as ENUM_CUDA_MEMCPY_OPER of 2025.3 spells it (used when the enum is absent)
MEMCPY_KIND = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device",
}
MEM_KIND = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
    5: "Device Static", 6: "Managed Static", 7: "Unknown",
}
SYNC_KIND = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}
