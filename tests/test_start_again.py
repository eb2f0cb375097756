"""nsys 2022.4 sometimes ends before its program ran when other nsys sessions start beside it (its
start-up races, :func:`labkit.record.nsys.start_race`): labkit.profile starts it again and says so in
the log, through the one helper every start of nsys uses (:func:`labkit.record.nsys.start_again`)."""
import shutil

import pytest

from labkit.record.nsys import START_TRIES, record, start_again, start_race
from faultkit import START_FAILURES, racing_nsys

pytestmark = pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys on PATH")


@pytest.mark.parametrize("failure", sorted(START_FAILURES))
def test_a_profile_that_lost_its_start_up_race_is_started_again(tmp_path, failure):
    shim = racing_nsys(tmp_path / "bin", failure, shutil.which("nsys"))
    rec = record(["true"], name="again", trace="nvtx", outdir=tmp_path / "out", progress=False, nsys=str(shim))
    assert rec.nsys_rep.stat().st_size > 0
    log = rec.log.read_text()
    said = START_FAILURES[failure].split("\\n")[-1]
    assert start_race(log) and log.index(said) < log.index(f"started again (2 of {START_TRIES})"), log


def test_start_again_says_so_until_the_last_start():
    said = []
    assert [start_again(a, said.append, what="a rank") for a in range(START_TRIES)] == \
        [True] * (START_TRIES - 1) + [False]
    assert said[-1].startswith("nsys failed to start a rank") and said[-1].endswith(
        f"started again ({START_TRIES} of {START_TRIES})") and len(said) == START_TRIES - 1
    assert not start_race("Generated:\n/tmp/x.nsys-rep") and not start_race("Local Endpoint")
