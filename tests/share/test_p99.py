"""Plans that meet p99, not a proxy (issue 36, part 1), and its bad-input list."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.cli.share_p99 import print_p99
from tessera.errors import SpecError
from tessera.share.mig import mig_gpu
from tessera.share.p99 import ArrivalModel, InfeasibleError, meets, plan_for_p99
from tessera.share.parvagpu_deploy import compare_scenario, load_parvagpu_deployment
from tessera.share.profiles import (
    PARVAGPU_RULE,
    BatchingRule,
    Service,
    load_parvagpu_profiles,
    parvagpu_scenario,
)
from tessera.share.segments import SloUnreachableError

runner = CliRunner()
A100 = mig_gpu("A100-80GB")


def test_scenario_3_plan_meets_p99_where_the_proxy_plan_missed() -> None:
    """Finding: `share plan --scenario 3` printed a plan whose resnet101 missed p99."""
    table = load_parvagpu_profiles()
    res = plan_for_p99(parvagpu_scenario(3), table, A100, PARVAGPU_RULE)
    assert res.meets, res.failing()
    assert res.rounds >= 2  # round 1 (the proxy plan) failed, the loop fixed it
    assert res.plan.gpus_used == 5
    rn = next(o for o in res.sim.services if o.service == "resnet101")
    assert rn.p99_ms <= rn.slo_ms and rn.requests == 50_000
    assert res.knobs["resnet101"].max_utilization < 1.0


def test_share_plan_default_meets_p99_and_says_under_which_model() -> None:
    r = runner.invoke(app, ["share", "plan", "--scenario", "3"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("every service meets its SLO at p99")
    assert "VIOLATED" not in r.stdout
    assert "checked by the serving simulation (poisson arrivals, 50,000 requests" in lines[2]


def test_share_plan_warns_before_the_plan_when_p99_is_missed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With one round (no tightening) the scenario-3 plan misses: the warning comes first."""
    r = runner.invoke(app, ["share", "plan", "--scenario", "3", "--json"])
    data = json.loads(r.stdout)
    assert data["p99_check"]["meets"] is True and data["p99_check"]["slo_violations"] == 0
    table = load_parvagpu_profiles()
    res = plan_for_p99(parvagpu_scenario(3), table, A100, PARVAGPU_RULE, max_rounds=1)
    assert not res.meets
    print_p99(res, A100)
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("WARNING: 1 service(s) missed the SLO in the replay")
    assert "resnet101" in text.splitlines()[0]


def test_parvagpu_deployments_side_by_side_scenario_5() -> None:
    """ParvaGPU's own scenario-5 deployment misses p99 in the same simulation; ours does not,
    at the same GPU count."""
    table = load_parvagpu_profiles()
    model = ArrivalModel(requests_per_service=20_000)
    ours, theirs = compare_scenario(5, table, A100, arrivals=model)
    assert theirs.gpus == 13 and "densenet121" in theirs.violated
    assert ours.violated == () and ours.gpus <= theirs.gpus


def test_parvagpu_deployment_reads_every_scenario_as_legal_layouts() -> None:
    table = load_parvagpu_profiles()
    counts = [load_parvagpu_deployment(k, parvagpu_scenario(k), table, A100).gpus_used
              for k in range(1, 7)]
    assert counts == [2, 3, 5, 7, 13, 16]


def test_bad_input_slo_below_best_batch1_latency() -> None:
    svc = (Service("fast", "resnet152", 100.0, 1.0),)
    with pytest.raises(SloUnreachableError, match="the SLO must be at least"):
        plan_for_p99(svc, load_parvagpu_profiles(), A100, BatchingRule())


def test_bad_input_rate_no_layout_can_serve() -> None:
    svc = (Service("huge", "resnet50", 1_000_000.0, 200.0),)
    with pytest.raises(InfeasibleError, match=r"^infeasible: needs \d+ GPUs at least"):
        plan_for_p99(svc, load_parvagpu_profiles(), A100, BatchingRule(), max_gpus=8)
    r = runner.invoke(app, ["share", "plan", "--scenario", "6", "--max-gpus", "4"])
    assert isinstance(r.exception, InfeasibleError)
    assert str(r.exception).startswith("infeasible: needs 15 GPUs at least")


def test_bad_input_model_without_profiles() -> None:
    svc = (Service("chat", "llama-70b", 10.0, 500.0),)
    with pytest.raises(SpecError, match="no profile for model 'llama-70b'"):
        plan_for_p99(svc, load_parvagpu_profiles(), A100, BatchingRule())


def test_bad_input_too_few_requests_for_a_p99() -> None:
    with pytest.raises(SpecError, match="must be >= 100"):
        ArrivalModel(requests_per_service=10)


def test_meets_needs_both_p99_and_target() -> None:
    res = plan_for_p99(parvagpu_scenario(1), load_parvagpu_profiles(), A100, PARVAGPU_RULE,
                       arrivals=ArrivalModel(requests_per_service=5_000))
    assert all(meets(o, 0.99) for o in res.sim.services)
