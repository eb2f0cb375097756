"""Every TensorRT name the backend calls exists in TensorRT 11.4 (issue 18, item 7), without a GPU.

TensorRT itself cannot be installed here (its libraries come from NVIDIA's index), but the
``tensorrt-cu13-bindings`` wheel on PyPI (1.3 MB) holds the Python module's compiled
bindings, whose identifiers are readable as strings. The wheel is downloaded once into
pytest's cache (``pip download --no-deps tensorrt-cu13-bindings==11.4.0.106``); the test
skips with the reason when it cannot be fetched.

The names checked are read from the source by ``ast``: every attribute reached from the
``trt`` module (``trt.BuilderFlag.TF32`` gives ``BuilderFlag`` and ``TF32``) and every
method called on a TensorRT object (builder, network, parser, config, profile, engine,
execution context, runtime).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

WHEEL = "tensorrt-cu13-bindings==11.4.0.106"
SOURCES = [Path(__file__).resolve().parents[1] / "source_code" / "backends" / n
           for n in ("tensorrt_build.py", "tensorrt_run.py")]
# Variables (and self attributes) that hold TensorRT objects in those sources.
TRT_OBJECTS = {"builder", "network", "parser", "config", "profile", "ctx", "context", "engine", "_runtime", "trt"}


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            return node.attr
        node = node.value
    if isinstance(node, ast.Call):
        return _root(node.func)
    return node.id if isinstance(node, ast.Name) else None


def tensorrt_names_used(paths=SOURCES) -> set[str]:
    """Attribute names reached from ``trt`` or from a TensorRT object in ``paths``."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and _root(node.value) in TRT_OBJECTS:
                names.add(node.attr)
    return names


def present(name: str, data: bytes) -> bool:
    """``name`` is a NUL-terminated string of the library, alone or as the tail of a longer one
    (the linker stores "INPUT" as the tail of "CONDITIONAL_INPUT")."""
    return re.search(re.escape(name.encode()) + rb"\x00", data) is not None


@pytest.fixture(scope="module")
def bindings(request, tmp_path_factory) -> bytes:
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    folder = Path(cache.mkdir("tensorrt-cu13-bindings-11.4") if cache else tmp_path_factory.mktemp("trt-bindings"))
    wheels = list(folder.glob("*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", WHEEL, "-d", str(folder)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        wheels = list(folder.glob("*.whl"))
        if done.returncode or not wheels:
            pytest.skip(f"cannot download {WHEEL} (offline?): {done.stderr.strip().splitlines()[-1:]}")
    with zipfile.ZipFile(wheels[0]) as z:
        so = next(n for n in z.namelist() if n.endswith(".so"))
        return z.read(so)


def test_the_name_reader_sees_the_calls():
    used = tensorrt_names_used()
    assert {"execute_async_v3", "STRONGLY_TYPED", "NetworkDefinitionCreationFlag", "set_tensor_address",
            "build_serialized_network", "TF32", "deserialize_cuda_engine"} <= used
    assert "cuda_stream" not in used, "torch's names are not TensorRT's"


def test_every_tensorrt_name_exists_in_11_4(bindings):
    missing = sorted(n for n in tensorrt_names_used() if not present(n, bindings))
    assert not missing, f"not in TensorRT 11.4's bindings: {missing}"


def test_removed_names_are_absent_from_11_4(bindings):
    """The check can fail: names TensorRT 10/11 removed are not in the bindings."""
    assert not [n for n in ("EXPLICIT_BATCH", "execute_async_v2", "get_binding_index") if present(n, bindings)]
