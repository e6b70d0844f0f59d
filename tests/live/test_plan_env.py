"""A ``parallelism: 3d`` job: every rank's stage/TP/DP role in its environment, equal to
``tessera plan --json`` for the same devices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.errors import SpecError
from tessera.live.api import create_app
from tessera.live.batches import plan_rank_roles
from tessera.live.service import LiveService
from tessera.live.spec import LiveJob, to_live_job, validate_request
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobSpec, ThreeDParallel
from tessera.plan.ranks import PLAN_ENV_VARS
from tessera.sched.core.plans import ThreeDPlans
from tessera.sched.core.snapshot import Placement
from tests.builders import plan_json
from tests.live.helpers import TEAM_A, auth, make_service, wait_for_job

RECORD = ('env | grep "^TESSERA_\\|^RANK=\\|^LOCAL_RANK=" | sort '
          '> "$TESSERA_CHECKPOINT_DIR/rank-$RANK"')

MODEL, BATCH = "gpt3-1.3b", 16


def _cli_json(devices: str, gpus_per_server: int) -> dict[str, object]:
    return plan_json(MODEL, devices, BATCH, gpus_per_server)


def _expected_env(cli: dict[str, object]) -> dict[str, dict[str, str]]:
    """Per device, the variables the CLI's plan implies."""
    stages = cli["stages"]
    assert isinstance(stages, list)
    out: dict[str, dict[str, str]] = {}
    ranks = cli["ranks"]
    assert isinstance(ranks, list)
    for r in ranks:
        st = stages[r["stage"]] if r["stage"] >= 0 else None
        out[r["device"]] = {
            "TESSERA_PP_STAGE": str(r["stage"]), "TESSERA_PP_STAGES": str(cli["pp_stages"]),
            "TESSERA_LAYERS": f"{r['first_layer']}:{r['end_layer']}",
            "TESSERA_TP_RANK": str(r["tp_rank"]), "TESSERA_TP_SIZE": str(r["tp_size"]),
            "TESSERA_DP_RANK": str(r["dp_rank"]), "TESSERA_DP_SIZE": str(r["dp_size"]),
            "TESSERA_LOCAL_BATCH": str(r["local_batch"]),
            "TESSERA_RECOMPUTE": str(int(st["recompute"])) if st else "0",
            "TESSERA_ZERO": str(st["zero"]) if st else "0",
        }
    return out


def test_each_ranks_environment_matches_tessera_plan_json(tmp_path: Path) -> None:
    cli = _cli_json("A100:4,V100:4", 4)
    ckpt = tmp_path / "ckpt"
    svc = make_service(tmp_path / "state", cluster="a100:4,v100:4", gpus_per_server=4,
                       mixed_gangs=True)
    try:
        with TestClient(create_app(svc)) as api:
            body = {"name": "p3d", "command": RECORD, "checkpoint_dir": str(ckpt), "gpus": 8,
                    "global_batch": BATCH, "model": MODEL, "parallelism": "3d"}
            r = api.post("/api/jobs", json=body, headers=auth(TEAM_A))
            assert r.status_code == 201, r.text
            jid = r.json()["job_id"]
            wait_for_job(svc, jid, "succeeded", timeout_s=120)
            events = [e.detail for e in svc.store.events(jid)]
            rec = svc.store.get(jid)
            assert rec is not None
    finally:
        svc.stop()
    assert any("3-D plan: pipeline" in e for e in events), events
    expected = _expected_env(cli)
    seen = {}
    for f in ckpt.glob("rank-*"):
        env = dict(line.split("=", 1) for line in f.read_text().splitlines())
        seen[f"{env['TESSERA_NODE']}:{env['LOCAL_RANK']}"] = env
    _priced_by_the_launched_plan(svc, rec.job.spec, seen, events)
    assert sorted(seen) == sorted(expected)
    for device, want in expected.items():
        got = {k: seen[device][k] for k in want}
        assert got == want, device
    assert {e["TESSERA_MICRO_BATCHES"] for e in seen.values()} == {str(cli["n_micro"])}


def _priced_by_the_launched_plan(svc: LiveService, spec: JobSpec,
                                 seen: dict[str, dict[str, str]], events: list[str]) -> None:
    """The scheduler priced the gang with the plan the ranks were launched with."""
    assert spec.parallelism == ThreeDParallel(MODEL, BATCH)
    flavor_of = {n.node_id: n.flavor for n in svc.cluster.nodes}
    parts: list[tuple[str, GpuFlavor, int]] = []
    for env in sorted(seen.values(), key=lambda e: int(e["RANK"])):
        node = env["TESSERA_NODE"]
        if parts and parts[-1][0] == node:
            parts[-1] = (node, flavor_of[node], parts[-1][2] + 1)
        else:
            parts.append((node, flavor_of[node], 1))
    placement = Placement.mixed(tuple(parts))
    searched = len(svc.oracle.plans)
    plan = svc.oracle.plans.plan(spec.parallelism, placement.parts())
    assert len(svc.oracle.plans) == searched      # already there: nothing was planned anew
    assert 1.0 / svc.oracle.placement_rate(spec, placement) == plan.plan.step_time_s
    assert any(f"step {plan.plan.step_time_s:.3f} s predicted" in e for e in events), events


def test_a_3d_request_gives_the_core_a_3d_job_and_keeps_it_across_a_restart() -> None:
    job = _job()
    assert job.spec.parallelism == ThreeDParallel(MODEL, BATCH)
    assert LiveJob.from_json(job.to_json()).spec.parallelism == job.spec.parallelism
    assert _job(parallelism="data").spec.parallelism is None


def _job(parallelism: str = "3d", model: str = MODEL) -> LiveJob:
    req = validate_request({"name": "j", "command": "true", "gpus": 8, "global_batch": BATCH,
                            "model": model, "parallelism": parallelism})
    return to_live_job(req, "j1", "team-a", 0.0)


def test_the_plan_variables_are_set_for_every_rank_of_a_placement() -> None:
    job = _job()
    placement = Placement.mixed((("n1", resolve_flavor("A100-80GB"), 4),
                                 ("n2", resolve_flavor("V100-16GB"), 4)))
    roles = plan_rank_roles(job, placement, BATCH, ThreeDPlans())
    assert len(roles.envs) == 8
    for env in roles.envs:
        assert [k for k, _v in env] == sorted(PLAN_ENV_VARS)
    assert "3-D plan" in roles.summary


def test_a_plan_that_cannot_be_made_gives_no_variables_and_says_why() -> None:
    job = _job(model="llama-70b")
    placement = Placement.of(resolve_flavor("T4"), (("n1", 1),))
    roles = plan_rank_roles(job, placement, BATCH, ThreeDPlans())
    assert roles.envs == ()
    assert "no 3-D plan" in roles.summary and "short" in roles.summary


@pytest.mark.parametrize(("body", "needle"), [
    ({"model": "imagenet"}, "no layer-wise description of model 'imagenet'"),
    ({"model": None}, "needs a layer-wise model"),
    ({"global_batch": None}, "needs a fixed gpus count and a fixed global_batch"),
    ({"parallelism": "2d"}, "parallelism"),
    ({"expected_duration_s": 600}, "takes total_steps"),
])
def test_bad_3d_requests_are_refused_with_the_reason(body: dict[str, object],
                                                     needle: str) -> None:
    req = {"name": "j", "command": "true", "gpus": 8, "global_batch": BATCH, "model": MODEL,
           "parallelism": "3d", **body}
    with pytest.raises(SpecError, match=needle):
        validate_request({k: v for k, v in req.items() if v is not None})


def test_parallelism_round_trips_through_the_stored_spec() -> None:
    job = _job()
    assert LiveJob.from_json(job.to_json()).parallelism == "3d"
    old = json.loads(job.to_json())
    del old["parallelism"]
    assert LiveJob.from_json(json.dumps(old)).parallelism == "data"
