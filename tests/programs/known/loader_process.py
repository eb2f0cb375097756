"""(ac) A data-loader process: a spawned worker process without ranges prepares each item (20 ms)
and hands it over through ``multiprocessing.Pool(1).imap``, as a DataLoader's worker does; the main
process runs 'forward' (15 ms) and 'backward' (10 ms) on each. The main process limits (25 ms an
item). ``--fix``: 'forward' costs nothing.

Known answer: lever ``cheaper_stage`` on ``forward``; the loader then limits: 25/20 = 1.25x. A model
that counts the loader's time inside forward's ranges as forward's own work (as a library's thread
pool inside a call would be) predicts 2.5x.
"""
from _known import args, cpu, loaded

from labkit import annotate

if __name__ == "__main__":
    a = args(__doc__, items=60)
    for i in loaded(a.items, 20):
        with annotate.range("forward", batch=i, items=1):
            if not a.fix:
                cpu(15)
        with annotate.range("backward", batch=i, items=1):
            cpu(10)
