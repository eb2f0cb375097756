"""source_code.flops.flops_per_frame: FLOPs per frame cached in <folder>/flops.json, keyed by
architecture and input size. The real detector and the real FlopCounterMode count, at small sizes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from source_code.detector import build_detector, count_flops
from source_code.flops import flops_per_frame

SMALL = (64, 96)
OTHER = (96, 160)


class Counting:
    """count_flops, counting its calls."""

    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def __call__(self, model, input_hw):
        self.calls.append(tuple(input_hw))
        return count_flops(model, input_hw)


@pytest.fixture(scope="module")
def model():
    return build_detector().eval()


@pytest.fixture(scope="module")
def direct(model):
    """count_flops called directly (the reference value) at both sizes."""
    return {hw: count_flops(model, hw) for hw in (SMALL, OTHER)}


def cache(folder: Path) -> dict:
    return json.loads((folder / "flops.json").read_text())


def test_first_call_counts_second_call_reads_the_cache(model, direct, tmp_path):
    count = Counting()
    v1 = flops_per_frame(model, SMALL, count, tmp_path)
    assert count.calls == [SMALL]
    assert isinstance(v1, int) and v1 == direct[SMALL] > 0
    known = cache(tmp_path)
    assert list(known.values()) == [v1]
    (key,) = known
    assert key.endswith("64x96") and type(model).__name__ in key

    v2 = flops_per_frame(model, SMALL, count, tmp_path)
    assert count.calls == [SMALL]  # not counted again
    assert v2 == v1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flops.json"]  # no temporary file left


def test_another_input_size_is_another_key(model, direct, tmp_path):
    count = Counting()
    a = flops_per_frame(model, SMALL, count, tmp_path)
    b = flops_per_frame(model, OTHER, count, tmp_path)
    assert count.calls == [SMALL, OTHER]
    assert (a, b) == (direct[SMALL], direct[OTHER]) and b > a
    known = cache(tmp_path)
    assert sorted(known.values()) == sorted([a, b])
    assert any(k.endswith("96x160") for k in known) and any(k.endswith("64x96") for k in known)
    # both stay cached
    assert flops_per_frame(model, SMALL, count, tmp_path) == a and flops_per_frame(model, OTHER, count, tmp_path) == b
    assert len(count.calls) == 2


def test_key_is_the_architecture_not_the_weights(model, direct, tmp_path):
    count = Counting()
    flops_per_frame(model, SMALL, count, tmp_path)
    same_arch = build_detector()  # other random weights, same layers
    assert flops_per_frame(same_arch, SMALL, count, tmp_path) == direct[SMALL]
    assert len(count.calls) == 1
    other_arch = build_detector(num_classes=3).eval()  # a different head
    v = flops_per_frame(other_arch, SMALL, count, tmp_path)
    assert len(count.calls) == 2
    assert v == count_flops(other_arch, SMALL) != direct[SMALL]
    assert len(cache(tmp_path)) == 2


def test_corrupt_cache_is_ignored_and_rewritten(model, direct, tmp_path):
    (tmp_path / "flops.json").write_text('{"CenterNet-0123-64x96": 12')  # truncated JSON
    count = Counting()
    assert flops_per_frame(model, SMALL, count, tmp_path) == direct[SMALL]
    assert count.calls == [SMALL]
    known = cache(tmp_path)  # valid JSON again
    assert list(known.values()) == [direct[SMALL]]
    assert flops_per_frame(model, SMALL, count, tmp_path) == direct[SMALL] and len(count.calls) == 1


def test_missing_folder_is_created(model, direct, tmp_path):
    folder = tmp_path / "a" / "b"
    assert flops_per_frame(model, SMALL, Counting(), folder) == direct[SMALL]
    assert (folder / "flops.json").is_file()


def test_unwritable_cache_only_costs_time(model, direct, tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder should be")
    count = Counting()
    folder = blocker / "cache"
    assert flops_per_frame(model, SMALL, count, folder) == direct[SMALL]
    assert flops_per_frame(model, SMALL, count, folder) == direct[SMALL]
    assert len(count.calls) == 2  # nothing could be cached, nothing raised


@pytest.mark.parametrize("content", ["[]", "null"])
def test_cache_that_is_not_an_object_is_ignored(model, direct, tmp_path, content):
    (tmp_path / "flops.json").write_text(content)
    assert flops_per_frame(model, SMALL, Counting(), tmp_path) == direct[SMALL]


def test_pipeline_reports_and_reuses_the_cached_value(tmp_path, monkeypatch):
    """run_pipeline stores FLOPs in <--cache-dir>/flops.json and reads them back on the next run."""
    import source_code.detector as detector
    from source_code.detect_video import main
    from source_code.scenes import SceneConfig, make_video

    video, _ = make_video(tmp_path / "c.mp4", seconds=0.2, config=SceneConfig(seed=3, width=320, height=192, fps=10))
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("LABKIT_REPORTS", str(tmp_path / "reports"))
    args = ["--input", str(video), "--input-hw", "96x160", "--device", "cpu", "--warmup", "0", "--no-osd",
            "--cache-dir", str(cache_dir)]

    assert main([*args, "--results", str(tmp_path / "r1.json")]) == 0
    known = cache(cache_dir)
    (key,) = known
    assert key.endswith("96x160")
    doc1 = json.loads((tmp_path / "r1.json").read_text())
    assert doc1["model"]["gflops_per_frame"] == round(known[key] / 1e9, 3) > 0

    def refuse(*a, **k):
        raise AssertionError("count_flops called although the value is cached")

    monkeypatch.setattr(detector, "count_flops", refuse)
    assert main([*args, "--results", str(tmp_path / "r2.json")]) == 0
    doc2 = json.loads((tmp_path / "r2.json").read_text())
    assert doc2["status"] == "ok"
    assert doc2["model"]["gflops_per_frame"] == doc1["model"]["gflops_per_frame"]
