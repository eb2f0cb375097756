"""The README is a map and docs/ holds one page per audience or task (issue 59): the README stays short
and links every page, every link resolves, and every command shown in a code block is run here as
written, or is named with the make target and the test that runs what it runs, or with the reason no
machine of CI's can run it. A command added to the docs and in none of these fails the last test."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NSYS = shutil.which("nsys")


def _commands(page: Path) -> list[str]:
    """The commands of a page's bash blocks: comments dropped, continued lines joined."""
    out, block, joined = [], False, ""
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            block = line.strip() in ("```bash", "```sh", "```console") if not block else False
            continue
        if not block:
            continue
        line = re.sub(r"\s+#\s.*$", "", line).rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        joined += line[:-1].strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            out.append(re.sub(r"\s+", " ", joined))
            joined = ""
    return out


# Run here, as written, from the checkout: they read only committed files and write under $TMPDIR.
RUN_IN_CHECKOUT = "docs/command-line.md"
# Run here, as written, in a fresh folder (the application's own data/ and reports/ there, the rank
# reports of tests/fixtures copied to runs/ as the page's text has them), in this order.
RUN_IN_FOLDER = [
    "python source_code/make_video.py --out data/clip.mp4 --seconds 2 --seed 7",
    "python source_code/detect_video.py --input data/clip.mp4 --results reports/clip.json",
    "python source_code/detect_video.py --input data/clip.mp4 --queues --no-osd --batch-size 8 --interval 3",
    "python -m torch.distributed.run --standalone --nproc-per-node 2 source_code/detect_video.py --input "
    "data/clip.mp4 --streams 2 --no-osd --device cpu --results reports/r.json",
    "python -m labkit summary 'runs/run_*.sqlite' --what nvtx,stages,imbalance,stragglers --scheduler local",
    "python -m labkit --help",
    """python -m source_code.stage_alone --base '{"batch_size": 4, "input_hw": "192x320"}' --lever '{"batch_size": 4, """
    """"input_hw": "192x320", "channels_last": true}'""",
]
# make targets: `make -n` shows the script each runs, and the file named runs that script (its name there).
MAKE = {
    "make lab": ("scripts/run_lab.py", "tests/test_notebooks.py", "run_lab.py"),
    "make test": ("pytest", ".ci/run", "make test"),
    "make jupyter": ("scripts/jupyter_lab.py", "tests/test_browser.py", "jupyter_lab"),
    "make browser": ("scripts/browser_lab.py", "tests/test_browser.py", "browser_lab"),
    "make nsys-ui REPORT=x.nsys-rep PORT=6080": ("scripts/nsys_ui.py", "tests/test_nsys_ui.py", "nsys_ui"),
    "make doctor": ("labkit doctor --probe", "tests/test_doctor.py", "doctor"),
    "make container": ("scripts/container.sh build", "scripts/container_smoke.sh", "container.sh"),
    "make container-run MODE=small": ("scripts/container.sh run", "scripts/container_smoke.sh", "podman run"),
}
# What no CI machine here can run, with the reason.
NOT_HERE = {
    "conda env create -f environment.yml && conda activate labkit": "no conda on Debian's CI machine",
    "export JUPYTER_TOKEN=<a long secret>": "a placeholder the reader fills in",
    "docker run --rm -it --gpus all --shm-size 2g -p 127.0.0.1:8888:8888 -p 127.0.0.1:6080:6080 -v "
    "\"$PWD/reports:/reports\" -v labkit-cache:/root/.cache -e JUPYTER_TOKEN -e LABKIT_MODE=full labkit:gpu":
        "the GPU image needs nvcr.io and a GPU (CI builds and runs the CPU image with podman)",
    "docker save -o lab.tar labkit:gpu": "the GPU image cannot be built here",
    "apptainer build lab.sif docker-archive://lab.tar": "Apptainer is not packaged for Debian 12",
    "apptainer run --nv --writable-tmpfs --bind \"$PWD/reports:/reports\" lab.sif": "Apptainer is not packaged for Debian 12",
    "srun --ntasks=1 --nodes=1 dask scheduler --scheduler-file $HOME/sched.json &": "no Slurm cluster here",
    "srun dask worker --scheduler-file $HOME/sched.json --nthreads 1 --memory-limit 8GiB &": "no Slurm cluster here",
    "python -m labkit summary \"$SCRATCH/run/run_*.sqlite\" --scheduler $HOME/sched.json --what stages,stragglers":
        "no Slurm cluster here (the same command on a local scheduler runs above)",
}


def test_the_readme_is_a_short_map_that_links_every_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "make lab" in text and "make test" in text
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in text, page.name
    for part in ("source_code/", "labkit/", "labbook/", "notebooks/", "scripts/", "tests/", "reports/", "docs/"):
        assert part in text, part


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a markdown page's headings."""
    heads = re.findall(r"^#{1,6} (.+)$", page.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_resolves(page):
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            bad.append(target)
    assert bad == []


def test_every_command_shown_is_run_or_accounted_for():
    shown = {c: p.relative_to(ROOT).as_posix() for p in PAGES for c in _commands(p)}
    here = {c for c, p in shown.items() if p == RUN_IN_CHECKOUT}
    unaccounted = set(shown) - here - set(RUN_IN_FOLDER) - set(MAKE) - set(NOT_HERE)
    assert unaccounted == set(), "add each to test_docs.py's lists: " + "; ".join(sorted(unaccounted))
    stale = (set(RUN_IN_FOLDER) | set(MAKE) | set(NOT_HERE)) - set(shown)
    assert stale == set(), stale  # a command the docs no longer show


@pytest.mark.parametrize("command", sorted(MAKE))
def test_each_make_target_shown_runs_the_script_its_test_runs(command):
    script, where, evidence = MAKE[command]
    res = subprocess.run(["make", "-n", *command.split()[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert script in res.stdout, res.stdout
    assert evidence in (ROOT / where).read_text(), (command, where)


def _run(command: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _env(tmp: Path) -> dict:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `python` is this one
    return env


@pytest.mark.nsys
def test_the_command_line_page_runs_as_written(tmp_path):
    env = _env(tmp_path)
    (tmp_path / "labkit-demo").mkdir()
    for command in _commands(ROOT / RUN_IN_CHECKOUT):
        res = _run(command, ROOT, env)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (command, res.stderr[-2000:])
        assert res.stdout.strip(), command


def test_the_application_and_rank_commands_run_as_written(tmp_path):
    env = _env(tmp_path)
    work = tmp_path / "work"
    for d in ("data", "reports", "runs"):
        (work / d).mkdir(parents=True)
    (work / "source_code").symlink_to(ROOT / "source_code")
    for i in (0, 1):
        shutil.copy(ROOT / "tests" / "fixtures" / f"ranks.nsys2022.4_{i}.sqlite", work / "runs" / f"run_{i}.sqlite")
    for command in RUN_IN_FOLDER:
        res = _run(command, work, env)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (command, res.stderr[-2000:])
    assert (work / "reports" / "clip.json").is_file() and (work / "reports" / "r.json").is_file()
