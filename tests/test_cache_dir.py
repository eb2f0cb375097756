"""One home for the cache folder: labkit's root is ``labkit.env.cache_dir()`` (``$LABKIT_CACHE_DIR``,
else ``~/.cache/labkit``) with nsys exports in ``exports/``; the application reads no labkit
variable and caches its models and FLOPs count in ``--cache-dir`` (default
``~/.cache/labkit/backends``), which the lab passes as ``cache_dir()/backends``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit import env
from labkit.record import export as nsys


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh ``$HOME`` (``Path.home()`` reads it), so no test touches the user's own cache."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("LABKIT_CACHE_DIR", raising=False)
    return h


def test_cache_dir_is_the_variable_else_the_users_cache(home, tmp_path, monkeypatch):
    assert env.cache_dir() == home / ".cache" / "labkit"
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "mine"))
    assert env.cache_dir() == tmp_path / "mine"


@pytest.mark.parametrize("variable", [None, "mine"])
def test_exports_go_under_cache_dir(home, tmp_path, monkeypatch, variable):
    if variable:
        monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / variable))
    exports = nsys.export_cache_dir()
    assert exports == env.cache_dir() / "exports" and exports.is_dir()
    assert exports.parent == (tmp_path / variable if variable else home / ".cache" / "labkit")


def test_the_lab_passes_its_cache_as_a_flag(home, tmp_path, monkeypatch):
    from labbook.app import app_argv, app_options

    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "lab"))
    opts = app_options({}, video=tmp_path / "clip.mp4", mode="small")
    assert opts["cache_dir"] == str(tmp_path / "lab" / "backends")
    argv = app_argv(opts)
    assert argv[argv.index("--cache-dir") + 1] == str(tmp_path / "lab" / "backends")


def test_the_app_ignores_the_variable_and_honours_cache_dir(home, tmp_path, monkeypatch):
    """Real runs of detect_video: the FLOPs count lands in --cache-dir, else in the default
    ``~/.cache/labkit/backends``, never in ``$LABKIT_CACHE_DIR``."""
    from source_code.backends import default_cache_dir
    from source_code.detect_video import main
    from source_code.scenes import SceneConfig, make_video

    video, _ = make_video(tmp_path / "c.mp4", seconds=0.2, config=SceneConfig(seed=3, width=320, height=192, fps=10))
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "labkit"))
    args = ["--input", str(video), "--input-hw", "96x160", "--device", "cpu", "--warmup", "0", "--no-osd"]

    assert main([*args, "--cache-dir", str(tmp_path / "app")]) == 0
    (key,) = json.loads((tmp_path / "app" / "flops.json").read_text())
    assert key.endswith("96x160")
    assert not (tmp_path / "labkit").exists() and not (home / ".cache").exists()

    assert default_cache_dir() == home / ".cache" / "labkit" / "backends"
    assert main(args) == 0
    assert (home / ".cache" / "labkit" / "backends" / "flops.json").is_file()
    assert not (tmp_path / "labkit").exists()
