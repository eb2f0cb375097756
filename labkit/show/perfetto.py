"""Export a report as a Perfetto trace (protobuf ``TrackEvent`` packets), to open in the Perfetto
UI (ui.perfetto.dev: Open trace file) where the Nsight Systems GUI is not at hand.

    labkit.to_perfetto(report, "run.pftrace")
    python -m labkit export --perfetto REPORT [-o PATH]

What the trace holds, on the report's clock (ns):

- a process per pid and a thread track per thread (its name and tid), holding its NVTX ranges of
  the default domain, nested as recorded; each other NVTX domain on a child track of the thread
  (``NVTX <domain>``), its category name as the event's category;
- the thread's CUDA API calls on a child track ``CUDA API``;
- per GPU stream a track ``GPU <device> stream <id>`` under its process: kernels, copies, memsets;
- a flow from each CUDA API call to the GPU work it launched (same process and correlation id).

Events that overlap without nesting on one track (NVTX start/end ranges, say) go to extra tracks
(``... (overlap 2)``), since a Perfetto track's slices must nest. The messages are the
``perfetto`` package's own protobuf classes (``perfetto_trace_pb2``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["to_perfetto", "trace_message", "cli_export"]


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per event (given sorted by start, longest first at equal start), the first lane in which
    it nests with what is already there (lane 0 when everything nests)."""
    order_ok = len(start) < 2 or bool(np.all(start[1:] >= end[:-1]))
    if order_ok:  # no overlap at all: one lane (the usual GPU stream)
        return np.zeros(len(start), dtype=np.int64)
    stacks: list[list[int]] = []
    lane = np.empty(len(start), dtype=np.int64)
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        for k, st in enumerate(stacks):
            while st and st[-1] <= s:
                st.pop()
            if not st or e <= st[-1]:
                st.append(e)
                lane[i] = k
                break
        else:
            stacks.append([e])
            lane[i] = len(stacks) - 1
    return lane


def _slices(pb, out, track: int, start, end, names, cats=None, notes=None, flows=None, ends_flows=None):
    """Add to the Trace ``out`` the begin/end packets of one lane's nested events (sorted by
    start, longest first), in place (copying a message per event would double the cost)."""
    stack: list[int] = []  # ends of the open slices
    B, E = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END
    add = out.packet.add
    start, end = start.tolist(), end.tolist()
    for i, s in enumerate(start):
        while stack and stack[-1] <= s:
            pkt = add(timestamp=stack.pop(), trusted_packet_sequence_id=1)
            pkt.track_event.type, pkt.track_event.track_uuid = E, track
        pkt = add(timestamp=s, trusted_packet_sequence_id=1)
        ev = pkt.track_event
        ev.type, ev.track_uuid, ev.name = B, track, names[i]
        if cats is not None and cats[i]:
            ev.categories.append(cats[i])
        if flows is not None and flows[i] >= 0:
            ev.flow_ids.append(int(flows[i]))
        if ends_flows is not None and ends_flows[i] >= 0:
            ev.terminating_flow_ids.append(int(ends_flows[i]))
        if notes is not None:
            for key, values in notes.items():
                v = values[i]
                if v is None or v is pd.NA or (isinstance(v, float) and v != v):
                    continue
                a = ev.debug_annotations.add(name=key)
                if isinstance(v, (int, np.integer)):
                    a.int_value = int(v)
                else:
                    a.string_value = str(v)
        stack.append(end[i])
    while stack:
        pkt = add(timestamp=stack.pop(), trusted_packet_sequence_id=1)
        pkt.track_event.type, pkt.track_event.track_uuid = E, track


def _pick(value, sel):
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: np.asarray(v)[sel] for k, v in value.items()}
    return np.asarray(value)[sel]


def _flow_id(pid, corr) -> np.ndarray:
    return (np.asarray(pid, dtype=np.int64) & 0xFFFFFFF) * (1 << 32) + np.asarray(corr, dtype=np.int64) + 1


def trace_message(report):
    """The report as a ``perfetto_trace_pb2.Trace`` message (track descriptors first)."""
    descriptors, events = _build(report)
    descriptors.MergeFrom(events)  # repeated fields append: descriptors, then events
    return descriptors


def _build(report):
    """(descriptors, events): two Trace messages; their serializations concatenated are one
    Trace (protobuf appends repeated fields), with no copy of a packet."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    nv = report.nvtx
    nv = nv[nv["kind"] != "mark"] if len(nv) else nv
    api, gpu = report.cuda_api, report.gpu_ops()
    descriptors, events = [], pb.Trace()
    uuids = iter(range(1, 1 << 62))
    procs: dict[int, int] = {}

    def process(pid):
        if pid not in procs:
            procs[pid] = next(uuids)
            descriptors.append(pb.TracePacket(trusted_packet_sequence_id=1, track_descriptor=pb.TrackDescriptor(
                uuid=procs[pid], process=pb.ProcessDescriptor(pid=int(pid)))))
        return procs[pid]

    def track(name, parent):
        u = next(uuids)
        descriptors.append(pb.TracePacket(trusted_packet_sequence_id=1, track_descriptor=pb.TrackDescriptor(
            uuid=u, parent_uuid=parent, name=name)))
        return u

    def on_tracks(base_name, parent, frame, **cols):
        """Slices of ``frame`` on a track (and overlap tracks where they do not nest)."""
        frame = frame.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable")
        s, e = frame["start_ns"].to_numpy(np.int64), frame["end_ns"].to_numpy(np.int64)
        lanes = _lanes(s, e)
        for lane in np.unique(lanes):
            sel = lanes == lane
            u = parent(None) if lane == 0 else None  # the parent's own track, where it takes them
            u = u or track(base_name + (f" (overlap {lane + 1})" if lane else ""), parent(True))
            _slices(pb, events, u, s[sel], e[sel], frame["name"].astype(str).to_numpy(dtype=object)[sel],
                    **{k: _pick(v(frame) if callable(v) else v, sel) for k, v in cols.items()})

    # threads: NVTX (default domain on the thread track, other domains on child tracks), CUDA API;
    # without NVTX ranges, the threads' OS runtime calls on their tracks (as the timelines show them)
    threads = {}
    from labkit.show.layout import os_calls, thread_labels  # the timelines' names (decode, main...)

    osrt = os_calls(report)
    named = nv if len(nv) else osrt
    labels = {g: lab.rsplit(" (tid", 1)[0] for g, lab in thread_labels(named).items()} if len(named) else {}
    names = dict(zip(report.threads["global_tid"], report.threads["thread_name"])) \
        if "thread_name" in report.threads.columns else {}
    for df in (nv, api, osrt):
        for gtid, pid, tid in df[["global_tid", "pid", "tid"]].drop_duplicates().itertuples(index=False):
            if gtid not in threads:
                u = next(uuids)
                name = labels.get(gtid) or (names.get(gtid) if isinstance(names.get(gtid), str) else None)
                descriptors.append(pb.TracePacket(trusted_packet_sequence_id=1, track_descriptor=pb.TrackDescriptor(
                    uuid=u, parent_uuid=process(pid),
                    thread=pb.ThreadDescriptor(pid=int(pid), tid=int(tid), thread_name=name or f"tid {tid}"))))
                threads[gtid] = u
    dom = nv["domain"].fillna("").astype(str) if "domain" in nv.columns else pd.Series("", index=nv.index)
    for (gtid, d), g in nv.groupby([nv["global_tid"], dom], sort=True):
        thread = threads[gtid]
        cats = (lambda f: f["category_name"].fillna("").astype(str).to_numpy(dtype=object)) \
            if "category_name" in g.columns else None  # NVTX categories, where the reader names them
        on_tracks(f"NVTX {d}" if d else "NVTX", lambda child, t=thread, top=not d: (t if top else None) if child is None else t,
                  g, cats=cats,
                  notes=lambda f: {"payload": f["payload"].astype(object).to_numpy()})
    for gtid, g in osrt.groupby("global_tid", sort=True):
        on_tracks("OS runtime calls", lambda child, t=threads[gtid]: t, g)
    if len(api):
        launched = set(zip(gpu["pid"].tolist(), gpu["correlation_id"].tolist())) if len(gpu) else set()
        for gtid, g in api.groupby("global_tid", sort=True):
            flows = _flow_id(g["pid"], g["correlation_id"])
            has = np.array([k in launched for k in zip(g["pid"].tolist(), g["correlation_id"].tolist())], dtype=bool)
            g = g.assign(_flow=np.where(has, flows, -1))
            on_tracks("CUDA API", lambda child, t=threads[gtid]: None if child is None else t, g, flows=lambda f: f["_flow"].to_numpy(),
                      notes=lambda f: {"correlation_id": f["correlation_id"].to_numpy()})
    if len(gpu):
        for (pid, dev, stream), g in gpu.groupby(["pid", "device_id", "stream_id"], sort=True):
            g = g.assign(_flow=_flow_id(g["pid"], g["correlation_id"]))
            on_tracks(f"GPU {dev} stream {stream}", lambda child, p=pid: None if child is None else process(p), g,
                      cats=lambda f: f["category"].astype(str).to_numpy(dtype=object),
                      ends_flows=lambda f: f["_flow"].to_numpy(),
                      notes=lambda f: {"correlation_id": f["correlation_id"].to_numpy()})
    return pb.Trace(packet=descriptors), events


def to_perfetto(report, path, *, overwrite: bool = False) -> Path:
    """Write ``report`` as a Perfetto protobuf trace to ``path`` (conventionally ``.pftrace``),
    atomically; a file labkit did not write is replaced only with ``overwrite=True``, and the
    report's own files never.

    Returns: the path written. Raises: labkit.errors.OutputError (OutputExistsError) when it cannot be written.
    """
    from labkit.errors import OutputError
    from labkit.paths import atomic_write

    path = Path(path)
    src = getattr(report, "path", None)
    if src is not None and path.resolve() in {Path(src).resolve(), Path(src).resolve().with_suffix(".sqlite"),
                                              Path(src).resolve().with_suffix(".nsys-rep")}:
        raise OutputError(f"{path} is the report itself: pass another path (-o), e.g. "
                          f"{Path(src).with_suffix('.pftrace')}")
    descriptors, events = _build(report)
    data = descriptors.SerializeToString() + events.SerializeToString()
    return atomic_write(path, data, overwrite=overwrite, what="Perfetto trace")


def cli_export(argv: list[str]) -> int:
    """``python -m labkit export --perfetto REPORT [-o PATH]``: write REPORT's Perfetto trace."""
    import argparse
    import sys

    from labkit.errors import LabkitError
    from labkit.report.load import load_report

    p = argparse.ArgumentParser(prog="python -m labkit export",
                                description="Export an Nsight Systems report (.nsys-rep or .sqlite) as a Perfetto "
                                            "trace, to open in the Perfetto UI (ui.perfetto.dev).")
    p.add_argument("--perfetto", action="store_true", required=True, help="the format (the only one so far)")
    p.add_argument("report")
    p.add_argument("-o", "--output", help="the trace file (default: REPORT with the suffix .pftrace)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file labkit did not write")
    args = p.parse_args(argv)
    out = Path(args.output) if args.output else Path(args.report).with_suffix(".pftrace")
    try:
        path = to_perfetto(load_report(args.report), out, overwrite=args.overwrite)
    except LabkitError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path} ({path.stat().st_size:,} bytes): open it at ui.perfetto.dev (Open trace file)")
    return 0
