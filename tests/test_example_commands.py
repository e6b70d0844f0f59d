"""The commands in the examples' headers run, and run what they promise: every flavor of the
lab cluster trains jobs, and the co-simulation's reservation costs training something."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import typer
from typer.testing import CliRunner

from tessera.cli import share as share_cli
from tessera.cli import simulate as simulate_cli
from tessera.model.cluster import load_cluster
from tessera.perf.tables import load_throughputs

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _app(module: object) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    module.register(app)  # type: ignore[attr-defined]
    return app


def header_command(path: Path, command: str) -> list[str]:
    """The arguments of the ``tessera <command>`` line (with its continuations) in ``path``'s
    header comment."""
    lines = [ln.lstrip("# ").rstrip() for ln in path.read_text().splitlines()
             if ln.startswith("#")]
    for i, line in enumerate(lines):
        if line.startswith(f"tessera {command} "):
            text = line
            while text.endswith("\\"):
                i += 1
                text = text[:-1] + " " + lines[i]
            return shlex.split(text)[1:]
    raise AssertionError(f"no `tessera {command}` in {path}")


def test_lab_cluster_command_trains_on_every_flavor(tmp_path: Path) -> None:
    lab = EXAMPLES / "cluster-lab.yaml"
    args = header_command(lab, "simulate")
    assert args[args.index("--throughputs") + 1] == "sia"
    table = load_throughputs("sia")
    assert all(table.covers(f) for f in load_cluster(str(lab)).flavors())
    args = [a if a != "examples/cluster-lab.yaml" else str(lab) for a in args]
    run = CliRunner().invoke(_app(simulate_cli), [
        *args, "--limit", "150", "-p", "fifo", "--no-plots", "--json", "--out", str(tmp_path)])
    assert run.exit_code == 0, run.output
    result = json.loads(run.stdout.splitlines()[-1])["results"]["fifo"]
    assert result["succeeded"] == 150
    assert all(u > 0 for u in result["utilization_by_flavor"].values())


def test_cosim_command_shows_what_the_reservation_costs(tmp_path: Path) -> None:
    services = EXAMPLES / "services-a100.yaml"
    args = header_command(services, "share cosim")
    assert args[args.index("--throughputs") + 1] == "sia"
    args = [a if a != "examples/services-a100.yaml" else str(services) for a in args]
    run = CliRunner().invoke(_app(share_cli), [*args, "--serve-seconds", "1", "--json"])
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert not any("by construction" in n for n in data["notes"])
    t = data["training"]
    assert t["with_services"]["avg_jct_s"] > t["full_cluster"]["avg_jct_s"]
