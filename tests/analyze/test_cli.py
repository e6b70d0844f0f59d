"""``tessera analyze`` through typer's CliRunner, on a local app we register into."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import ModuleType

import pytest
import typer
from typer.testing import CliRunner

from tessera.errors import TraceFormatError


@pytest.fixture(scope="module")
def app(cli_module: ModuleType) -> typer.Typer:
    app = typer.Typer()
    cli_module.register(app)

    @app.callback()
    def _root() -> None:
        """Test root, so 'analyze' stays a subcommand."""

    return app


def test_json_summary_and_outputs(app: typer.Typer, traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "fgd"
    result = CliRunner().invoke(app, ["analyze", "fgd", "--json", "--no-plots", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["trace_format"] == "fgd"
    assert data["jobs"]["job_count"] == 8_152
    assert data["outcomes"]["reproduced"] >= 20
    verdicts = {c["figure"]["quantity"]: c["verdict"] for c in data["comparisons"]}
    assert verdicts["tasks requesting a fraction of a GPU"] == "reproduced"
    assert json.loads((out / "summary.json").read_text()) == data


def test_html_report_is_self_contained(app: typer.Typer, traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "pai"
    result = CliRunner().invoke(app, ["analyze", "pai-2020", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "6,742" in result.output and "published vs measured" in result.output
    html = (out / "report.html").read_text()
    assert "Published vs measured" in html and "not reproducible" in html
    assert "src='http" not in html and "href=" not in html
    payload = html.split("data:image/png;base64,")[1].split("'")[0]
    assert base64.b64decode(payload).startswith(b"\x89PNG")
    assert (out / "inventory.png").is_file()


def test_no_plots_and_default_out_folder(
    app: typer.Typer, traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["analyze", "spot-2026", "--no-plots"])
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").glob("analyze-spot-2026-*")
    assert (run / "report.html").is_file() and not list(run.glob("*.png"))


def test_bad_trace_raises_trace_format_error(app: typer.Typer, tmp_path: Path) -> None:
    bad = tmp_path / "what.csv"
    bad.write_text("a,b\n1,2\n")
    result = CliRunner().invoke(app, ["analyze", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0
    assert isinstance(result.exception, TraceFormatError)
    assert "unknown trace format" in str(result.exception)
