"""source_code.options: one table generates the parser, PipelineConfig and to_argv, and they agree."""
from __future__ import annotations

import dataclasses

import pytest

from source_code.options import OPTIONS, PipelineConfig, build_parser, config_from_args, to_argv


def parse(argv):
    return config_from_args(build_parser().parse_args(argv))


def test_every_option_is_a_config_field_and_a_flag():
    fields = {f.name for f in dataclasses.fields(PipelineConfig)}
    assert fields == {o.name for o in OPTIONS}
    flags = {s for a in build_parser()._actions for s in a.option_strings}
    assert {o.flag for o in OPTIONS} <= flags and "--no-osd" in flags
    assert "--realtime" in build_parser().format_help() and "--queue-size" in build_parser().format_help()


def test_defaults_come_from_the_table():
    cfg = parse(["--input", "a.mp4"])
    assert cfg == PipelineConfig(inputs=("a.mp4",))
    assert (cfg.batch_size, cfg.osd, cfg.queue_size, cfg.warmup, cfg.device) == (1, True, 4, 10, "auto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.batch_size = 2


@pytest.mark.parametrize("flags", [
    {"queues": True, "batch_size": 4},
    {"osd": False, "interval": 3, "input_hw": (192, 320), "device": "cuda:1"},
    {"inputs": ["a.mp4", "b.mp4"], "streams": 2, "realtime": True, "queue_size": 2, "precision": "fp16"},
    {"compile": False, "frames": None, "input_hw": "96x160"},
    {"tf32": "off", "device": "cuda:0"},
    {"tf32": "on", "precision": "fp32"},
])
def test_to_argv_round_trips_through_the_parser(flags):
    argv = to_argv(flags)
    cfg = parse(argv if "inputs" in flags else ["--input", "x.mp4", *argv])
    for name, value in flags.items():
        want = {"input_hw": (96, 160)}.get(name, value) if isinstance(value, str) and name == "input_hw" else value
        want = tuple(want) if isinstance(want, list) else want
        want = PipelineConfig(inputs=("x",)).__getattribute__(name) if value is None else want
        assert getattr(cfg, name) == want, name


def test_to_argv_spelling_and_unknown_names():
    assert to_argv({"queues": True, "batch_size": 4, "osd": False, "compile": False}) == [
        "--queues", "--batch-size", "4", "--no-osd"]
    with pytest.raises(ValueError, match="unknown option.*batchsize"):
        to_argv({"batchsize": 4})


def test_tf32_unset_by_default_and_said_where_fp32_is_shown():
    from source_code.options import TF32

    assert parse(["--input", "a.mp4"]).tf32 is None and TF32[None] is None
    assert (TF32[parse(["--input", "a.mp4", "--tf32", "off"]).tf32], TF32["on"]) == (False, True)
    text = " ".join(build_parser().format_help().split())
    assert "fp32 on an Ampere or Hopper GPU runs its convolutions as TF32" in text
    with pytest.raises(SystemExit):
        parse(["--input", "a.mp4", "--tf32", "maybe"])


@pytest.mark.parametrize("device", ["cuda:1", "CUDA:0", "cuda", "cpu", "auto"])
def test_devices_by_index_are_accepted(device):
    assert parse(["--input", "a.mp4", "--device", device]).device == device.lower()
