"""(o, second shape) Ask a worker process, wait for its answer, then finish the item yourself: each
item the main process sends a request down a pipe to one forked worker process, which computes the
answer (150 ms, no ranges) and sends it back, and waits for it in 'ask'; then it finishes the item
itself in 'finish' (75 ms) before asking for the next one. The two processes take turns: neither
works while the other does. ``--fix``: ask for the next item before finishing the last one, so the
finishing runs while the worker computes.

Known answer: lever ``overlap_stages`` on 'finish'; per item 225 ms -> 150 ms (the finish hidden
behind the next answer), 16 items: 1.5x on two free cores (one for the worker, one for the finish).
"""
import multiprocessing as mp

from _known import Steady, args, cpu

from labkit import annotate


def serve(conn) -> None:
    while (item := conn.recv()) is not None:
        cpu(150)
        conn.send(item)
    conn.close()


if __name__ == "__main__":
    a = args(__doc__, items=16)
    ctx = mp.get_context("fork")
    mine, theirs = ctx.Pipe()
    worker = ctx.Process(target=serve, args=(theirs,), name="worker")
    worker.start()
    mine.send(-1)  # the worker's first answer: its start-up is not the steady loop
    mine.recv()
    with Steady(a.items):
        if a.fix:
            mine.send(0)
            for i in range(a.items):
                with annotate.range("ask", batch=i, items=1):
                    answer = mine.recv()
                if i + 1 < a.items:
                    mine.send(i + 1)
                with annotate.range("finish", batch=i, items=1):
                    cpu(75)
        else:
            for i in range(a.items):
                with annotate.range("ask", batch=i, items=1):
                    mine.send(i)
                    answer = mine.recv()
                with annotate.range("finish", batch=i, items=1):
                    cpu(75)
    mine.send(None)
    worker.join()
