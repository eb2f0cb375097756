"""``python -m labkit advise|bottleneck|timeline|kernels|compare`` as real subprocesses on real
exports: the JSON parses and agrees with the Python API, files are written only where asked and
never over one without --overwrite, faults end in one line."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import labkit

FIX = Path(__file__).parent / "fixtures"
CPU, GPU = FIX / "pipeline.nsys2022.4.sqlite", FIX / "pipeline.nsys2025.3.sqlite"
GPUTEST = FIX / "gputest.nsys2025.3.sqlite"


def _run(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labkit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def _ok(*args, cwd=None) -> str:
    r = _run(*args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("report", [CPU, GPUTEST], ids=["cpu", "gpu"])
def test_advise_json_is_the_python_result(report):
    got = json.loads(_ok("advise", report, "--json"))
    want = labkit.advise(labkit.load_report(report))
    assert got["note"] == want.attrs["note"] and got["window"] == list(want.attrs["window"])
    assert [f["finding"] for f in got["findings"]] == list(want["finding"]) and len(want) > 0
    assert [f["lever"] for f in got["findings"]] == list(want["lever"])
    np.testing.assert_allclose([f["predicted_speedup"] for f in got["findings"]], want["predicted_speedup"])


def test_advise_csv_and_text():
    want = labkit.advise(labkit.load_report(CPU))
    got = pd.read_csv(io.StringIO(_ok("advise", CPU, "--csv")))
    assert list(got.columns) == list(want.columns) and list(got["finding"]) == list(want["finding"])
    text = [line for line in _ok("advise", CPU).splitlines() if not line.startswith(("note:", " "))]
    # the command line says a finding in the library's own words, one line each (labkit.show.text)
    from labkit.show.text import finding_line

    top = want.iloc[0]
    assert text[0] == finding_line(1, top.to_dict()) and text[0].startswith(f"1. {top['finding']}")
    assert f"{top['predicted_speedup']:.2f}x ({top['basis']})" in text[0]


def test_bottleneck_json_and_text_are_the_python_result():
    want = labkit.bottleneck(labkit.load_report(GPUTEST))
    got = json.loads(_ok("bottleneck", GPUTEST, "--json"))
    assert got["sentence"] == want.sentence and got["stage"] == want.stage and got["tid"] == want.tid
    assert np.isclose(got["wall_ms"], want.wall_ms) and len(got["table"]) == len(want.table)
    assert " ".join(_ok("bottleneck", GPUTEST, "--explain").splitlines()[3:]) == want.sentence


def test_whole_keeps_the_whole_trace_where_the_default_leaves_start_up_out():
    rep = labkit.load_report(GPUTEST)
    steady, whole = labkit.bottleneck(rep), labkit.bottleneck(rep, steady=False)
    assert steady.where.startswith("steady window") and whole.where == "" and steady.wall_ms < whole.wall_ms
    assert " ".join(_ok("bottleneck", GPUTEST, "--whole", "--explain").splitlines()[2:]) == whole.sentence
    note = json.loads(_ok("advise", GPUTEST, "--whole", "--json"))["note"]
    assert note == labkit.advise(rep, steady=False).attrs["note"] and "whole trace" in note


def test_kernels_text_is_in_ms_with_the_unit_in_the_header_unless_ns():
    """The text tables show ms to the microsecond under ``*_ms`` names, as summary does; ``--ns`` gives
    the API's nanoseconds and names; both are the same figures."""
    rep = labkit.load_report(GPUTEST)
    want = labkit.kernel_percentiles(rep).set_index("name")

    def table(*extra):
        lines = _ok("kernels", GPUTEST, "--what", "percentiles", "--wide", *extra).splitlines()
        head = lines[0].split()
        return head, {ln.rsplit(None, len(head) - 1)[0]: dict(zip(head[1:], ln.rsplit(None, len(head) - 1)[1:]))
                      for ln in lines[1:]}

    head, ms = table()
    assert "total_ms" in head and "p90_ms" in head and not [h for h in head if h.endswith("_ns")]
    ns_head, ns = table("--ns")
    assert "total_ns" in ns_head and not [h for h in ns_head if h.endswith("_ms")]
    assert ms.keys() == ns.keys() == set(want.index) and len(want) > 1
    for name, r in ms.items():
        assert float(r["total_ms"]) == pytest.approx(want.at[name, "total_ns"] / 1e6, abs=5e-4)
        assert int(ns[name]["total_ns"]) == want.at[name, "total_ns"]


def test_window_in_ms_and_within_reach_the_api():
    rep = labkit.load_report(GPUTEST)
    batch = rep.nvtx[rep.nvtx["name"] == "batch"].sort_values("start_ns")
    s_ms, e_ms = int(batch["start_ns"].iloc[3] // 1e6), int(batch["end_ns"].iloc[6] // 1e6) + 1
    got = json.loads(_ok("kernels", GPUTEST, "--json", "--window", f"{s_ms},{e_ms}"))
    w = (s_ms * 1_000_000, e_ms * 1_000_000)
    for key, fn in (("percentiles", labkit.kernel_percentiles), ("latency", labkit.launch_latency),
                    ("queue", labkit.queue_depth), ("streams", labkit.stream_summary),
                    ("bandwidth", labkit.copy_bandwidth)):
        want = fn(rep, window=w)
        pd.testing.assert_frame_equal(pd.DataFrame(got[key], columns=list(want.columns)), want, check_dtype=False,
                                      obj=key)
    assert 0 < sum(r["count"] for r in got["percentiles"]) < len(rep.kernels)
    within = json.loads(_ok("bottleneck", GPUTEST, "--json", "--within", "batch"))
    assert within["sentence"] == labkit.bottleneck(rep, within="batch").sentence


def test_kernels_csv_and_text_tables():
    rep = labkit.load_report(GPUTEST)
    got = pd.read_csv(io.StringIO(_ok("kernels", GPUTEST, "--what", "latency", "--by-call", "--csv")))
    want = labkit.launch_latency(rep, by_call=True)
    assert list(got.columns) == list(want.columns) and list(got["launches"]) == list(want["launches"])
    text = _ok("kernels", GPUTEST, "--what", "percentiles,bandwidth", "--wide")
    assert "== percentiles ==" in text and "== bandwidth ==" in text and "[CUDA memcpy Device-to-Host]" in text


def test_timeline_writes_only_where_asked_and_never_over_a_file(tmp_path):
    import matplotlib.image

    out = _ok("timeline", GPUTEST, "-o", "t.png", cwd=tmp_path)
    png = tmp_path / "t.png"
    assert out.startswith("wrote t.png") and matplotlib.image.imread(png).shape[0] > 100
    before = png.read_bytes()
    again = _run("timeline", GPUTEST, "-o", "t.png", "--window", "8000,8500", cwd=tmp_path)
    assert again.returncode == 1 and len(again.stderr.strip().splitlines()) == 1 and "--overwrite" in again.stderr
    assert png.read_bytes() == before
    _ok("timeline", GPUTEST, "-o", "t.png", "--window", "8000,8500", "--overwrite", cwd=tmp_path)
    assert png.read_bytes() != before
    _ok("timeline", GPUTEST, "-o", "t.html", "--within", "batch", cwd=tmp_path)
    html = (tmp_path / "t.html").read_text()
    assert "Bokeh" in html and "d2h" in html
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.html", "t.png"]  # no temporary file left


def test_faults_end_in_one_line(tmp_path):
    for args, rc, words in (
            (("advise", tmp_path / "nope.sqlite"), 1, "nope.sqlite"),
            (("kernels", GPUTEST, "--window", "5"), 2, "START_MS,END_MS"),
            (("kernels", GPUTEST, "--what", "speed"), 2, "unknown --what speed"),
            (("timeline", GPUTEST, "-o", tmp_path / "t.jpg"), 2, ".png, .svg, .pdf or .html"),
            (("timeline", GPUTEST, "-o", tmp_path / "no" / "t.png"), 1, "cannot write"),
            (("bottleneck", GPUTEST, "--within", "nosuchrange"), 1, "nosuchrange"),
            (("compare", CPU), 2, "two reports")):
        r = _run(*args)
        assert r.returncode == rc and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_counts_are_whole_numbers_from_zero():
    """--top, --warmup and --max-depth refuse a negative or non-integer count (``--top -1`` used to drop
    the last row, a negative --warmup was taken) with argparse's error, naming the argument."""
    for args in (("compare", CPU, GPU, "--top", "-1"), ("advise", CPU, "--warmup", "-3"),
                 ("bottleneck", CPU, "--warmup", "1.5"), ("summary", CPU, "--warmup", "-1"),
                 ("timeline", CPU, "-o", "x.png", "--max-depth", "-2")):
        r = _run(*args)
        last = r.stderr.strip().splitlines()[-1]
        assert r.returncode == 2 and f"argument {args[-2]}: " in last and "Traceback" not in r.stderr, r.stderr
        assert ("below 0: give 0 or more" if args[-1].startswith("-") else "is not a whole number") in last
    assert len(_ok("compare", CPU, GPU, "--top", "0", "--csv").splitlines()) > \
        len(_ok("compare", CPU, GPU, "--top", "2", "--csv").splitlines()) == 3


def test_compare_prints_the_headline_first():
    text = _ok("compare", CPU, GPU, "--top", "3").splitlines()
    head = text[:text.index("")]  # the headline wrapped at 100 characters, then a blank line
    assert " ".join(head) == str(labkit.headline(CPU, GPU, measured=False)) and max(map(len, head)) <= 100
    assert text[len(head) + 1].startswith("kind ")
    got = json.loads(_ok("compare", *[FIX / f"repeats_20ms_{i}.nsys2022.4.sqlite" for i in (1, 2, 3)], "--vs",
                         *[FIX / f"repeats_10ms_{i}.nsys2022.4.sqlite" for i in (1, 2, 3)], "--json"))
    h = labkit.headline([FIX / f"repeats_20ms_{i}.nsys2022.4.sqlite" for i in (1, 2, 3)],
                        [FIX / f"repeats_10ms_{i}.nsys2022.4.sqlite" for i in (1, 2, 3)])
    assert got["headline"]["sentence"] == h.sentence and got["headline"]["speedup_interval"] == list(h.speedup_interval)
    assert {r["name"] for r in got["rows"]} >= {"step", "run"}


def test_commands_import_only_what_they_need():
    code = ("import sys\nfrom labkit import cli\nfor c in ('advise', 'bottleneck', 'timeline', 'kernels', 'compare', 'table'):\n"
            "    try:\n        cli.main([c, '--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('pandas', 'numpy', 'matplotlib', 'bokeh', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
