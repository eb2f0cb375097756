"""The Perfetto export, read back by Perfetto's own protobuf definitions (the ``perfetto``
package's ``perfetto_trace_pb2``, parsed by Google's protobuf runtime): tracks, nesting, counts
and flows checked against the real reports it came from. A program without NVTX, profiled here,
shows its threads' OS runtime calls in the export and in both timelines."""
from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from labkit.show.perfetto import to_perfetto
from labkit.report.load import load_report

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                         reason="pip install -e '.[test]' (the perfetto package's protobuf definitions)")
FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


def _read(path):
    """Parse the trace and replay every track's slices: {track name: [(name, depth, begin packet)]}."""
    trace = pb.Trace.FromString(Path(path).read_bytes())
    tracks, slices, stacks, last = {}, defaultdict(list), defaultdict(list), {}
    for pkt in trace.packet:
        if pkt.HasField("track_descriptor"):
            d = pkt.track_descriptor
            tracks[d.uuid] = d
            continue
        ev = pkt.track_event
        assert ev.track_uuid in tracks, "an event on a track no descriptor declared"
        assert pkt.timestamp >= last.get(ev.track_uuid, 0), "time goes back on a track"
        last[ev.track_uuid] = pkt.timestamp
        if ev.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            slices[ev.track_uuid].append((ev.name, len(stacks[ev.track_uuid]), ev, pkt.timestamp))
            stacks[ev.track_uuid].append(pkt.timestamp)
        else:
            assert ev.type == pb.TrackEvent.TYPE_SLICE_END and stacks[ev.track_uuid], "an end without a begin"
            stacks[ev.track_uuid].pop()
    assert not any(stacks.values()), "a slice never ended"
    return tracks, slices


def _name(d):
    return d.name or d.thread.thread_name


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    rep = load_report(FIX / "gputest.nsys2025.3.sqlite")
    return rep, _read(to_perfetto(rep, tmp_path_factory.mktemp("pf") / "gputest.pftrace"))


def test_threads_nvtx_nesting_and_cuda_api(gpu):
    rep, (tracks, slices) = gpu
    thread = next(u for u, d in tracks.items() if d.HasField("thread"))
    assert tracks[thread].thread.tid == rep.nvtx["tid"].iloc[0]
    assert tracks[thread].thread.pid == rep.nvtx["pid"].iloc[0]
    ranges = rep.nvtx[rep.nvtx["kind"] != "mark"].sort_values(["start_ns", "end_ns"], ascending=[True, False])
    # NVTX ranges on the thread's track, nested as nsys recorded them
    assert [(n, d) for n, d, _, _ in slices[thread]] == list(zip(ranges["name"], ranges["depth"]))
    api = [u for u, d in tracks.items() if d.name == "CUDA API"]
    assert len(api) == 1 and tracks[api[0]].parent_uuid == thread
    assert Counter(n for n, *_ in slices[api[0]]) == Counter(rep.cuda_api["name"])


def test_gpu_work_on_its_streams_with_flows_from_launches(gpu):
    rep, (tracks, slices) = gpu
    ops = rep.gpu_ops()
    for (dev, stream), g in ops.groupby(["device_id", "stream_id"]):
        u = next(u for u, d in tracks.items() if d.name == f"GPU {dev} stream {stream}")
        assert Counter(n for n, *_ in slices[u]) == Counter(g["name"])
        assert {ev.categories[0] for _, _, ev, _ in slices[u]} == set(g["category"])
    starts = {f for s in slices.values() for _, _, ev, _ in s for f in ev.flow_ids}
    ends = [f for s in slices.values() for _, _, ev, _ in s for f in ev.terminating_flow_ids]
    launched = ops.merge(rep.cuda_api[["pid", "correlation_id"]], on=["pid", "correlation_id"])
    assert len(launched) > 100 and len(ends) == len(ops)
    assert sum(f in starts for f in ends) == len(launched)  # every launch's kernel or copy is linked to it
    # a flow goes from the launch to its kernel: the kernel starts after the call began
    begin = {f: t for s in slices.values() for _, _, ev, t in s for f in ev.flow_ids}
    assert all(begin[f] <= t for s in slices.values() for _, _, ev, t in s for f in ev.terminating_flow_ids
               if f in begin)


def test_domains_on_their_own_track_and_overlaps_apart(tmp_path):
    rep = load_report(FIX / "domains.nsys2022.4.sqlite")
    tracks, slices = _read(to_perfetto(rep, tmp_path / "d.pftrace"))
    dom = next(u for u, d in tracks.items() if d.name == "NVTX mydomain")
    assert [n for n, *_ in slices[dom]] == ["work"] * 3
    assert tracks[tracks[dom].parent_uuid].HasField("thread")
    assert [n for n, *_ in slices[tracks[dom].parent_uuid]] == ["plain"] * 3
    # start/end ranges that overlap without nesting: each one kept, on overlap tracks
    rep = load_report(FIX / "start_end.nsys2022.4.sqlite")
    tracks, slices = _read(to_perfetto(rep, tmp_path / "s.pftrace"))
    ranges = rep.nvtx[rep.nvtx["kind"] != "mark"]
    assert Counter(n for s in slices.values() for n, *_ in s) == Counter(ranges["name"])
    assert any("(overlap" in d.name for d in tracks.values())


def test_command_line_export(tmp_path):
    out = tmp_path / "p.pftrace"
    r = subprocess.run([sys.executable, "-m", "labkit", "export", "--perfetto",
                        str(FIX / "pipeline.nsys2025.3.sqlite"), "-o", str(out)], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "ui.perfetto.dev" in r.stdout
    tracks, slices = _read(out)
    names = {_name(d) for d in tracks.values()}
    assert {"decode", "preprocess", "infer", "postprocess", "track", "display"} <= names
    bad = subprocess.run([sys.executable, "-m", "labkit", "export", "--perfetto", str(tmp_path / "none.sqlite")],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "report not found" in bad.stderr


@pytest.mark.nsys
@pytest.mark.skipif(not shutil.which("nsys"), reason="nsys not installed (scripts/install-nsys)")
def test_a_program_without_nvtx_shows_its_threads_os_calls(tmp_path):
    """Issue 30: a program nobody annotated drew nothing (plot_timeline raised, the Perfetto trace
    was empty) though nsys traced its reads and sleeps. A reader thread blocks in read() on a pipe
    the main thread writes to after each 10 ms sleep."""
    import labkit
    from labkit.show.interactive import interactive_timeline
    from labkit.show.timeline import plot_timeline

    prog = tmp_path / "plain.py"
    prog.write_text("import os, threading, time\n"
                    "r, w = os.pipe()\n"
                    "def reader():\n"
                    "    while os.read(r, 1) != b'q':\n"
                    "        pass\n"
                    "t = threading.Thread(target=reader)\nt.start()\n"
                    "for _ in range(20):\n    time.sleep(0.01)\n    os.write(w, b'x')\n"
                    "os.write(w, b'q')\nt.join()\n")
    rep = labkit.profile([sys.executable, str(prog)], name="plain", outdir=str(tmp_path), trace=("osrt",),
                         progress=False)
    assert not len(rep.nvtx) and not len(rep.cuda_api)
    calls = rep.osrt[rep.osrt["name"].isin(["read", "clock_nanosleep"])]
    main, = set(calls.loc[calls["tid"] == calls["pid"], "global_tid"])
    other, = set(calls.loc[(calls["tid"] != calls["pid"]) & (calls["name"] == "read"), "global_tid"])

    fig = plot_timeline(rep)
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(r.startswith("main (tid") and r.endswith("OS calls") for r in rows), rows
    assert any(r.startswith("thread (tid") and r.endswith("OS calls") for r in rows), rows
    legend = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert {"read", "clock_nanosleep"} <= legend, legend
    hover = interactive_timeline(rep)
    bars = hover.table()
    assert hover.rows == rows and set(bars["what"]) == {"OS runtime call"}
    assert {"read", "clock_nanosleep"} <= set(bars["name"])

    tracks, slices = _read(to_perfetto(rep, tmp_path / "plain.pftrace"))
    per_thread = {d.thread.tid: Counter(n for n, *_ in slices[u]) for u, d in tracks.items() if d.HasField("thread")}
    tid = dict(zip(rep.osrt["global_tid"], rep.osrt["tid"]))
    assert per_thread[tid[main]]["clock_nanosleep"] == (calls["global_tid"] == main).sum() - \
        ((calls["global_tid"] == main) & (calls["name"] == "read")).sum()
    assert per_thread[tid[other]]["read"] == ((calls["global_tid"] == other) & (calls["name"] == "read")).sum() > 0
