"""The application's boundaries: imports, CLIs runnable as plain scripts, documentation."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "source_code"
ALLOWED_LABKIT = {"labkit.annotate"}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "labkit":
                yield from (f"labkit.{a.name}" for a in node.names)
            else:
                yield node.module


@pytest.mark.parametrize("path", sorted(APP.glob("*.py")), ids=lambda p: p.name)
def test_application_imports_only_labkit_annotate(path):
    bad = {m for m in _imports(path) if (m == "labkit" or m.startswith("labkit.")) and m not in ALLOWED_LABKIT}
    assert not bad, f"{path.name} imports {sorted(bad)}; the application may import only labkit.annotate"


@pytest.mark.parametrize("path", sorted(APP.glob("*.py")), ids=lambda p: p.name)
def test_no_sys_path_tricks(path):
    assert "sys.path" not in path.read_text()


@pytest.mark.parametrize("script", ["detect_video.py", "make_video.py", "train_detector.py"])
def test_scripts_run_as_plain_files(script, tmp_path):
    r = subprocess.run([sys.executable, str(APP / script), "--help"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout.lower()


def test_readme_documents_flags_stages_and_ground_truth():
    from source_code.detect_video import build_parser
    from source_code.stages import STAGES
    from source_code.scenes import GT_HEADER

    readme = (APP / "README.md").read_text()
    flags = [o for a in build_parser()._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
    missing = [f for f in flags if f not in readme and f.replace("--no-", "--") not in readme]
    assert not missing, f"README.md does not document {missing}"
    assert all(f"`{s}`" in readme for s in STAGES)
    assert ",".join(GT_HEADER) in readme
