"""``tessera train``: bad input fails before any process starts; a real run ends with JSON."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tessera.errors import SpecError, UnknownFlavorError

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
    ],
    ids=["unknown-example", "malformed-count", "empty-devices", "unknown-flavor", "bad-split",
         "speed-change-fields", "speed-change-rank", "bad-speeds", "bad-fail-at", "tiny-batch"],
)
def test_bad_input_fails_before_launch(app, args, error, fragment):
    result = CliRunner().invoke(app, ["train", *args])
    assert isinstance(result.exception, error)
    assert fragment in str(result.exception)


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
    assert "EMULATED" in proc.stdout
    assert sum(line.startswith("step ") for line in lines) == 8  # per-step times printed
    assert (tmp_path / "latest.pt").exists()
