"""(ad) One annotated stage, fed by a loader process: a spawned worker process without ranges
prepares each item (10 ms) and hands it over through ``multiprocessing.Pool(1).imap``; the main
process runs its one stage, 'consume' (15 ms), on each. The main process limits (15 ms an item).
``--fix``: 'consume' takes 5 ms.

Known answer: lever ``cheaper_stage`` on ``consume``; the loader then limits: 15/10 = 1.5x. With one
stage on the limiting thread there is no other stage for it to dominate, but there is other work:
the loader's, which sets how far a cheaper 'consume' can go.
"""
from _known import args, cpu, loaded

from labkit import annotate

if __name__ == "__main__":
    a = args(__doc__, items=60)
    for i in loaded(a.items, 10):
        with annotate.range("consume", batch=i, items=1):
            cpu(5 if a.fix else 15)
