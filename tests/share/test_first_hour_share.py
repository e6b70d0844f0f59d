"""``tessera share plan`` claims only what it proved (issue 31, first hour): a plan is "fewest
GPUs" under a named model, never "optimal" alone, and a replay that finds an SLO missed says
so next to the claim."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tessera.cli import app

runner = CliRunner()


def test_share_plan_names_its_model_and_owns_a_violation() -> None:
    r = runner.invoke(app, ["share", "plan", "--scenario", "3", "--proxy"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "optimal" not in out
    claim = out.splitlines()[1]
    assert "fewest GPUs" in claim and "under the planning model" in claim
    assert "queueing delay is not modelled" in claim
    assert "VIOLATED" in out  # scenario 3: resnet101 misses its SLO in the replay
    assert out.rstrip().splitlines()[-1].startswith("1 service(s) missed the SLO in the replay")


def test_share_plan_json_says_under_which_model_it_is_optimal() -> None:
    r = runner.invoke(app, ["share", "plan", "--scenario", "3", "--json", "--proxy"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["optimal"] is True and "queueing delay is not modelled" in data["optimal_under"]
    assert data["predicted"]["slo_violations"] == 1
