"""The committed notebooks' own text (issue 31): an estimate is never called a bound, and every
computed sentence is displayed. Reads the sources only (no kernel), so it runs in every CI job.

Rule 1 (markdown cells, and the instructor notes in notebooks/README.md): a sentence that speaks
of a prediction (``predict``, ``estimat``, ``advice``, ``predicted_speedup``) never gives it a
limit's words (``upper bound``, ``at most``, ``the most it can``, ``predicted bound``, ``bound
on``/``bound for``), unless the same sentence names the ``basis`` that marks the rows that are true
bounds. Sentences are split at ``.``, ``!``, ``?`` or ``;`` followed by white space.

Rule 3 (markdown cells): a sentence states no fact of the machine it runs on (``without a GPU
here``, ``this machine has no GPU``, ``on this CPU``) unless it makes it a condition (``where``,
``if``, ``when``, ``unless``): the same notebook runs on a CPU box, on a GPU box and replayed from
either, so only a computed sentence may say which one this is.

Rule 2 (code cells): each call of a helper that returns a displayable sentence (``lab.say``,
``lab.verdict``, ``lab.advice``, ``lab.compare``, ``lab.next_lever``) is shown: it is the value of
the cell's last statement (an expression; a conditional expression of such calls counts, and so
does ``skip or lab.say(...)``, where a step did not run: ``lab.skip_note``), or an
argument of ``display(...)``, or the body of a ``lambda`` (its value goes back to the helper that
calls it, as ``lab.evidence.lever`` does). Anywhere else Jupyter computes it and drops it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SENTENCE_HELPERS = {"say", "verdict", "advice", "compare", "next_lever"}
PREDICTION = re.compile(r"predict|estimat|\badvice\b|predicted_speedup", re.I)
LIMIT = re.compile(r"upper bound|\bat most\b|the most it can|predicted bound|\bbound (?:on|for)\b", re.I)
QUALIFIED = re.compile(r"\bbasis\b", re.I)


PLATFORM = re.compile(r"\b(?:with(?:out)?|no|has no|have no|lacks?) (?:a |an )?(?:CUDA )?(?:GPU|TensorRT|CUDA)\b[^.;]*?"
                      r"\b(?:here|this machine|this box)\b|\b(?:here|this machine|this box)\b[^.;]*?\b(?:has|have|lacks?) "
                      r"(?:no |a |an )?(?:CUDA )?(?:GPU|TensorRT)\b|\bon this (?:CPU|GPU)\b", re.I)
CONDITION = re.compile(r"\b(?:where|if|when|whenever|unless|whether)\b", re.I)


def sentences(markdown: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?;])\s+", " ".join(markdown.split())) if s]


def bound_on_estimate(markdown: str) -> list[str]:
    """Rule 1: the sentences of ``markdown`` that call a prediction a bound without its basis."""
    return [s for s in sentences(markdown) if PREDICTION.search(s) and LIMIT.search(s) and not QUALIFIED.search(s)]


def platform_as_fact(markdown: str) -> list[str]:
    """Rule 3: the sentences of ``markdown`` that state this machine's GPU or TensorRT as a fact."""
    return [s for s in sentences(markdown) if PLATFORM.search(s) and not CONDITION.search(s)]


def python_of(source: str) -> str:
    """A cell's source as plain Python (IPython's own transform: ``%magics``, ``!shell``)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _is_helper(n) -> bool:
    """A call whose value only shows when displayed: a lab sentence, or a labkit figure (``plot_*``)."""
    return (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
            and ((n.func.value.id == "lab" and n.func.attr in SENTENCE_HELPERS)
                 or (n.func.value.id == "labkit" and n.func.attr.startswith("plot_"))))


def _helper_calls(node) -> list[ast.Call]:
    return [n for n in ast.walk(node) if _is_helper(n)]


def _shown_value(expr) -> list[ast.Call]:
    """The helper calls whose value the expression is (itself, either branch of ``a if c else b``,
    or any operand of ``a or b``: a cell's ``skip or lab.say(...)``)."""
    if isinstance(expr, ast.IfExp):
        return _shown_value(expr.body) + _shown_value(expr.orelse)
    if isinstance(expr, ast.BoolOp):
        return [c for v in expr.values for c in _shown_value(v)]
    return [expr] if _is_helper(expr) else []


def hidden_sentences(source: str) -> list[str]:
    """Rule 2: the sentence-helper calls of a code cell whose value is never displayed."""
    tree = ast.parse(python_of(source))
    shown = set()
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        shown.update(map(id, _shown_value(tree.body[-1].value)))
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "display":
            shown.update(id(a) for a in n.args if _is_helper(a))
        if isinstance(n, ast.Lambda) and _is_helper(n.body):
            shown.add(id(n.body))
    return [ast.unparse(c)[:80] for c in _helper_calls(tree) if id(c) not in shown]


def test_the_rules_catch_what_they_name():
    """Each rule on small texts, so that the checks on the notebooks below can fail."""
    assert bound_on_estimate("The profile predicts the most it can gain. Then it runs.")
    assert bound_on_estimate("What the profile predicts the next change can gain at most.")
    assert not bound_on_estimate("An estimate of the gain, or an upper bound where its `basis` says \"bound\".")
    assert not bound_on_estimate("Bounded queues; the estimate comes later. A stage can save at most its share.")
    assert platform_as_fact("The evidence is in the copies. Without a GPU here, the H100's table shows it:")
    assert platform_as_fact("This machine has no GPU, so the steps are skipped.")
    assert platform_as_fact("On this CPU the detector limits.")
    assert not platform_as_fact("Where this machine has no GPU (or no TensorRT), those steps are skipped.")
    assert not platform_as_fact("If this machine has a GPU, the cell below runs it. The GPU is fast.")
    assert hidden_sentences("if ok:\n    lab.say('x')") == ["lab.say('x')"]
    assert hidden_sentences("lab.say('x')\nframe") == ["lab.say('x')"]
    assert hidden_sentences("lab.say(f'{lab.verdict(s)}')") == ["lab.verdict(s)"]
    assert hidden_sentences("%matplotlib inline\nx = 1\nlab.say('a') if x else lab.say('b')") == []
    assert hidden_sentences("skip = lab.skip_note(s, what='w')\nskip or lab.say('x')") == []
    assert hidden_sentences("skip or lab.say('x')\nframe") == ["lab.say('x')"]
    assert hidden_sentences("if ok:\n    display(lab.say('x'))\nlab.verdict('s')") == []
    assert hidden_sentences("show(lambda: lab.compare(a, 'b'))") == []
    assert hidden_sentences("if reps is not None:\n    labkit.plot_rank_timeline(reps)") == ["labkit.plot_rank_timeline(reps)"]
    assert hidden_sentences("labkit.plot_rank_timeline(reps) if reps is not None else None") == []


def flagged(book, cell_type: str, find) -> str:
    """What ``find`` flags in the notebook's cells of ``cell_type``, one "name cN: text" line each."""
    cells = nbformat.read(book, as_version=4).cells
    return "\n".join(f"{book.name} c{i}: {s}" for i, c in enumerate(cells) if c.cell_type == cell_type
                     for s in find(c.source))


@pytest.mark.parametrize("book", BOOKS, ids=[b.name[:2] for b in BOOKS])
def test_no_estimate_is_called_a_bound(book):
    bad = flagged(book, "markdown", bound_on_estimate)
    assert not bad, bad


@pytest.mark.parametrize("book", BOOKS, ids=[b.name[:2] for b in BOOKS])
def test_no_markdown_states_the_machine_it_runs_on(book):
    bad = flagged(book, "markdown", platform_as_fact)
    assert not bad, bad


def test_instructor_notes_call_no_estimate_a_bound():
    bad = bound_on_estimate((ROOT / "notebooks" / "README.md").read_text())
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("book", BOOKS, ids=[b.name[:2] for b in BOOKS])
def test_every_computed_sentence_is_displayed(book):
    bad = flagged(book, "code", hidden_sentences)
    assert not bad, bad


def test_every_sentence_helper_is_a_lab_name():
    import labbook

    assert all(callable(getattr(labbook, name, None)) for name in SENTENCE_HELPERS)


def test_guess_cells_hold_no_number_and_are_parameters():
    """Predict, then measure: a guess cell leaves the guess to the learner (None, no number typed
    in for them) and is tagged ``parameters``, where scripts/run_lab.py injects a headless guess."""
    cells = [(b.name, c) for b in BOOKS for c in nbformat.read(b, as_version=4).cells if c.cell_type == "code"
             and re.search(r"^MY_\w+\s*=", c.source, re.M)]
    assert cells, "no guess cell in the lab"
    for name, c in cells:
        values = [n.value for n in ast.parse(python_of(c.source)).body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id.startswith("MY_") for t in n.targets)]
        assert all(isinstance(v, ast.Constant) and v.value is None for v in values), (name, c.source)
        assert "parameters" in c.metadata.get("tags", []), (name, c.metadata)


LEVER_BOOKS = [b for b in BOOKS if b.name[:2] in ("02", "03", "04", "05", "06", "08")]


@pytest.mark.parametrize("book", LEVER_BOOKS, ids=[b.name[:2] for b in LEVER_BOOKS])
def test_every_lever_step_takes_a_guess_typed_before_its_estimate(book):
    """Guess, estimate, measure, conclude: each catalogue step a notebook runs (run_step on a step
    that is not an exercise, or run_scaled) passes the learner's guess, from a guess cell (tagged
    parameters) placed before the cell that runs it and before the advice it runs under."""
    cells = nbformat.read(book, as_version=4).cells
    runs = [(i, c) for i, c in enumerate(cells) if c.cell_type == "code"
            and re.search(r"lab\.run_(step|scaled)\(", c.source) and 'kind="exercise"' not in c.source
            and "sweep" not in c.source.split("run_")[1][:60] and 'kind="sweep"' not in c.source
            or (c.cell_type == "code" and re.search(r"lab\.run_(step|scaled)\(", c.source) and "guess=" in c.source)]
    runs = [(i, c) for i, c in runs if "for " not in c.source]  # 04's batch-1 loop: a sweep of two
    assert runs, book.name
    for i, c in runs:
        m = re.search(r"guess=(MY_GUESS\w*)", c.source)
        assert m, f"{book.name} c{i} runs a lever step without the learner's guess:\n{c.source}"
        where = [j for j, d in enumerate(cells[:i]) if d.cell_type == "code" and re.match(rf"{m.group(1)}\s*=", d.source)]
        assert where and "parameters" in cells[where[-1]].metadata.get("tags", []), (book.name, i, m.group(1))


@pytest.mark.parametrize("book", [b for b in BOOKS if b.name[:2] in ("01", "02", "03", "04", "05", "06")],
                         ids=lambda b: b.name[:2])
def test_every_hands_on_exercise_has_a_check_before_its_solution(book):
    """The learner changes a setting (a MY_ parameter that is not a guess), runs it, and a check cell
    reads their own result (labbook.check) before the collapsed solution."""
    cells = nbformat.read(book, as_version=4).cells
    params = [i for i, c in enumerate(cells) if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])
              and re.match(r"MY_(?!GUESS)\w+\s*=", c.source)]
    assert params, f"{book.name}: no hands-on exercise"
    for i in params:
        check = next(j for j in range(i, len(cells)) if "lab.check." in cells[j].source)
        solution = next(j for j in range(i, len(cells)) if "<summary>Solution" in cells[j].source)
        assert check < solution, (book.name, i)
