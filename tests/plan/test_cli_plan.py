"""``tessera plan`` through typer's CliRunner on a local app."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tessera.errors import NoProfileError, SpecError, TesseraError, UnknownFlavorError
from tessera.plan.dp import BatchTooLargeError


def _register() -> Callable[[typer.Typer], None]:
    """``tessera.cli.plan.register``; loaded by path if the CLI package cannot import yet
    (``tessera/cli/__init__.py`` imports every command module, some written concurrently)."""
    try:
        from tessera.cli.plan import register
    except (ImportError, AttributeError):
        import tessera

        path = Path(tessera.__file__).parent / "cli" / "plan.py"
        spec = importlib.util.spec_from_file_location("_tessera_cli_plan", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        register = module.register
    return register  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    a = typer.Typer()
    _register()(a)

    @a.callback()
    def _root() -> None:  # keep `plan` a sub-command
        """test app"""

    return a


def run(app: typer.Typer, *args: str) -> object:
    return CliRunner().invoke(app, ["plan", *args])


def test_text_output_lists_devices_and_totals(app: typer.Typer) -> None:
    r = run(app, "--model", "imagenet", "--devices", "A100:2,V100:4,T4:2",
            "--global-batch", "1024")
    assert r.exit_code == 0, r.output
    for word in ("A100-80GB", "V100-16GB", "T4", "step time", "throughput", "efficiency"):
        assert word in r.output


def test_json_output_schema(app: typer.Typer) -> None:
    r = run(app, "--model", "imagenet", "--devices", "A100:2,V100:4,T4:2",
            "--global-batch", "1024", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert len(out["devices"]) == 8
    assert sum(d["local_batch"] for d in out["devices"]) == 1024
    assert {d["flavor"] for d in out["devices"]} == {"A100-80GB", "V100-16GB", "T4"}
    assert out["step_time_s"] > 0
    assert out["throughput_samples_per_s"] == pytest.approx(1024 / out["step_time_s"])
    assert out["throughput_samples_per_s"] <= out["bound_samples_per_s"]


def test_dropped_devices_are_explained(app: typer.Typer) -> None:
    r = run(app, "--model", "bert", "--devices", "A100:2,V100:4,T4:2", "--global-batch", "64")
    assert r.exit_code == 0, r.output
    assert "dropped 2 x T4" in r.output and "instead of" in r.output


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [(("--model", "imagenet", "--devices", "T4:2", "--global-batch", "100000"),
      BatchTooLargeError, "needs at least 250 micro-steps"),
     (("--model", "imagenet", "--devices", "T4:2", "--global-batch", "401",
       "--max-micro-steps", "1"), BatchTooLargeError, "hold 400 samples per pass"),
     (("--model", "alexnet", "--devices", "T4:2", "--global-batch", "64"),
      NoProfileError, "known models"),
     (("--model", "imagenet", "--devices", "Z80:2", "--global-batch", "64"),
      UnknownFlavorError, "known flavors"),
     (("--model", "imagenet", "--devices", "A100-2", "--global-batch", "64"),
      SpecError, "flavor:count"),
     (("--model", "imagenet", "--devices", "A100:two", "--global-batch", "64"),
      SpecError, "not an integer"),
     (("--model", "imagenet", "--devices", "A100:0", "--global-batch", "64"),
      SpecError, "must be positive"),
     (("--model", "imagenet", "--devices", "A100:1,", "--global-batch", "64"),
      SpecError, "flavor:count"),
     (("--model", "imagenet", "--devices", "A100:1", "--global-batch", "0"),
      SpecError, "positive")],
    ids=["batch-exceeds-memory", "batch-exceeds-memory-no-accum", "unknown-model",
         "unknown-flavor", "no-colon", "count-not-int", "zero-count",
         "trailing-comma", "zero-batch"],
)
def test_bad_input_is_a_clear_error(app: typer.Typer, args: tuple[str, ...],
                                    error: type[TesseraError], match: str) -> None:
    r = run(app, *args)
    assert isinstance(r.exception, error), r.output
    assert isinstance(r.exception, TesseraError)
    assert match in str(r.exception)


def test_pipeline_flag_plans_a_layered_model(app: typer.Typer) -> None:
    r = run(app, "--model", "gpt", "--devices", "A100-40GB:4,V100:8", "--global-batch", "64",
            "--pipeline", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["kind"] == "pipeline" and out["stages"]
    assert out["stages"][-1]["end_layer"] == 50
    text = run(app, "--model", "resnet50", "--devices", "V100:2,T4:2", "--global-batch", "64",
               "--pipeline")
    assert text.exit_code == 0 and "data-parallel" in text.output


def test_unprofiled_flavor_gets_a_marked_estimate(app: typer.Typer) -> None:
    """H100 has no Sia profile: the plan uses a roofline estimate and says so (issue 13)."""
    r = run(app, "--model", "imagenet", "--devices", "H100:2,A100:2", "--global-batch", "512")
    assert r.exit_code == 0, r.output
    assert "H100-80GB has no measured profile" in r.output and "roofline estimate" in r.output
    js = json.loads(run(app, "--model", "imagenet", "--devices", "H100:2,A100:2",
                        "--global-batch", "512", "--json").output)
    assert js["estimated"] == ["H100-80GB"]


def test_transformer_gets_a_three_dimensional_plan(app: typer.Typer) -> None:
    r = run(app, "--model", "llama-7b", "--devices", "H100:8,A100:8", "--global-batch", "32",
            "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["kind"] == "pipeline" and out["pp_stages"] == len(out["stages"])
    assert out["stages"][0]["first_layer"] == 0 and out["stages"][-1]["end_layer"] == 34
    for s in out["stages"]:
        assert s["gpus"] == s["tp"] * s["replicas"] and s["dp"] == s["replicas"] * out["dp_copies"]
        assert 0 < s["mem_gib_per_gpu"] <= 80 * 0.9
    assert out["step_time_s"] > 0 and out["bottleneck_s"] > 0
    assert out["throughput_samples_per_s"] == pytest.approx(32 / out["step_time_s"])


@pytest.mark.parametrize(
    ("args", "match"),
    [(("--model", "llama-70b", "--devices", "T4:2", "--global-batch", "8"), "short by"),
     (("--model", "llama-7b", "--devices", "H100:2", "--global-batch", "8", "--zero", "5"),
      "--zero"),
     (("--model", "llama-8b", "--devices", "H100:2", "--global-batch", "8"), "unknown model")],
    ids=["does-not-fit", "bad-zero", "unknown-transformer"],
)
def test_three_dimensional_bad_input(app: typer.Typer, args: tuple[str, ...], match: str) -> None:
    r = run(app, *args)
    assert isinstance(r.exception, TesseraError), r.output
    assert match in str(r.exception)


def test_pipeline_flag_unknown_layered_model(app: typer.Typer) -> None:
    r = run(app, "--model", "imagenet", "--devices", "V100:2", "--global-batch", "64",
            "--pipeline")
    assert isinstance(r.exception, NoProfileError)
    assert "gpt-<layers>x<hidden>" in str(r.exception)
