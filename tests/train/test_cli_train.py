"""``tessera train``: bad input fails before any process starts; a real run ends with JSON."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import typer
from typer.testing import CliRunner

from tessera.errors import SpecError, UnknownFlavorError

if TYPE_CHECKING:
    from tessera.train.config import TrainConfig
    from tessera.train.launcher import TrainResult

CLI_FILE = Path(__file__).resolve().parents[2] / "src" / "tessera" / "cli" / "train.py"

# tessera.cli's __init__ imports every registered command module; while some of them are still
# being written, load ours from its file so these tests do not depend on the others.
LOAD_SNIPPET = f"""
import importlib.util, typer
spec = importlib.util.spec_from_file_location("_tessera_cli_train", {str(CLI_FILE)!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
app = typer.Typer()
module.register(app)
app.callback()(lambda: None)
"""


def _register() -> Callable[[typer.Typer], None]:
    spec = importlib.util.spec_from_file_location("_tessera_cli_train", CLI_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.register  # type: ignore[no-any-return]


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    _register()(app)
    app.callback()(lambda: None)
    return app


@pytest.mark.parametrize(
    ("args", "error", "fragment"),
    [
        (["resnet", "--devices", "A100:1"], SpecError, "unknown example"),
        (["cnn", "--devices", "A100:1,T4:x"], SpecError, "not an integer"),
        (["cnn", "--devices", ""], SpecError, "empty device list"),
        (["cnn", "--devices", "A100:1,Q9:1"], UnknownFlavorError, "unknown GPU flavor"),
        (["cnn", "--devices", "A100:1", "--split", "fixed"], SpecError, "--split"),
        (["cnn", "--devices", "A100:2", "--speed-change", "3:1"], SpecError, "STEP:RANK:FACTOR"),
        (["cnn", "--devices", "A100:2", "--speed-change", "3:7:0.5"], SpecError, "rank 7"),
        (["cnn", "--devices", "A100:2", "--speeds", "3,x"], SpecError, "--speeds"),
        (["cnn", "--devices", "A100:2", "--fail-at", "5"], SpecError, "STEP:RANK"),
        (["cnn", "--devices", "T4:3", "--global-batch", "2"], SpecError, "global batch"),
        (["cnn", "--devices", "A100:1", "--plan-model", "resnet"], SpecError,
         "unknown planner model 'resnet' (--plan-model); choose one of: "),
        (["cnn", "--devices", "A100:1", "--split", "equal", "--plan-model", "bert"], SpecError,
         "only applies to split 'planned'"),
        (["cnn", "--devices", "A100:1", "--lr-scaling", "sqrt"], SpecError,
         "lr_scaling must be one of linear, none"),
    ],
    ids=["unknown-example", "malformed-count", "empty-devices", "unknown-flavor", "bad-split",
         "speed-change-fields", "speed-change-rank", "bad-speeds", "bad-fail-at", "tiny-batch",
         "unknown-plan-model", "plan-model-without-planned",
         "bad-lr-scaling"],
)
def test_bad_input_fails_before_launch(app, args, error, fragment):
    result = CliRunner().invoke(app, ["train", *args])
    assert isinstance(result.exception, error)
    assert fragment in str(result.exception)


def _fake_launch(cfg: TrainConfig, **_: object) -> TrainResult:
    """A finished run without processes: two steps of 50 ms at the initial split."""
    from tessera.train.launcher import TrainResult

    split = list(cfg.initial_split())
    log = tuple({"step": s, "split": split, "compute_s": [0.04] * cfg.world_size,
                 "wall_s": 0.05, "loss": 1.0, "skipped": False, "attempt": 0,
                 "rebalance": None} for s in range(2))
    n = cfg.world_size
    return TrainResult(cfg, Path("."), True, tuple(s.flavor.short for s in cfg.slots),
                       ("fp32",) * n, (1.0,) * n, log, 0, tuple(split))


@pytest.mark.torch
@pytest.mark.parametrize(
    ("args", "source", "lines"),
    [
        (["cnn", "--devices", "A100:1,T4:2"], "planner",
         ["initial split [46, 1, 1] from the planner: planned as cifar10",
          "start at the minimum batch (1)",
          "measured step time 50.0 ms (960 samples/s); planner predicted 32.0 ms"]),
        (["cnn", "--devices", "A100:1,T4:2", "--plan-model", "imagenet"], "planner",
         ["from the planner: planned as imagenet", "for imagenet on real GPUs"]),
        (["cnn", "--devices", "K80:1,V100:1"], "catalog",
         ["initial split [10, 38] from the catalog: relative peak speeds (fp32 tflops), "
          "because the planner has no cifar10 profile for K80"]),
    ],
    ids=["planner", "plan-model", "catalog-fallback"],
)
def test_output_names_the_initial_split_source(app, monkeypatch, args, source, lines):
    pytest.importorskip("torch")
    import tessera.train.launcher

    monkeypatch.setattr(tessera.train.launcher, "launch", _fake_launch)
    result = CliRunner().invoke(app, ["train", *args, "--json"])
    assert result.exit_code == 0, result.output
    for line in lines:
        assert line in result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["initial_split_source"] == source
    assert summary["initial_split"] == summary["final_split"]
    assert summary["step_time_s"] == pytest.approx(0.05)
    if source == "catalog":
        assert "planner predicted" not in result.output
        assert summary["planner_step_time_s"] is None and "K80" in summary["initial_split_reason"]


@pytest.mark.torch
@pytest.mark.slow
def test_train_runs_and_ends_with_json_summary(tmp_path):
    pytest.importorskip("torch")
    code = LOAD_SNIPPET + "app()\n"
    args = ["train", "mlp", "--devices", "A100:1,T4:2", "--steps", "8", "--global-batch", "24",
            "--speeds", "3,1,1", "--speed-change", "3:0:0.25", "--json",
            "--checkpoint-dir", str(tmp_path)]
    src = str(CLI_FILE.parents[2])
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": src, "PATH": ""}, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["split"] == "planned" and summary["emulated"] is True
    assert summary["throughput_samples_per_s"] > 0
    assert summary["rebalances"] == len(summary["rebalance_events"])
    assert sum(summary["final_split"]) == 24
    assert summary["precisions"] == ["bf16", "fp16", "fp16"]
    assert summary["initial_split_source"] == "planner" and summary["plan_model"] == "ncf"
    assert "planner predicted" in proc.stdout
    assert "EMULATED" in proc.stdout
    assert sum(line.startswith("step ") for line in lines) == 8  # per-step times printed
    assert (tmp_path / "latest.pt").exists()


@pytest.mark.torch
def test_learning_rate_flags_reach_the_run(app, monkeypatch):
    """``--lr``/``--lr-batch``/``--lr-scaling`` set the rate a resumed run scales from."""
    pytest.importorskip("torch")
    import tessera.train.launcher

    seen: list[TrainConfig] = []

    def launch(cfg: TrainConfig, **kw: object) -> TrainResult:
        seen.append(cfg)
        return _fake_launch(cfg, **kw)

    monkeypatch.setattr(tessera.train.launcher, "launch", launch)
    args = ["train", "cnn", "--devices", "A100:2", "--global-batch", "64", "--lr", "0.1",
            "--lr-batch", "32"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    cfg = seen[-1]
    assert (cfg.lr, cfg.lr_batch, cfg.lr_scaling) == (0.1, 32, "linear")
    assert cfg.lr_at(64) == pytest.approx(0.2)
    result = CliRunner().invoke(app, [*args, "--lr-scaling", "none"])
    assert result.exit_code == 0, result.output
    assert seen[-1].lr_at(64) == pytest.approx(0.1)
    bad = CliRunner().invoke(app, [*args[:-1], "0"])
    assert bad.exit_code == 2 and "--lr-batch" in bad.output
