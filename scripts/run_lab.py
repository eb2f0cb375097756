#!/usr/bin/env python
"""Run the lab headless: every notebook in notebooks/ in order, executed with nbclient.

    python scripts/run_lab.py [--mode small|full] [--only 01 | --from 05] [--out reports/notebooks]
    python scripts/run_lab.py --replay reports/reference/h200 [--only 07]

``--replay FOLDER`` runs no step: each step's ledger row, profile and platform come from the
recording in FOLDER (``labbook.replay``), in the mode it was recorded in, so the notebooks print
what they print on that machine. Its ledger and executed copies go to
``$LABKIT_REPORTS/replay/<folder name>/`` (a fresh ledger each time), never into the lab's own.

Working directories: this script may be started from anywhere (it changes to the project root);
each notebook's kernel runs with ``notebooks/`` as its working directory, as in JupyterLab. Every
location the lab uses is absolute (``labbook.settings``: ``$LABKIT_REPORTS``, default
``<project>/reports``), so nothing depends on either.

The mode reaches the notebooks as the environment variable LABKIT_MODE (``labbook`` reads it).
Executed copies, with outputs, are written under --out; the stored notebooks are never modified.
Stops at the first failing notebook and names the cell that failed; after a fix, ``--from NN``
goes on from that notebook (the ledger keeps the earlier steps' rows). A lab step whose run
fails does not stop its notebook: it is a ledger row with ``status: "failed"`` and its reason;
the failed steps of this run, read from the ledger, are listed at the end and the exit status
is 1. Seconds per notebook are kept in ``<out>/timings.json`` (merged across runs, one entry per
notebook: its latest run).

The learner's guesses: a notebook's guess cells (``MY_GUESS_QUEUES = None``) are tagged ``parameters``,
as papermill does it; headless, this script puts a cell tagged ``injected-parameters`` after each that
sets the guess (``--guess``, default 1.5; ``--guess none`` leaves the notebook's None), so the path
with a guess (its ledger row, the verdict beside it) runs too. The hands-on exercises' cells
(``MY_BATCH = None``...) are tagged the same way and get ``ANSWERS``, so each exercise and its check run.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from labbook.settings import LEDGER, REPORTS
from labkit.errors import check_writable
from labkit.record.proc import Stop

ROOT = Path(__file__).resolve().parents[1]
STOP = Stop()
"""The :class:`labkit.record.proc.Stop` of this run (set when run as a script): the signal that stopped it."""


def lab_notebooks(folder: Path = ROOT / "notebooks") -> list[Path]:
    """The lab's notebooks in order (NN_*.ipynb), solutions and checkpoints left out."""
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb") if "solution" not in p.name.lower())


GUESS = 1.5
"""The speed-up a headless run guesses for every guess cell (``--guess``)."""
GUESS_NAME = "MY_GUESS"
"""A guess cell assigns this name or one that starts with it (``MY_GUESS_QUEUES``): each gets ``--guess``."""
ANSWERS = {
    "MY_TRACE": "cuda,nvtx,osrt",  # 01: the trace list that records OS runtime calls
    "MY_FLAGS": {"queues": True},  # 02: the option that gives each stage its own thread
    "MY_BATCH": 3,  # 03: a batch size (8 holds more frames than a small-mode run can time: flagged)
    "MY_INPUT_HW": "128x224",  # 04: a smaller network input
    "MY_OPT_LEVEL": "basic",  # 05: ONNX Runtime's graph optimizations, fewer of them
    "MY_K": 6,  # 06: a tracker interval
}
"""What a headless run types into the hands-on exercises' cells (tagged ``parameters`` as the
guess cells are), so that every exercise and its check cell run in the tests."""


def parameter_names(nb) -> set[str]:
    """The names the notebook's ``parameters`` cells assign."""
    return {t.id for cell in nb.cells if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", [])
            for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def headless_values(nb, guess: float | None) -> dict:
    """What a headless run puts in the notebook's parameters cells: ``guess`` in every guess
    (:data:`GUESS_NAME`), :data:`ANSWERS` in the exercises."""
    names = parameter_names(nb)
    return {**{n: guess for n in names if n.startswith(GUESS_NAME)}, **{n: v for n, v in ANSWERS.items() if n in names}}


def inject_parameters(nb, values: dict) -> int:
    """Papermill's convention on an nbformat notebook: after each code cell tagged ``parameters``,
    a code cell tagged ``injected-parameters`` that assigns those of ``values`` (name -> value) the
    parameters cell itself assigns; a value of None is left out. Returns the cells inserted."""
    import nbformat

    added = 0
    for i in reversed(range(len(nb.cells))):
        cell = nb.cells[i]
        if cell.cell_type != "code" or "parameters" not in cell.metadata.get("tags", []):
            continue
        names = {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        lines = [f"{k} = {v!r}" for k, v in values.items() if k in names and v is not None]
        if lines:
            new = nbformat.v4.new_code_cell("# injected by scripts/run_lab.py (a headless run's parameters)\n"
                                            + "\n".join(lines), metadata={"tags": ["injected-parameters"]})
            nb.cells.insert(i + 1, new)
            added += 1
    return added


def parse_guess(text: str) -> float | None:
    """``--guess``: a positive number of times, or ``none`` (the notebooks' own None)."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--guess {text}: give a positive speed-up such as 1.5, or none")
    return value


class NotebookError(Exception):
    """A cell raised; carries the message and the steps that had failed before it."""

    def __init__(self, message: str, failed: dict[str, str]):
        super().__init__(message)
        self.failed = failed


def report_failures(failed: dict[str, tuple[str, str]]) -> None:
    if failed:
        print(f"run_lab: {len(failed)} step(s) failed:", file=sys.stderr)
        for step, (book, why) in failed.items():
            print(f"  {book}: {step}: {why}", file=sys.stderr)


def run_notebook(path: Path, out_dir: Path, *, mode: str, timeout: int,
                 ledger: Path = LEDGER, guess: float | None = GUESS) -> tuple[float, dict[str, str]]:
    """Execute one notebook with its folder as working dir (``guess`` injected into its guess
    cells, :func:`inject_parameters`); returns seconds taken and the steps that failed in it
    (their ledger rows, see :func:`failures`)."""
    import nbformat
    import pandas as pd
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from traitlets.config import Config

    nb = nbformat.read(path, as_version=4)
    inject_parameters(nb, headless_values(nb, guess))
    os.environ["LABKIT_MODE"] = mode
    since = pd.Timestamp.now(tz="UTC")
    t0 = time.perf_counter()
    # The kernel talks to us over Unix sockets in a private folder: over the default TCP
    # transport every kernel (ipykernel 7) warns that its traffic is unencrypted.
    with tempfile.TemporaryDirectory(prefix="labkit-kernel-") as sockets:
        ipc = Config({"KernelManager": {"transport": "ipc", "ip": str(Path(sockets) / "kernel")}})
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", config=ipc,
                                resources={"metadata": {"path": str(path.parent)}},
                                on_notebook_start=_our_sigterm(signal.getsignal(signal.SIGTERM)))
        try:
            client.execute()
        except CellExecutionError as exc:
            check_writable(out_dir)  # a folder it creates is the lab's (make reset)
            nbformat.write(nb, out_dir / path.name)
            raise NotebookError(f"run_lab: {path.name} failed (executed copy with the error: "
                                f"{out_dir / path.name}):\n{str(exc)[-2000:]}", failures(ledger, since)) from None
    check_writable(out_dir)  # a folder it creates is the lab's (make reset)
    nbformat.write(nb, out_dir / path.name)
    return time.perf_counter() - t0, failures(ledger, since)


def _our_sigterm(ours):
    """An ``on_notebook_start`` hook that gives SIGTERM back to ``ours`` (this script's: stop the
    kernel's processes, then one line): nbclient's own shuts the kernel down in the middle of a
    cell, which ended in the kernel's ZMQ traceback and two of nbclient's."""
    def hook(**_):
        import asyncio

        if callable(ours):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, ours)
    return hook


def failures(ledger: Path, since) -> dict[str, str]:
    """Steps whose latest ledger row written at or after ``since`` (a UTC timestamp) has
    ``status: "failed"``: step -> its reason (the application's error line)."""
    from labkit import Ledger
    from labkit.bench.tables import latest_rows

    df = Ledger(ledger).read()
    if df.empty or "status" not in df.columns:
        return {}
    df = latest_rows(df[df["time"] >= since].drop(columns="machine"))  # one row per step
    bad = df[df["status"] == "failed"]
    return {str(step): str(reason) for step, reason in zip(bad["step"], bad.get("reason", [""] * len(bad)))}


def longest_cell(path: Path) -> tuple[int, float] | None:
    """(index, seconds) of the executed notebook's longest code cell, from the execution times nbclient
    records in each cell's metadata (``iopub.execute_input`` to ``shell.execute_reply``); None
    without them."""
    import nbformat

    try:
        cells = nbformat.read(path, as_version=4).cells
    except (OSError, ValueError):
        return None
    times = []
    for i, c in enumerate(cells):
        ex = c.get("metadata", {}).get("execution", {})
        a, b = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
        if a and b:
            t = (datetime.datetime.fromisoformat(b.replace("Z", "+00:00"))
                 - datetime.datetime.fromisoformat(a.replace("Z", "+00:00"))).total_seconds()
            times.append((i, t))
    return max(times, key=lambda x: x[1]) if times else None


def record_timing(out_dir: Path, book: str, seconds: float, mode: str) -> dict:
    """Add one notebook's time to ``out_dir/timings.json`` (keeping the other notebooks' entries),
    with its longest cell (index and seconds, :func:`longest_cell`) where the executed copy says."""
    path = out_dir / "timings.json"
    try:
        timings = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        print(f"run_lab: {path} was not valid JSON; starting it afresh", file=sys.stderr)
        timings = {}
    timings[book] = {"seconds": round(seconds, 1), "mode": mode,
                     "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    longest = longest_cell(out_dir / book)
    if longest:
        timings[book].update(longest_cell=longest[0], longest_cell_s=round(longest[1], 1))
    check_writable(out_dir)  # a folder it creates is the lab's (make reset)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(timings.items())), indent=1) + "\n")
    tmp.replace(path)
    return timings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("small", "full"), default=os.environ.get("LABKIT_MODE", "full"))
    which = p.add_mutually_exclusive_group()
    which.add_argument("--only", default="", help="run only notebooks whose name starts with this")
    which.add_argument("--from", dest="start", default="", metavar="NN",
                       help="run the notebooks from the one whose name starts with this, in order")
    reports = REPORTS
    p.add_argument("--out", type=Path, default=reports / "notebooks",
                   help="where the executed copies go (default: $LABKIT_REPORTS/notebooks, else reports/notebooks)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell")
    p.add_argument("--guess", type=parse_guess, default=GUESS,
                   help=f"the speed-up set in each guess cell (default {GUESS}); 'none' leaves the cells' None")
    p.add_argument("--replay", type=Path, default=None, metavar="FOLDER",
                   help="replay the recording in FOLDER (reports/reference/h200, ...) instead of running steps")
    args = p.parse_args(argv)
    ledger = LEDGER
    if args.replay is not None:
        try:
            args.mode, ledger, reports = replay_setup(args.replay, REPORTS)
        except ValueError as exc:
            print(f"run_lab: {exc}", file=sys.stderr)
            return 1
        if args.out == REPORTS / "notebooks":
            args.out = reports / "notebooks"
    books = [b for b in lab_notebooks() if b.name.startswith(args.only)]
    if args.start:
        first = [i for i, b in enumerate(books) if b.name.startswith(args.start)]
        books = books[first[0]:] if first else []
    if not books:
        print(f"run_lab: no notebooks match {args.only or args.start!r} under notebooks/", file=sys.stderr)
        return 1
    os.chdir(ROOT)
    total = 0.0
    failed: dict[str, tuple[str, str]] = {}
    for book in books:
        if STOP.by:  # a signal met between two notebooks: the next one does not start
            raise KeyboardInterrupt(f"stopped by {STOP.by}")
        print(f"run_lab: {book.name} (mode {args.mode}) ...", flush=True)
        try:
            dt, bad = run_notebook(book, args.out, mode=args.mode, timeout=args.timeout, guess=args.guess,
                                   ledger=ledger)
        except NotebookError as exc:
            failed.update({step: (book.name, why) for step, why in exc.failed.items()})
            report_failures(failed)
            print(str(exc), file=sys.stderr)
            return 1
        total += dt
        record_timing(args.out, book.name, dt, args.mode)
        failed.update({step: (book.name, why) for step, why in bad.items()})
        print(f"run_lab: {book.name} done in {dt:.0f} s" + (f"; {len(bad)} step(s) failed" if bad else ""),
              flush=True)
    opened = " (make jupyter EXECUTED=1 opens them)" if args.out.resolve() == (REPORTS / "notebooks").resolve() else ""
    print(f"run_lab: {len(books)} notebooks in {total:.0f} s; executed copies in {args.out}{opened}; "
          f"speed-up table in {reports / 'speedup.md'}")
    report_failures(failed)
    return 1 if failed else 0


def replay_setup(folder: Path, reports: Path) -> tuple[str, Path, Path]:
    """Point the notebooks' kernels at the recording in ``folder`` (``LABKIT_REPLAY``) and at a
    reports folder of their own, ``reports/replay/<folder name>``, whose ledger is started afresh
    (it holds nothing but an earlier replay's rows). Returns (the recording's mode, the ledger,
    the reports folder).

    Raises:
        ValueError: ``folder`` holds no recorded ledger (``labbook.replay.ReplayError``).
    """
    from labbook.replay import recorded_mode, recording_ledger

    folder = folder.resolve()
    recording_ledger(folder)  # one line when there is none
    out = reports / "replay" / folder.name
    check_writable(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ledger.jsonl").unlink(missing_ok=True)
    os.environ.update(LABKIT_REPLAY=str(folder), LABKIT_REPORTS=str(out))
    return recorded_mode(folder), out / "ledger.jsonl", out


def stopped(exc: BaseException | None) -> str | None:
    """The one line for a run stopped by Ctrl-C, SIGTERM or SIGHUP (nbclient raises another error
    when the kernel was stopped, or while it shuts down: the signal is then in :data:`STOP`, or the
    interrupt is the error's cause or context); else None."""
    while exc is not None and not isinstance(exc, KeyboardInterrupt):
        exc = exc.__cause__ or exc.__context__
    if exc is None and not STOP.by:
        return None
    why = f"stopped by {STOP.by}" if STOP.by else exc.args[0] if exc.args else "interrupted"
    return (f"run_lab: {why}: the notebooks before it are done and in the ledger, its kernel and programs "
            f"stopped; go on with `python scripts/run_lab.py --from NN`")


if __name__ == "__main__":
    from labkit.record.proc import signals_as_interrupt

    # SIGTERM and SIGHUP stop the kernel and what it runs (a signal raised inside nbclient's event
    # loop ended in its tracebacks and the kernel's); then one line, not a chained traceback
    with signals_as_interrupt(children=True) as STOP:
        try:
            code = main()
            line = stopped(None)
        except BaseException as exc:  # noqa: BLE001 - an interrupt is one line; anything else as it was
            line = stopped(exc)
            if line is None:
                raise
        if line is not None:
            print(line, file=sys.stderr)
            code = 130
    sys.exit(code)
