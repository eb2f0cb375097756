"""Every mode's settings are long enough to measure throughput (issue 21, Little's law): for each
step of the mode's catalogue, the frames the run holds up to the detector, plus the batch in the
hands of each stage past it, are at most 10 % of the frames it times. The batches past the detector
are the room to spare: with 700 frames a CI run carried 69 frames (61 held up to the detector) into
one rank's window and was flagged too short."""
from __future__ import annotations

import pytest

from labbook.record_plan import PER_STEP_MODES, frames_for
from labbook.settings import MODES, mode_note, settings
from labbook.steps import catalogue
from source_code.options import BY_NAME
from source_code.results import THROUGHPUT_RULE
from source_code.runner import frames_held
from source_code.stages import DETECTOR_STAGES, STAGES


@pytest.mark.parametrize("mode, gpu", [("small", False), ("full", False), ("full", True)])
def test_every_step_of_every_mode_is_long_enough_to_measure_throughput(mode, gpu):
    s = settings(mode, gpu=gpu)
    default_q = int(BY_NAME["queue_size"].default)
    for name, step in catalogue(mode, gpu=gpu).items():
        f = step.flags
        streams = int(f.get("streams", 1))
        queued = bool(f.get("queues"))
        held = frames_held(batch=int(f.get("batch_size", 1)), queue_size=int(f.get("queue_size", default_q)),
                           streams=streams, queued=queued, threaded=queued or streams > 1)
        past = STAGES.index(DETECTOR_STAGES[-1]) + 1
        held += len(STAGES[past:]) * int(f.get("batch_size", 1))  # postprocess, track, display: a batch each
        # small mode sizes each step by its queues (labbook.record_plan); full mode runs its settings' frames
        frames = frames_for(f, mode) if mode in PER_STEP_MODES else s.frames
        timed = streams * frames - s.warmup - held  # frames carried into the window are not timed
        assert held <= THROUGHPUT_RULE * timed, (mode, gpu, name, held, timed)
        assert s.video_seconds * 30 >= frames  # the clip (30 fps) has the frames


def test_small_mode_says_it_is_a_rehearsal():
    assert "rehearsal" in mode_note("small")
    assert mode_note("full") is None
    assert set(MODES) == {"small", "full", "record"} and mode_note("record") is None  # record: the GPU driver's
