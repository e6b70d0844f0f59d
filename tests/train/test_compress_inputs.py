"""Bad ``--compress`` / ``--link-gbps`` input fails with one clear line before any rank starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tessera.errors import SpecError
from tessera.perf.compression import CompressionSpec, parse_compression
from tessera.train.config import TrainConfig, from_json
from tests.train.test_cli_train import _register

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("none", CompressionSpec()), ("FP16", CompressionSpec("fp16")),
     ("powersgd", CompressionSpec("powersgd", rank=4, start_step=2)),
     ("powersgd:rank=8,start=10", CompressionSpec("powersgd", rank=8, start_step=10)),
     ("3lc:s=1.5", CompressionSpec("3lc", sparsity=1.5))],
)
def test_parse(text, expected):
    assert parse_compression(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("zip", "unknown compression scheme 'zip'; choose one of: none, fp16, bf16, powersgd, 3lc"),
     ("powersgd:rank=0", "powersgd rank must be ≥ 1, got 0"),
     ("powersgd:rank=x", "rank needs a number"),
     ("powersgd:start=1", "powersgd start must be ≥ 2"),
     ("fp16:rank=2", "fp16 takes options none"),
     ("3lc:s=2", "3lc sparsity multiplier s must be in [1, 2)")],
)
def test_bad_scheme_text(text, fragment):
    with pytest.raises(SpecError) as err:
        parse_compression(text)
    assert fragment in str(err.value)


def test_config_rejects_bad_values_and_round_trips_good_ones():
    with pytest.raises(SpecError, match="unknown compression scheme"):
        TrainConfig("mlp", "T4:2", compress="gzip")
    with pytest.raises(SpecError, match="--link-gbps must be > 0"):
        TrainConfig("mlp", "T4:2", link_gbps=0)
    cfg = TrainConfig("mlp", "T4:2", compress="powersgd:rank=2", link_gbps=1.0)
    assert from_json(cfg.to_json()) == cfg
    assert cfg.link is not None and cfg.link.ring(2).bw_gbps == 0.125


@pytest.mark.torch
def test_model_and_backend_checks():
    pytest.importorskip("torch")
    from tessera.train.compression import check_compression, gradient_shapes

    shapes = gradient_shapes("mlp")  # 32×16, 32, 4×32, 4: the largest matrix has rank 16
    check_compression(CompressionSpec("powersgd", rank=16), shapes, "gloo")
    with pytest.raises(SpecError, match=r"powersgd rank 17 is above the rank of every gradient "
                       r"matrix of the model \(the largest has rank 16\); choose 1..16"):
        check_compression(CompressionSpec("powersgd", rank=17), shapes, "gloo")
    for scheme in ("fp16", "bf16", "3lc"):  # torch's gloo all-reduces 16-bit floats
        check_compression(CompressionSpec(scheme), shapes, "gloo")
    with pytest.raises(SpecError, match=r"needs NCCL ≥ 2\.10 .* NCCL 2\.9\.9 \(use fp16\)"):
        check_compression(CompressionSpec("bf16"), shapes, "nccl", (2, 9, 9))
    check_compression(CompressionSpec("bf16"), shapes, "nccl", (2, 21, 5))
    with pytest.raises(SpecError, match="not supported on the mpi backend"):
        check_compression(CompressionSpec("fp16"), shapes, "mpi")


@pytest.mark.torch
@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["--compress", "lz4"], "unknown compression scheme 'lz4'"),
     (["--compress", "powersgd:rank=99"], "powersgd rank 99 is above the rank"),
     (["--compress", "powersgd:rank=0"], "powersgd rank must be ≥ 1"),
     (["--link-gbps", "-1"], "--link-gbps must be > 0")],
)
def test_cli_rejects_before_launch(monkeypatch, args, fragment):
    pytest.importorskip("torch")
    import typer

    import tessera.train.launcher

    def no_launch(*_a: object, **_k: object) -> None:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(tessera.train.launcher, "launch", no_launch)
    app = typer.Typer()
    _register()(app)
    app.callback()(lambda: None)
    result = CliRunner().invoke(app, ["train", "mlp", "--devices", "T4:2", *args])
    assert isinstance(result.exception, SpecError), result.output
    assert fragment in str(result.exception)


@pytest.mark.torch
def test_cli_exit_status_two_with_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "tessera", "train", "mlp", "--devices", "T4:2", "--compress",
         "powersgd:rank=99"], capture_output=True, text=True, timeout=120, cwd=REPO,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": ""})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: powersgd rank 99 is above the rank of every gradient matrix of the model "
        "(the largest has rank 16); choose 1..16"]
