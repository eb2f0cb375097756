"""``summary``'s fast start (issue 64): the text it prints from sqlite3 alone (labkit.stats.lean) is,
character for character, what the full path (load_report and the summaries that equal nsys stats)
prints, on every fixture and real report; and a text summary imports neither pandas nor numpy."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labkit import cli
from labkit.stats.lean import lean_summaries

FIX = Path(__file__).parent / "fixtures"
EXPORTS = sorted(FIX.glob("*.sqlite")) + sorted((FIX / "real").glob("*.sqlite"))


def _printed(capsys, monkeypatch, lean: bool, argv) -> tuple[int, str, str]:
    monkeypatch.setattr(cli, "_LEAN", lean)
    rc = cli.main(argv)
    got = capsys.readouterr()
    return rc, got.out, got.err


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.stem)
def test_the_plain_reading_prints_what_the_full_path_prints(export, capsys, monkeypatch):
    for extra in (["--wide"], ["--ns", "--wide"], []):
        monkeypatch.setenv("COLUMNS", "90")
        for what in ("nvtx,kernels", "cuda_api,osrt", "memcpy,memsize", "kernels,cuda_api,nvtx,memcpy"):
            argv = ["summary", str(export), "--what", what, *extra]
            assert _printed(capsys, monkeypatch, True, argv) == _printed(capsys, monkeypatch, False, argv), (what, extra)


def test_the_plain_reading_covers_most_exports_and_leaves_the_odd_ones_to_the_full_path():
    taken = [p.name for p in EXPORTS if lean_summaries(p, ["nvtx", "kernels"]) is not None]
    assert len(taken) >= 20, taken
    cpu = FIX / "pipeline.nsys2022.4.sqlite"  # a CPU run: its note, no kernels
    assert lean_summaries(cpu, ["kernels"])[1][0].endswith("no CUDA tables (was the run traced with -t cuda, "
                                                           "and did it use the GPU?)")
    assert lean_summaries(cpu, ["projection"]) is None  # what it does not read: the full path
    assert len([p for p in EXPORTS if lean_summaries(p, ["cuda_api", "osrt", "memcpy"]) is not None]) >= 20
    assert lean_summaries(FIX / "gputest.nvtx-only.nsys2022.4.sqlite", ["nvtx"]) is None  # CUDA calls only


def test_a_text_summary_imports_neither_pandas_nor_numpy():
    code = ("import sys\nfrom labkit.cli import main\n"
            f"assert main(['summary', {str(FIX / 'real' / 'NTHU-SC_2025.1_icon_graupel_gpu.sqlite')!r}, '--what', "
            "'nvtx,kernels,cuda_api,osrt,memcpy']) == 0\n"
            "try:\n    main(['summary', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'numpy', 'pyarrow') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.splitlines()[-1] == "[]", r.stdout[-500:] + r.stderr[-2000:]
