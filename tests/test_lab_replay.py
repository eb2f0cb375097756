"""The lab replayed from its committed recordings (issue 62): ``scripts/run_lab.py --replay`` runs
every notebook with each step's row, profile and platform taken from ``reports/reference/h200``
(the H200) and ``reports/reference/cpu-2core-r5`` (the full CPU lab), running no step; then the
sentences those notebooks print are checked against the recorded data beside them: platform facts,
one noise rule (each row's own interval), accuracy compared only over the same frames, and
``optimized`` checked against the fastest measured step."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import labkit
from labkit.bench.charts import predictions, speedup_interval

from labbook.summary import accuracy_drops

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "reports" / "reference" / "h200"
CPU = ROOT / "reports" / "reference" / "cpu-2core-r5"


def _replay(folder: Path, reports: Path) -> dict:
    env = {**os.environ, "LABKIT_REPORTS": str(reports), "PYTHONPATH": str(ROOT)}
    env.pop("LABKIT_STRICT", None)
    p = subprocess.run([sys.executable, "scripts/run_lab.py", "--replay", str(folder)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    out = reports / "replay" / folder.name
    books = {b.name[:2]: nbformat.read(b, as_version=4) for b in sorted((out / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
    return {"proc": p, "out": out, "books": books}


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    return _replay(H200, tmp_path_factory.mktemp("h200"))


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    return _replay(CPU, tmp_path_factory.mktemp("cpu"))


def texts(nb) -> list[str]:
    """Every printed text of an executed notebook (markdown, stdout, plain text), in order."""
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            d = o.get("data", {})
            t = d.get("text/markdown") or o.get("text") or d.get("text/plain") or ""
            out.append("".join(t) if isinstance(t, list) else t)
    return [t for t in out if t]


def recorded(folder: Path) -> list[dict]:
    name = "ledger.jsonl" if (folder / "ledger.jsonl").exists() else "ledger.reference.jsonl"
    return [json.loads(line) for line in (folder / name).read_text().splitlines() if line.strip()]


@pytest.mark.minutes(2)
@pytest.mark.slow
@pytest.mark.parametrize("which", ["h200", "cpu"])
def test_a_replay_executes_every_notebook_clean_and_runs_nothing(which, request):
    """Every lab notebook executes without an error, every code cell ran, and nothing ran here: no
    profile or results file was written, and every replayed row carries the recording's env."""
    r = request.getfixturevalue(which)
    assert r["proc"].returncode == 0, r["proc"].stderr[-3000:]
    assert sorted(r["books"]) == ["00", "01", "02", "03", "04", "05", "06", "07", "08"]
    for name, nb in r["books"].items():
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.get("execution_count") for c in code), f"{name}: a code cell did not run"
        assert not [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"], name
    assert not list(r["out"].rglob("*.nsys-rep")) and not list(r["out"].glob("results/*"))
    folder = H200 if which == "h200" else CPU
    envs = {json.dumps(row["env"], sort_keys=True) for row in recorded(folder) if row.get("env")}
    rows = [json.loads(line) for line in (r["out"] / "ledger.jsonl").read_text().splitlines()]
    replayed = [row for row in rows if row.get("status", "ok") == "ok"]
    assert replayed and all(json.dumps(row["env"], sort_keys=True) in envs for row in replayed)


@pytest.mark.slow
def test_platform_facts_are_the_recordings(h200, cpu):
    """Class (a): a sentence stating a platform fact states the recording's: the H200 replay says
    a GPU is here and counts its one GPU and its 25 rows, the CPU replay says no GPU, whatever this
    machine has; 07 no longer says no GPU run went to the end."""
    gpu_lines = [t for t in texts(h200["books"]["04"]) if "GPU here:" in t]
    assert gpu_lines and all("**yes**" in t for t in gpu_lines)
    assert all("**no**" in t for t in texts(cpu["books"]["04"]) if "GPU here:" in t)
    assert any("This machine has 1 CUDA GPU(s)" in t for t in texts(h200["books"]["08"]))
    # what the machine could run (04's table) is the recording's too, never this box's torch
    table = next(t for t in texts(h200["books"]["04"]) if "backend" in t and "variant" in t)
    assert "no CUDA GPU visible" not in table and "ran in the recording `h200` (`fp16`)" in table, table
    rows = recorded(H200)
    ran = sum(r.get("status", "ok") == "ok" for r in rows)
    assert any(f"**NVIDIA H200** (`h200/`): {ran} of {len(rows)} steps ran" in t for t in texts(h200["books"]["07"]))
    nb07 = nbformat.read(ROOT / "notebooks" / "07_Summary.ipynb", as_version=4)
    assert not any("not yet been run to the end" in c.source for c in nb07.cells)
    assert any("**NVIDIA H200**" in t for t in texts(cpu["books"]["07"]))  # shown on a CPU box too
    # one GUI question in each lever notebook, its answer under a fold from the same report, or why none
    for name in ("02", "03", "04", "05", "06", "08"):
        asked = [t for t in texts(h200["books"][name]) if t.startswith("**In the GUI**") or "No report to open" in t
                 or t.startswith("No profile")]
        assert asked, name
        assert all("<details><summary>Check your answer" in t and "limiter:" in t for t in asked
                   if t.startswith("**In the GUI**")), name
    # the nsys 01 names is this machine's, and the line says which the recording was profiled with
    for r, folder in ((h200, H200), (cpu, CPU)):
        line = next(t for t in texts(r["books"]["01"]) if t.startswith("nsys "))
        made = next(row["env"]["nsys"] for row in recorded(folder) if row.get("env"))
        assert f"the replayed recording `{folder.name}` was profiled with nsys {made}" in line, line


@pytest.mark.parametrize("folder", [H200, CPU], ids=["h200", "cpu"])
def test_one_noise_rule_each_rows_interval(folder):
    """Class (b): a step is 'slower' or 'within' its estimate by its own 95 % interval over the step
    it builds on, never by a fixed band: on the H200, fp16 (0.91x, interval 0.81-1.03x) is not slower
    and ort_fp32 (0.15x) is; on both recordings every side agrees with its interval."""
    table = labkit.speedup_table(next(folder.glob("ledger*.jsonl")))
    machine = table.machines[0]
    p = predictions(table, machine)
    for step, row in p.iterrows():
        ci = speedup_interval(table, machine, step)
        if ci is None:
            continue
        assert bool(row["slower"]) == (ci[1] < 1.0), step
        if row["predicted"] == row["predicted"] and row["side"] in ("within", "above", "below"):
            assert (row["side"] == "within") == (ci[0] <= row["predicted"] <= ci[1]), step
    if folder == H200:
        assert not p.at["fp16", "slower"] and p.at["ort_fp32", "slower"] and not p.at["optimized", "slower"]


@pytest.mark.slow
def test_replayed_verdicts_and_summary_agree_on_the_noise(h200):
    """Class (b) on the printed text: 07's slower steps are exactly those beyond their interval, and
    every step whose verdict (06) reads 'within noise of the estimate' is 'within' in 07's table."""
    table = labkit.speedup_table(H200 / "ledger.jsonl")
    p = predictions(table, table.machines[0])
    slower = sorted(p.index[p["slower"].astype(bool)])
    line = next(t for t in texts(h200["books"]["07"]) if "Not every lever helps here" in t)
    named = re.findall(r"`(\w+)`", line.split("Not every lever helps here:**")[1].split("ran slower")[0])
    assert sorted(named) == slower
    for nb in h200["books"].values():
        for t in texts(nb):
            m = re.match(r"(\w+): measured [\d.]+x over", t)
            if m and m.group(1) in p.index and p.at[m.group(1), "predicted"] == p.at[m.group(1), "predicted"]:
                within = "within noise of the estimate" in t
                assert within == (p.at[m.group(1), "side"] == "within"), t[:200]


@pytest.mark.parametrize("folder", [H200, CPU], ids=["h200", "cpu"])
def test_accuracy_is_compared_only_over_the_same_frames(folder):
    """Class (c): a MOTA cost is read between a step and the step it builds on only where both scored
    the same frames: on the H200, batch8 (1,659 frames) against no_osd (600) is no pair."""
    table = labkit.speedup_table(next(folder.glob("ledger*.jsonl")))
    machine = table.machines[0]
    drops = accuracy_drops(table, machine)
    rows = table.rows.drop_duplicates("step", keep="last").set_index("step")
    assert len(drops)
    for step in drops.index:
        assert rows.at[step, "frames"] == rows.at[table.steps.loc[step, "builds_on"], "frames"], step
    if folder == H200:
        assert "batch8" not in drops.index and "batch32" not in drops.index


@pytest.mark.slow
def test_optimized_is_checked_against_the_fastest_measured_step(h200, cpu):
    """Class (d): 06 says which step won within the floor: on the H200, interval3 (1,066.8 frames/s)
    beat optimized (983.7), and the sentence says so with both intervals; 07's fastest is the same."""
    line = next(t for t in texts(h200["books"]["06"]) if "fastest measured step" in t)
    assert "`optimized` 983.7 frames/s" in line and "is not the fastest" in line and "`interval3` 1066.8" in line
    assert any("Fastest step within the MOTA floor" in t and "`interval3`" in t for t in texts(h200["books"]["07"]))
    assert any("fastest measured step" in t for t in texts(cpu["books"]["06"]))


def test_an_estimate_the_notebook_computes_replaces_the_recorded_one(tmp_path):
    """Class (e): a step the notebook runs under its own estimate (06's ``optimized``, from
    ``labbook.optimize.estimate``) is replayed with that estimate, as a live run would record it, not
    with the one the recording's code made (the H200's: "'decode' dominates", a bound of 1.75x that
    none of optimized's changes makes cheaper); without one given, the recorded estimate stands."""
    from labbook.replay import replay_step

    rec = next(r for r in recorded(H200) if r["step"] == "optimized")
    assert rec["basis"] == "bound" and "decode" in rec["finding"]  # what the recording says
    led = tmp_path / "ledger.jsonl"
    replay_step("optimized", folder=H200, ledger=led, predicted_speedup=1.21, finding="the levers taken, measured")
    replay_step("optimized", folder=H200, ledger=led)
    given, kept = labkit.Ledger(led).rows()
    assert (given["predicted_speedup"], given["finding"], given["basis"], given["lever"]) == (
        1.21, "the levers taken, measured", "estimate", None)
    assert (kept["predicted_speedup"], kept["finding"], kept["basis"]) == (
        rec["predicted_speedup"], rec["finding"], rec["basis"])
    assert given["metrics"] == kept["metrics"] == rec["metrics"]  # the measurement is the recording's


def test_what_a_recording_machine_could_run_is_read_from_its_rows():
    """Each combination of this machine's list of backends is available where a recorded step ran
    with it (the step named), not where one was skipped (its recorded reason), unknown where none
    tried it; a step's unset device is the recording's own (the H200's cuda, the CPU box's cpu)."""
    from labbook.app import _backends
    from labbook.recording import recorded_backends

    combos = list(_backends())
    for folder, own, ran in ((H200, "cuda", "baseline"), (CPU, "cpu", "baseline")):
        got = {(r["backend"], r["precision"], r["device"], r["variant"]): r for r in recorded_backends(folder, combos)}
        assert len(got) == len(combos)
        plain = got[("torch", "fp32", own, "")]
        assert plain["available"] is True and plain["reason"] == f"ran in the recording `{folder.name}` (`{ran}`)"
        trt = got[("tensorrt", "fp16", "cuda", "")]
        rec = next(r for r in recorded(folder) if r["step"] == "tensorrt_fp16")
        assert trt["available"] is False and trt["reason"] == rec["reason"]
        assert got[("torch", "fp16", "cpu", "")]["available"] is None  # no step tried it
    assert got[("torch", "fp32", "cuda", "")]["available"] is False  # the CPU box skipped the GPU steps


@pytest.mark.slow
def test_a_replayed_prediction_is_made_now_from_the_profile_the_recording_kept(h200):
    """Class (f): a step whose base's profile the recording kept is predicted as a live run predicts it
    today, from that profile: 01's next lever after the baseline (overlap_stages, computed now from the
    recorded baseline export) is the estimate 02's ``queues`` verdict compares with (the H200 recording
    carried 3.12x, a bound of another finding, from the code of its day; on the CPU reference the
    next lever is another one, so there is nothing to compare)."""
    for r in (h200,):
        nxt = next(t for t in texts(r["books"]["01"]) if t.startswith("Next lever after 'baseline'"))
        assert "overlap_stages" in nxt, nxt
        figure = re.search(r", (\d+\.\d\d)x \((?:an estimate|an upper bound)\)", nxt).group(1)
        verdict = next(t for t in texts(r["books"]["02"]) if t.startswith("queues: measured"))
        assert re.search(rf"; (?:estimate|bound) {figure}x", verdict), (nxt[:200], verdict[:300])
