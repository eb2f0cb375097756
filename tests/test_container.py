"""The workshop image's recipe, read without building it (CI builds and smoke-tests the CPU
variant: scripts/container_smoke.sh). What is checked here would break that build or its
promises quietly: a smoke-test file renamed away, the committed reference results left out of
the build context, a token or a certificate baked into a layer, a GPU pin without its reason."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = (ROOT / "Containerfile").read_text()


def _instructions() -> list[str]:
    """The Containerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(l for l in RECIPE.splitlines() if not l.lstrip().startswith("#")))
    return [l.strip() for l in text.splitlines() if l.strip()]


def test_the_base_is_an_argument_pinned_to_a_tag_with_its_reason():
    lines = RECIPE.splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("ARG BASE="))
    assert re.fullmatch(r"ARG BASE=nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3", lines[at]), lines[at]
    reason = " ".join(lines[max(0, at - 8):at])
    assert "CUDA 12" in reason and "onnxruntime-gpu" in reason and "driver" in reason
    assert _instructions()[1] == "FROM ${BASE}"


def test_every_gpu_package_is_pinned_and_commented():
    lines = RECIPE.splitlines()
    for name in ("NSYS_GUI_PACKAGE", "ORT_GPU"):
        at = next(i for i, l in enumerate(lines) if l.startswith(f"ARG {name}="))
        assert re.search(r"(==|-)\d+\.\d+\.\d+$", lines[at]), f"{lines[at]}: pin an exact version"
        start = at
        while lines[start - 1].startswith("#"):
            start -= 1
        assert lines[start].startswith("# GPU:"), f"{name}: say why, in a comment above it"


def test_nothing_secret_or_machine_specific_is_baked_in():
    for line in _instructions():
        assert not re.match(r"(ENV|ARG)\b.*JUPYTER_TOKEN", line), line  # the token comes with the run
        assert not re.match(r"(COPY|ADD)\b.*(\.crt|\.pem|ca-certificates)", line), line
        if "ca_bundle" in line:  # a build secret, mounted for the step and read there only
            assert line.startswith("RUN --mount=type=secret,id=ca_bundle"), line
    assert "apt-get clean" in RECIPE and "rm -f /tmp/install-nsys /etc/apt/apt.conf.d/99build-ca" in RECIPE


def test_the_build_context_keeps_the_reference_results_and_drops_local_state():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for gone in (".git", ".venv", ".make", "data", "reports/*"):
        assert gone in ignore, gone
    for kept in ("!reports/reference", "!reports/README.md"):
        assert kept in ignore, kept


def test_the_smoke_test_names_files_that_exist_and_scripts_parse():
    smoke = (ROOT / "scripts/container_smoke.sh").read_text()
    files = re.search(r'SMOKE_TESTS="([^"]+)"', smoke).group(1).replace("\\\n", " ").split()
    assert files and all((ROOT / f).is_file() for f in files), files
    for script in ("scripts/container.sh", "scripts/container_smoke.sh"):
        subprocess.run(["bash", "-n", str(ROOT / script)], check=True)
    assert "bash scripts/container_smoke.sh" in (ROOT / ".ci/run").read_text()


def test_make_targets_call_the_scripts_with_the_jupyter_variables():
    makefile = (ROOT / "Makefile").read_text()
    assert "container:\n\t@bash scripts/container.sh build" in makefile
    # MODE, PORT and IP reach the script through the environment (exported as given: data, never code)
    assert "container-run:\n\t@bash scripts/container.sh run" in makefile
    assert re.search(r"^export PY VENV MODE PORT IP ", makefile, re.M)
    run = (ROOT / "scripts/container.sh").read_text()
    assert "args+=(-e JUPYTER_TOKEN)" in run  # by name: the engine copies the value from the environment
