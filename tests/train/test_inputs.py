"""Bad input fails early with a clear TesseraError: device lists, flavors, examples, options."""

from __future__ import annotations

import time

import pytest

from tessera.errors import SpecError, TesseraError, UnknownFlavorError
from tessera.model.gpus import resolve_flavor
from tessera.train.config import EXAMPLE_NAMES, FailAt, TrainConfig, from_json
from tessera.train.devices import Precision, choose_precision, parse_devices, relative_speeds
from tessera.train.emulation import EmulationConfig, Emulator, SpeedChange, parse_speed_change


def test_device_list_expands_to_one_slot_per_rank():
    slots = parse_devices(" A100:1, t4:2 ,V100")
    assert [s.flavor.short for s in slots] == ["A100-80GB", "T4", "T4", "V100-16GB"]
    assert [s.rank for s in slots] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "text",
    ["", "   ", "A100:1,,T4:2", "A100:x", "A100:0", "A100:-1", ":2", "A100:1:2", "T4:999"],
    ids=["empty", "blank", "empty-entry", "non-int", "zero", "negative", "no-name",
         "extra-colon", "too-many"],
)
def test_malformed_device_list(text):
    with pytest.raises(SpecError):
        parse_devices(text)


def test_unknown_flavor_names_the_known_ones():
    with pytest.raises(UnknownFlavorError, match="known flavors"):
        parse_devices("A100:1,B9000:2")


@pytest.mark.parametrize(
    ("flavor", "precision"),
    [("A100", Precision.BF16), ("H100", Precision.BF16), ("L4", Precision.BF16),
     ("V100", Precision.FP16), ("T4", Precision.FP16), ("P100", Precision.FP32),
     ("K80", Precision.FP32)],
)
def test_precision_per_flavor_never_bf16_on_v100_or_t4(flavor, precision):
    f = resolve_flavor(flavor)
    assert choose_precision(f) is precision
    assert (precision is Precision.BF16) == f.bf16


def test_relative_speeds_use_tensor_cores_only_when_all_have_them():
    assert relative_speeds(parse_devices("A100,T4")) == pytest.approx((1.0, 65 / 312))
    # A P100 has no tensor cores, so the whole job is ranked by fp32 peak.
    assert relative_speeds(parse_devices("A100,P100")) == pytest.approx((1.0, 9.3 / 19.5))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"example": "resnet9000"}, SpecError),
        ({"devices": "A100:1,T4:two"}, SpecError),
        ({"devices": "Z80:1"}, UnknownFlavorError),
        ({"split": "clever"}, SpecError),
        ({"global_batch": 2}, SpecError),
        ({"steps": 0}, SpecError),
        ({"split": "fixed", "fixed_split": (1, 1)}, SpecError),
        ({"split": "fixed", "fixed_split": (10, 10, 0)}, SpecError),
        ({"speeds": (1.0, 0.0, 1.0)}, SpecError),
        ({"speed_changes": (SpeedChange(3, 5, 0.5),)}, SpecError),
        ({"fail_at": FailAt(2, 3)}, SpecError),
        ({"dtype": "float8"}, SpecError),
    ],
    ids=["unknown-example", "malformed-devices", "unknown-flavor", "bad-split", "tiny-batch",
         "zero-steps", "fixed-wrong-length", "fixed-zero", "zero-speed",
         "speed-change-rank", "fail-rank", "bad-dtype"],
)
def test_bad_config_is_rejected(kwargs, error):
    base = {"example": "mlp", "devices": "A100:1,T4:2", "global_batch": 20}
    with pytest.raises(error):
        TrainConfig(**(base | kwargs))


def test_every_error_is_a_tessera_error():
    assert issubclass(SpecError, TesseraError) and issubclass(UnknownFlavorError, TesseraError)


def test_example_names_match_the_registry():
    pytest.importorskip("torch")
    from tessera.train.examples import EXAMPLES

    assert tuple(EXAMPLES) == EXAMPLE_NAMES


def test_config_json_round_trip():
    cfg = TrainConfig("cnn", "A100:1,T4:2", global_batch=30, split="fixed",
                      fixed_split=(20, 5, 5), speeds=(3.0, 1.0, 1.0),
                      speed_changes=(SpeedChange(4, 1, 0.5),), fail_at=FailAt(2, 0))
    assert from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize("text", ["5:1", "a:1:0.5", "5:1:0", "5:-1:2", "-1:0:2"])
def test_malformed_speed_change(text):
    with pytest.raises(SpecError):
        parse_speed_change(text)


def test_speed_changes_compound_from_their_step_on():
    emu = Emulator((1.0, 0.5), EmulationConfig(0.0, 0.001),
                   (SpeedChange(3, 1, 0.5), SpeedChange(6, 1, 4.0)))
    assert [emu.speed(s, 1) for s in (0, 3, 6)] == [0.5, 0.25, 1.0]
    assert emu.nominal_step_s(0, 1, 10) == pytest.approx(2 * emu.nominal_step_s(0, 0, 10))


def test_pad_makes_the_step_last_at_least_its_nominal_time():
    emu = Emulator((0.5,), EmulationConfig(0.0, 0.001))
    start = time.perf_counter()
    assert emu.pad(0, 0, 5, start) >= 0.010


def test_validation_modules_do_not_import_torch():
    """Config, balancer and emulation stay torch-free, so the CLI validates input instantly."""
    import subprocess
    import sys

    code = ("import sys, tessera.train.config, tessera.train.balancer, tessera.train.emulation; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": "src",
                         "PATH": ""}, cwd=_repo_root())
    assert out.stdout.strip() == "False"


def _repo_root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2])
