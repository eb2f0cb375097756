"""Notebooks 04-07 as the lesson needs them: each lab step predicted then judged, a computed
closing lever, exercises with a hidden solution and an expected result naming its machine, and
H100 evidence read from reports/reference (never from tests/)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labbook.steps import catalogue

BOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("0[4-7]_*.ipynb"))


def _cells(book: Path, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(book.read_text())["cells"] if c["cell_type"] == kind]


def test_the_four_notebooks_are_there():
    assert [b.name[:2] for b in BOOKS] == ["04", "05", "06", "07"]


@pytest.mark.parametrize("book", BOOKS[:3], ids=lambda b: b.name[:2])
def test_each_catalogue_step_is_predicted_then_judged(book):
    code = _cells(book, "code")
    steps = set(catalogue("small", gpu=False)) | set(catalogue("small", gpu=True))
    runs = [(i, m.group(1)) for i, src in enumerate(code) for m in [re.search(r'lab\.run_step\("(\w+)"', src)]
            if m and m.group(1) in steps]
    assert runs or book.name.startswith("06")
    for i, step in runs:
        assert any(f'lab.advice("{step}"' in src for src in code[:i]), step
        assert any(f'lab.verdict("{step}")' in src for src in code[i + 1:]), step
    assert any("lab.next_lever(" in src for src in code)  # the closing lever is computed


def test_06_predicts_and_judges_its_interval():
    code = _cells(BOOKS[2], "code")
    assert any("lab.advice(" in s for s in code) and any("lab.verdict(every_k.step)" in s for s in code)
    assert any("lab.interval.accuracy_floor(rows)" in s for s in code)
    assert any("lab.interval.detected_frames(" in s for s in code)
    assert "runs on 1/K of the frames" not in "\n".join(_cells(BOOKS[2], "markdown"))


@pytest.mark.parametrize("book", BOOKS, ids=lambda b: b.name[:2])
def test_exercise_with_solution_and_expected_result(book):
    text = "\n".join(_cells(book, "markdown"))
    assert "### Your turn" in text and "<details><summary>Solution</summary>" in text
    expected = text.split("**Expected result**", 1)[1][:200]
    # relative to the reader's own run, or naming whose figures they are
    assert any(k in expected for k in ("relative to your own", "2-core CPU machine", "H100 reference")), expected
    assert "EXPECTED" not in text  # no placeholder left


@pytest.mark.parametrize("book", BOOKS, ids=lambda b: b.name[:2])
def test_no_false_statements_and_no_tests_folder(book):
    text = "\n".join(_cells(book, "markdown") + _cells(book, "code"))
    assert "reference results stand in" not in text and "show the reference results instead" not in text
    assert "FP16 convolutions run on tensor cores" not in text
    assert "tests/" not in text and "fixtures" not in text


def test_07_quiz_and_predicted_chart_are_computed():
    code = "\n".join(_cells(BOOKS[3], "code"))
    for call in ("lab.summary.quiz(table)", 'lab.summary.figure(table, "predicted"', "lab.summary.takeaways(table)"):
        assert call in code
    assert "## Take-aways" in "\n".join(_cells(BOOKS[3], "markdown"))
    assert "- **Measure first" not in "\n".join(_cells(BOOKS[3], "markdown"))  # no typed take-aways
