"""The ``tessera share`` commands, through a local Typer app."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import tessera
from tessera.errors import SpecError


def _load_register() -> Callable[[typer.Typer], None]:
    try:
        from tessera.cli.share import register
    except ModuleNotFoundError:
        # tessera.cli's __init__ imports every command module; load ours on its own when a
        # sibling is missing from this checkout.
        path = Path(tessera.__file__).parent / "cli" / "share.py"
        spec = importlib.util.spec_from_file_location("_tessera_cli_share", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        register = module.register
    return register


register = _load_register()

SERVICES = """\
gpu: A100-80GB
batching: {latency_fraction: 0.5, max_procs: 3}
services:
  - {name: ranker, model: resnet50, rate_rps: 900, slo_ms: 80}
  - {name: qa, model: bert, rate_rps: 60, slo_ms: 2000}
  - {name: thumbs, model: mobilenetv2, rate_rps: 1500, slo_ms: 60}
"""


@pytest.fixture
def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """test root"""

    register(root)
    return root


def _invoke(app: typer.Typer, args: list[str]) -> tuple[int, str, BaseException | None]:
    res = CliRunner().invoke(app, args)
    return res.exit_code, res.output, res.exception


def test_plan_services_json(app: typer.Typer, tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(SERVICES)
    code, out, exc = _invoke(
        app, ["share", "plan", "--services", str(f), "--gpu", "A100-80GB", "--json"]
    )
    assert code == 0, (out, exc)
    data = json.loads(out)
    assert data["gpus_used"] == len(data["gpus"]) >= data["lower_bound"] >= 1
    assert all(g["layout"] and g["instances"] for g in data["gpus"])
    assert data["predicted"]["slo_violations"] == 0


def test_plan_text_shows_layout_and_attainment(app: typer.Typer, tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(SERVICES)
    code, out, _ = _invoke(app, ["share", "plan", "--services", str(f)])
    assert code == 0
    assert "lower bound" in out and "GPU   0" in out and "Predicted SLO attainment" in out


def test_plan_parvagpu_scenario(app: typer.Typer) -> None:
    src = Path("/work/shared/data/mig/parvagpu_a100_80gb")
    args = ["share", "plan", "--scenario", "2", "--json", "--traffic-s", "1"]
    if src.exists():
        args += ["--parvagpu", str(src)]
    code, out, exc = _invoke(app, args)
    assert code == 0, (out, exc)
    data = json.loads(out)
    assert data["gpus_used"] == 3 and data["lower_bound"] == 3


@pytest.mark.parametrize(
    ("gpu", "count"), [("H100-80GB", 19), ("a100-40gb", 19)], ids=["h100", "a100-alias"]
)
def test_layouts(app: typer.Typer, gpu: str, count: int) -> None:
    code, out, _ = _invoke(app, ["share", "layouts", "--gpu", gpu, "--json"])
    assert code == 0
    assert json.loads(out)["count"] == count


def test_check_forbidden_layout(app: typer.Typer) -> None:
    code, out, _ = _invoke(app, ["share", "check", "4g@0 2g@4 1g@6", "--gpu", "H200-141GB"])
    assert code == 0 and "create GI profile 5" in out
    _, _, exc = _invoke(app, ["share", "check", "3g@4 1g@6", "--gpu", "A100-80GB"])
    assert isinstance(exc, SpecError) and "overlap" in str(exc)


@pytest.mark.parametrize(
    ("yaml_text", "args", "match"),
    [
        ("services:\n  - {name: a, model: resnet50, rate: 5, slo_ms: 10}\n", [], "rate"),
        ("services:\n  - {name: a, model: resnet50, rate_rps: -5, slo_ms: 10}\n", [],
         "greater than 0"),
        ("services: []\n", [], "at least 1"),
        ("services: [\n", [], "not valid YAML"),
        ("services:\n  - {name: a, model: vgg19, rate_rps: 5, slo_ms: 1}\n", [],
         "best latency reachable"),
        ("services:\n  - {name: a, model: resnet50, rate_rps: 5, slo_ms: 50}\n",
         ["--gpu", "B300"], "unknown GPU"),
        ("services:\n  - {name: a, model: resnet50, rate_rps: 5, slo_ms: 50}\n",
         ["--gpu", "H100-80GB"], "no profile data for H100-80GB"),
        ("services:\n  - {name: a, model: resnet50, rate_rps: 5, slo_ms: 50}\n"
         "  - {name: a, model: bert, rate_rps: 5, slo_ms: 5000}\n", [], "duplicate"),
    ],
    ids=["typo-field", "negative-rate", "no-services", "bad-yaml", "slo-unreachable",
         "unknown-gpu", "gpu-without-profiles", "duplicate-names"],
)
def test_plan_bad_input(
    app: typer.Typer, tmp_path: Path, yaml_text: str, args: list[str], match: str
) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml_text)
    _, _, exc = _invoke(app, ["share", "plan", "--services", str(f), *args])
    assert isinstance(exc, SpecError), exc
    assert match in str(exc)
