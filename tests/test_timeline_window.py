"""Issue 33: plot_timeline(window=) and the interactive timeline check a window as restrict()
does: reversed, empty or malformed is the same WindowError, never a blank figure."""
from __future__ import annotations

from pathlib import Path

import pytest

import labkit
from labkit.report.window import WindowError

REP = Path(__file__).resolve().parent / "fixtures" / "domains.nsys2022.4.sqlite"


@pytest.mark.parametrize("window", [(200, 100), (100, 100), ("a", "b"), (1,)])
def test_a_bad_window_is_the_error_restrict_raises(window):
    rep = labkit.load_report(REP)
    with pytest.raises(WindowError) as theirs:
        labkit.restrict(rep, window=window)
    with pytest.raises(WindowError) as ours:
        labkit.plot_timeline(rep, window=window)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(WindowError):
        labkit.interactive_timeline(rep, window=window)
