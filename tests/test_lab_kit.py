"""The workshop kit: `make reset` back to a fresh lab keeping caches, and `make jupyter` without
JupyterLab's news pop-up (checked on a real server's settings API)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import jupyter_lab  # noqa: E402


def test_make_reset_refuses_a_folder_holding_what_the_lab_did_not_write(tmp_path):
    """`make reset` (and clean-reports) on a LABKIT_REPORTS folder with entries no manifest lists removes
    nothing and says so (what the lab wrote and removes: tests/test_kept_files.py)."""
    r = tmp_path / "reports"
    for d in ("profiles", "results", "videos", "notebooks", "checkpoints", "reference"):
        (r / d).mkdir(parents=True)
        (r / d / "x").write_text("x")
    for f in ("ledger.jsonl", "speedup.md", "speedup.png", "seed5.mp4", "README.md", "my_notes.txt"):
        (r / f).write_text("x")
    cache = tmp_path / "cache"
    (cache / "backends").mkdir(parents=True)
    before = sorted(str(q.relative_to(r)) for q in r.rglob("*"))
    env = {**os.environ, "LABKIT_REPORTS": str(r), "LABKIT_CACHE_DIR": str(cache)}
    for target in (["reset", "DRY_RUN=1"], ["clean-reports"]):
        out = subprocess.run(["make", "-s", *target], cwd=ROOT, env=env, capture_output=True, text=True)
        assert out.returncode != 0 and "nothing removed" in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) <= 2  # one line (and make's own)
    assert sorted(str(q.relative_to(r)) for q in r.rglob("*")) == before and (cache / "backends").is_dir()


def test_app_settings_keep_the_environments_overrides(tmp_path):
    env_settings = tmp_path / "env"
    env_settings.mkdir()
    (env_settings / "overrides.json").write_text(json.dumps({
        "@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
        "@jupyterlab/apputils-extension:notification": {"doNotDisturbMode": True}}))
    folder = jupyter_lab.app_settings(tmp_path / "mine", env_settings)
    merged = json.loads((folder / "overrides.json").read_text())
    assert merged["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert merged["@jupyterlab/apputils-extension:notification"] == {
        "doNotDisturbMode": True, "fetchNews": "false", "checkForUpdates": False}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_jupyter_never_asks_about_news(tmp_path):
    pytest.importorskip("jupyterlab")
    port, token = _free_port(), "kit-test"
    env = {**os.environ, "LABKIT_REPORTS": str(tmp_path / "r"), "JUPYTER_TOKEN": token,
           "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user")}
    proc = subprocess.Popen([sys.executable, "scripts/jupyter_lab.py", "--port", str(port), "--mode", "small"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={token}"
        doc = None
        for _ in range(120):
            try:
                doc = json.load(urllib.request.urlopen(url, timeout=5))
                break
            except OSError:
                time.sleep(0.5)
        assert doc is not None, "JupyterLab did not answer"
        # JupyterLab shows "Would you like to get notified about official Jupyter news?" while
        # fetchNews is "none" (its default); the lab's default is "false"
        assert doc["schema"]["properties"]["fetchNews"]["default"] == "false"
        assert doc["schema"]["properties"]["checkForUpdates"]["default"] is False
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_make_jupyter_executed_opens_the_notebooks_the_lab_executed(tmp_path):
    """`make jupyter EXECUTED=1` serves <reports>/notebooks/, the copies run_lab wrote with their
    outputs (a real server's contents API lists them); before the lab ran it is one line, and no server."""
    pytest.importorskip("jupyterlab")
    port, token, reports = _free_port(), "kit-test-executed", tmp_path / "r"
    env = {**os.environ, "LABKIT_REPORTS": str(reports), "JUPYTER_TOKEN": token,
           "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user")}
    argv = [sys.executable, "scripts/jupyter_lab.py", "--port", str(port), "--executed"]
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1, out
    assert f"no executed notebooks in {reports / 'notebooks'}" in out.stderr and "make lab" in out.stderr
    (reports / "notebooks").mkdir(parents=True)
    (reports / "notebooks" / "00_Start_Here.ipynb").write_bytes((ROOT / "notebooks" / "00_Start_Here.ipynb").read_bytes())
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert f"the executed notebooks in {reports / 'notebooks'}" in line and f"token={token}" in line, line
        url, listing = f"http://127.0.0.1:{port}/api/contents?token={token}", None
        for _ in range(120):
            try:
                listing = json.load(urllib.request.urlopen(url, timeout=5))
                break
            except OSError:
                assert proc.poll() is None, "JupyterLab exited"
                time.sleep(0.5)
        assert listing is not None, "JupyterLab did not answer"
        assert [c["name"] for c in listing["content"] if c["type"] == "notebook"] == ["00_Start_Here.ipynb"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_environment_pairs_torch_and_onnxruntime_gpu_on_one_cuda_major():
    yaml = pytest.importorskip("yaml")
    from labkit.doctor import CUDA_INDEX as INDEX, FAIL, OK, cuda_pair_verdict

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    index = next(x.split()[-1] for x in pip if x.startswith("--extra-index-url"))
    assert index.endswith("/" + INDEX[12])  # onnxruntime-gpu on PyPI is built for CUDA 12
    assert any(x.startswith("onnxruntime-gpu>=1.19") for x in pip) and any(x.startswith("torch") for x in pip)
    assert cuda_pair_verdict("12.8", "12.2").status == OK and cuda_pair_verdict(None, None).status == OK
    bad = cuda_pair_verdict("13.0", "12.9")
    assert bad.status == FAIL and "\n" not in bad.detail + bad.fix and "whl/cu128" in bad.fix and "CUDA 13.0" in bad.detail
