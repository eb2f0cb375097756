"""labbook.levers: labkit's general lever ids meet the application's flags in one place, and
every option the lab's catalogue changes is reachable from some lever."""
from __future__ import annotations

import labkit.judge.advice
import labbook as lab
import pytest
from labbook.levers import OPTIONS_OF, SETTINGS_OPTIONS, flags_of, lever_text, levers_of
from source_code.options import BY_NAME


@pytest.mark.parametrize("mode, gpu", [("small", False), ("full", False), ("full", True)])
def test_every_catalogue_option_is_pulled_by_some_lever(mode, gpu):
    used = {k for st in lab.catalogue(mode, gpu).values() for k in st.flags}
    reachable = {o for opts in OPTIONS_OF.values() for o in opts}
    assert used - SETTINGS_OPTIONS <= reachable, used - SETTINGS_OPTIONS - reachable


def test_every_optimisation_option_of_the_application_is_a_lever_or_a_setting():
    reachable = {o for opts in OPTIONS_OF.values() for o in opts}
    assert set(BY_NAME) <= reachable | SETTINGS_OPTIONS, set(BY_NAME) - reachable - SETTINGS_OPTIONS


def test_levers_are_labkits_ids_and_name_real_flags():
    ids = getattr(labkit.judge.advice, "LEVERS", None)  # labkit's list of lever ids, where it has one
    if ids is not None:
        assert set(OPTIONS_OF) <= set(ids)
    for lever in OPTIONS_OF:
        assert all(f in {o.flag for o in BY_NAME.values()} for f in flags_of(lever))
    # a precision makes the detector's own work cheaper: its own lever, and the cheaper-stage bound
    assert levers_of({"precision": "fp16"}) == ["reduce_precision", "cheaper_stage"]
    assert levers_of({"interval": 8}) == ["skip_work"] and levers_of({"osd": False}) == ["remove_stage"]
    assert lever_text("batch") == "batch (--batch-size)" and flags_of("reduce_precision") == ["--precision", "--tf32"]
