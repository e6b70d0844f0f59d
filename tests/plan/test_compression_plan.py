"""The planner knows compression: each scheme's bytes on the wire, its codec compute, and on a
slow link the choice of a scheme (``tessera plan --compress``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.perf.comm import RingPath, allgather_time_s, allreduce_time_s
from tessera.perf.compression import (
    CompressionSpec,
    codec_time_s,
    exchange_time_s,
    planner_collectives,
    wire_collectives,
)
from tessera.plan.api import parse_devices, plan_data_parallel
from tessera.plan.compression import plan_with_compression

A100, T4, V100 = (resolve_flavor(f) for f in ("A100", "T4", "V100"))
RING = RingPath(4, 0.125, 50.0)  # 1 Gb/s


def test_allgather_moves_every_message_but_ones_own():
    ring = RingPath(3, 1.0, 10.0)
    assert allgather_time_s([100.0, 200.0, 300.0], ring) == pytest.approx(
        2 * 10e-6 + (600 - 100) / 1e9)
    assert allgather_time_s([5.0], RingPath(1, 1.0, 10.0)) == 0.0


def test_none_is_exactly_the_old_allreduce():
    assert exchange_time_s(CompressionSpec(), 4e8, RING, [T4]) == allreduce_time_s(4e8, RING)
    old = plan_data_parallel("bert", parse_devices("V100:2,T4:2"), 64)
    new = plan_with_compression("bert", parse_devices("V100:2,T4:2"), 64).chosen
    assert new == old


@pytest.mark.parametrize(("scheme", "wire_bytes"), [
    ("fp16", 2e8), ("bf16", 2e8),
    ("powersgd:rank=4", 2 * 1e8 / 1024 * 4 * 4),  # P and Q factors, 1024-wide matrices
    ("3lc", 1e8 / 5),  # five 3-valued elements per byte, zero runs not counted
])
def test_planner_bytes_per_scheme(scheme, wire_bytes):
    from tessera.perf.compression import parse_compression

    wire = planner_collectives(parse_compression(scheme), 4e8)  # 100 M fp32 parameters
    assert sum(c.bytes_per_rank for c in wire) == pytest.approx(wire_bytes)


def test_planner_estimate_agrees_with_runtime_bytes_on_square_layers():
    """The runtime counts exact bytes from the shapes; for 1024-wide square matrices the
    planner's estimate from the parameter count is the same (3LC: up to its headers)."""
    shapes = [(1024, 1024)] * 6
    grad = 4.0 * 6 * 1024 * 1024
    for text in ("fp16", "powersgd:rank=8"):
        from tessera.perf.compression import parse_compression

        spec = parse_compression(text)
        rt = sum(c.bytes_per_rank for c in wire_collectives(spec, shapes))
        pl = sum(c.bytes_per_rank for c in planner_collectives(spec, grad))
        assert rt == pytest.approx(pl)
    rt = wire_collectives(CompressionSpec("3lc"), shapes)[0].bytes_per_rank
    assert rt == pytest.approx(grad / 4 / 5, abs=6 * 9)


def test_codec_compute_is_charged_and_grows_with_rank():
    base = codec_time_s(CompressionSpec("powersgd", rank=1), 1e8, T4, 2)
    assert 0 < base < codec_time_s(CompressionSpec("powersgd", rank=8), 1e8, T4, 2)
    assert codec_time_s(CompressionSpec("fp16"), 1e8, T4, 2) > codec_time_s(
        CompressionSpec("fp16"), 1e8, A100, 2)  # slower memory
    assert codec_time_s(CompressionSpec("fp16"), 1e8, T4, 1) == 0.0


def test_auto_picks_compression_on_a_slow_link_and_none_on_nvlink():
    slow = plan_with_compression("bert", parse_devices("V100:2,T4:2"), 64, compress="auto",
                                 link_gbps=1)
    assert slow.chosen.compression != "none"
    assert slow.chosen.step_time_s < slow.baseline.step_time_s
    assert slow.chosen.step_time_s == min(p.step_time_s for p in slow.plans.values())
    assert set(slow.plans) == {"none", "fp16", "bf16", "powersgd:rank=4,start=2", "3lc"}
    fast = plan_with_compression("cifar10", parse_devices("A100:2"), 64, compress="auto")
    assert fast.chosen.compression == "none"  # codec work costs more than NVLink saves


def test_slow_link_makes_uncompressed_plans_slower():
    fast = plan_with_compression("bert", parse_devices("V100:2,T4:2"), 64).chosen
    slow = plan_with_compression("bert", parse_devices("V100:2,T4:2"), 64, link_gbps=1).chosen
    assert slow.step_time_s > fast.step_time_s


@pytest.mark.parametrize(("args", "fragment"), [
    (["--compress", "zip"], "unknown compression scheme 'zip'"),
    (["--link-gbps", "0"], "--link-gbps must be > 0"),
    (["--compress", "powersgd:rank=0"], "powersgd rank must be ≥ 1"),
])
def test_cli_bad_input(args, fragment):
    result = CliRunner().invoke(app, ["plan", "--model", "bert", "--devices", "V100:2,T4:2",
                                      "--global-batch", "64", *args])
    assert isinstance(result.exception, SpecError)
    assert fragment in str(result.exception)


def test_cli_prints_the_choice_and_its_effect():
    args = ["plan", "--model", "bert", "--devices", "V100:2,T4:2", "--global-batch", "64",
            "--compress", "auto", "--link-gbps", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "compression    auto: predicted step time per scheme: none" in result.output
    assert "x the throughput" in result.output
    out = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    assert out["compression"] != "none" and out["link_gbps"] == 1
    assert out["step_time_s"] == min(out["step_time_s_by_scheme"].values())


def test_spec_error_for_layerwise_models():
    result = CliRunner().invoke(app, ["plan", "--model", "llama-7b", "--devices", "A100:8",
                                      "--global-batch", "64", "--compress", "fp16"])
    assert isinstance(result.exception, SpecError)
