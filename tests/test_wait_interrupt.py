"""labkit's wait for nsys (``labkit.record.proc.wait_with_progress``): a Ctrl-C that lands anywhere
in its loop, the progress bar's redraw included, stops the child as one in ``wait()`` does, and is
never a bare ``KeyboardInterrupt`` that leaves the child running (CI caught the redraw's window:
``labkit.profile`` raised an empty KeyboardInterrupt and said nothing of the report)."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

import labkit.record.proc as proc_mod


class _RedrawInterrupted:
    """A progress bar whose first redraw is where the Ctrl-C lands."""

    def __init__(self):
        self.redraws = 0

    def refresh(self):
        self.redraws += 1
        if self.redraws == 1:
            raise KeyboardInterrupt

    def close(self):
        pass


def test_a_ctrl_c_during_the_progress_redraw_stops_the_child_like_any_other(monkeypatch):
    bar = _RedrawInterrupted()
    monkeypatch.setattr(proc_mod, "progress_bar", lambda *a, **k: bar)
    # a real child that ends on SIGINT (as nsys does: it stops the program and writes the report)
    child = subprocess.Popen([sys.executable, "-c", "import time\ntry:\n    time.sleep(60)\n"
                              "except KeyboardInterrupt:\n    raise SystemExit(3)"])
    try:
        interrupted = proc_mod.wait_with_progress(child, "test", progress=False)
    except KeyboardInterrupt:
        child.kill()
        pytest.fail("the Ctrl-C escaped the wait, and the child was left running")
    finally:
        child.wait(timeout=60)
    assert interrupted == 1 and bar.redraws >= 1
    assert child.returncode in (3, -signal.SIGINT) and child.stopped_by == "interrupted"
