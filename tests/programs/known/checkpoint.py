"""(aa) A range without the mark beside the marked ones: each step (10 ms) carries labkit's ``items``
mark; every tenth step is followed by a 'checkpoint' (150 ms) that carries none, as a periodic
evaluation or save often does. The checkpoint is three fifths of the run. ``--fix``: the checkpoint
costs nothing.

Known answer: lever ``cheaper_stage`` on ``checkpoint``; (10 x 10 + 150) / (10 x 10) = 2.5x (stages
chosen as the marked ranges alone had left the checkpoint out and found nothing; a window from the
start of a checkpoint to the end of the last held one checkpoint more than its share and read 2.87x).
"""
from _known import Steady, args, cpu

from labkit import annotate

a = args(__doc__, items=60)

with Steady(a.items):
    for i in range(a.items):
        with annotate.range("step", batch=i, items=1):
            cpu(10)
        if i % 10 == 9:
            with annotate.range("checkpoint"):
                if not a.fix:
                    cpu(150)
