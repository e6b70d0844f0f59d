"""The service splits a job's ``global_batch`` into per-rank ``TESSERA_LOCAL_BATCH``.

End to end (local executor, a two-node mixed gang) and the split's sources one by one:
the planner's cost model, measured per-flavor speeds, relative compute, equal shares.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.errors import SpecError
from tessera.live.api import create_app
from tessera.live.batches import (
    COMPUTE,
    EQUAL,
    MEASURED,
    PLANNER,
    LocalBatches,
    balanced_split,
    plan_local_batches,
)
from tessera.live.spec import JobRequest, LiveJob, to_live_job, validate_request
from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.perf.steptime import CostModel, DeviceCost
from tessera.plan.api import default_cost_model
from tessera.plan.batch_split import integer_split
from tessera.plan.dp import DEFAULT_MAX_MICRO_STEPS
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import TEAM_A, auth, make_service, wait_for_job

RECORD = ('echo "$RANK ${TESSERA_LOCAL_BATCH-unset} $TESSERA_FLAVOR" '
          '> "$TESSERA_CHECKPOINT_DIR/rank-$RANK"')


def _run(tmp_path: Path, job: dict[str, object]) -> tuple[list[tuple[int, str, str]], list[str]]:
    """Run ``job`` on a mixed-gang service over v100:2,t4:2 (two GPUs per server).

    Returns ``(rank, TESSERA_LOCAL_BATCH, flavor)`` per rank, by rank, and the job's events.
    """
    ckpt = tmp_path / "ckpt"
    svc = make_service(tmp_path / "state", cluster="v100:2,t4:2", gpus_per_server=2,
                       mixed_gangs=True)
    try:
        with TestClient(create_app(svc)) as api:
            body = {"name": "lb", "command": RECORD, "checkpoint_dir": str(ckpt), **job}
            r = api.post("/api/jobs", json=body, headers=auth(TEAM_A))
            assert r.status_code == 201, r.text
            jid = r.json()["job_id"]
            wait_for_job(svc, jid, "succeeded", timeout_s=60)
            events = [e.detail for e in svc.store.events(jid)]
    finally:
        svc.stop()
    ranks = []
    for f in ckpt.glob("rank-*"):
        rank, batch, flavor = f.read_text().split()
        ranks.append((int(rank), batch, flavor))
    return sorted(ranks), events


def test_a_mixed_gang_trains_with_the_planners_per_rank_batches(tmp_path: Path) -> None:
    ranks, events = _run(tmp_path, {"gpus": 4, "global_batch": 96, "model": "imagenet"})
    assert [r for r, _b, _f in ranks] == [0, 1, 2, 3]
    batches = [int(b) for _r, b, _f in ranks]
    by_flavor: dict[str, list[int]] = {}
    for _r, b, f in ranks:
        by_flavor.setdefault(f, []).append(int(b))
    assert sorted(by_flavor) == ["T4", "V100-16GB"]
    assert sum(batches) == 96
    assert min(by_flavor["V100-16GB"]) > max(by_flavor["T4"])
    assert len(set(by_flavor["V100-16GB"])) == 1 and len(set(by_flavor["T4"])) == 1
    # The planner's own answer for these four devices, rank by rank.
    cm = default_cost_model()
    costs = [cm.device_cost("imagenet", resolve_flavor(f)) for _r, _b, f in ranks]
    assert tuple(batches) == integer_split(costs, 96, DEFAULT_MAX_MICRO_STEPS)
    shown = "+".join(map(str, batches))
    assert any(f"local batches {shown} ({PLANNER}: imagenet" in e for e in events), events


def test_a_one_flavor_gang_gets_equal_shares(tmp_path: Path) -> None:
    ranks, events = _run(tmp_path, {"gpus": 2, "global_batch": 10, "flavors": ["T4"]})
    assert ranks == [(0, "5", "T4"), (1, "5", "T4")]
    assert any("local batches 5+5 (equal shares: one flavor (T4))" in e for e in events)


def test_a_job_without_global_batch_gets_no_local_batch(tmp_path: Path) -> None:
    ranks, events = _run(tmp_path, {"gpus": 4})
    assert [b for _r, b, _f in ranks] == ["unset"] * 4
    assert not any("local batches" in e for e in events)


def test_a_global_batch_smaller_than_the_gang_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="global_batch 3 is smaller than gpus 4"):
        validate_request({"name": "x", "command": "true", "gpus": 4, "global_batch": 3})
    for bad in (0, -1, 10_000_001, 2.5):
        with pytest.raises(SpecError, match="global_batch"):
            validate_request({"name": "x", "command": "true", "global_batch": bad})
    svc = make_service(tmp_path / "state", cluster="v100:2,t4:2", gpus_per_server=2,
                       mixed_gangs=True)
    try:
        with TestClient(create_app(svc)) as api:
            r = api.post("/api/jobs", json={"name": "x", "command": "true", "gpus": 4,
                                            "global_batch": 3}, headers=auth(TEAM_A))
            assert r.status_code == 422
            assert "every rank needs at least one sample" in r.json()["detail"]
            assert svc.store.jobs() == []
    finally:
        svc.stop()


def test_global_batch_round_trips_through_the_stored_spec() -> None:
    job = to_live_job(JobRequest(name="x", command="true", gpus=2, global_batch=64),
                      "j1", "q", 0.0)
    assert LiveJob.from_json(job.to_json()).global_batch == 64
    old = json.loads(job.to_json())
    del old["global_batch"]  # a job stored before the field existed
    assert LiveJob.from_json(json.dumps(old)).global_batch is None


# -- the sources, without a service ------------------------------------------------------------

CLUSTER = load_cluster("v100:2,t4:2,p100:2,k80:2", 2)
ORACLE = ThroughputOracle(default_throughputs(), CLUSTER, unprofiled_uniform=True)


def _job(global_batch: int, **kw: object) -> LiveJob:
    req = JobRequest(name="x", command="true", gpus=4, global_batch=global_batch, **kw)
    return to_live_job(req, "j1", "q", 0.0)


def _gang(other: str) -> Placement:
    node = {"T4": "t4-0000", "P100": "p100-0000", "K80": "k80-0000"}[other]
    return Placement.mixed((("v100-16gb-0000", resolve_flavor("V100-16GB"), 2),
                            (node, resolve_flavor(other), 2)))


def test_measured_speeds_split_in_proportion_to_the_oracles_rates() -> None:
    job = _job(1000, job_type="ResNet-50 (batch size 64)")
    got = plan_local_batches(job, _gang("P100"), ORACLE)
    assert got is not None and got.source == MEASURED
    rates = [ORACLE.rate(job.spec, resolve_flavor(f), False)
             for f in ("V100-16GB",) * 2 + ("P100",) * 2]
    assert rates[0] > rates[2] > 0
    assert sum(got.batches) == 1000
    for b, r in zip(got.batches, rates, strict=True):
        assert abs(b - 1000 * r / sum(rates)) < 1


def test_without_cost_model_or_measurements_the_split_follows_peak_compute() -> None:
    # imagenet has no K80 profile, and an unprofiled command has no measured speeds.
    got = plan_local_batches(_job(96, model="imagenet"), _gang("K80"), ORACLE)
    assert got is not None and got.source == COMPUTE
    assert "no step-time profile for model 'imagenet' on K80" in got.reason
    assert "job type 'command' has no measured throughputs" in got.reason
    v100, k80 = resolve_flavor("V100-16GB").fp32_tflops, resolve_flavor("K80").fp32_tflops
    assert sum(got.batches) == 96 and got.batches[0] == got.batches[1]
    assert abs(got.batches[0] - 48 * v100 / (v100 + k80)) < 1


def test_a_batch_beyond_the_gangs_memory_falls_back_with_the_reason() -> None:
    got = plan_local_batches(_job(100_000, model="imagenet"), _gang("T4"), ORACLE)
    assert got is not None and got.source == COMPUTE and sum(got.batches) == 100_000
    assert "does not fit" in got.reason


def test_a_failing_speed_source_falls_back_to_equal_shares() -> None:
    class Broken(CostModel):
        def models(self) -> tuple[str, ...]:
            return ("imagenet",)

        def device_cost(self, model: str, flavor: object) -> DeviceCost:
            raise RuntimeError("profile store unreadable")

    got = plan_local_batches(_job(10, model="imagenet"), _gang("T4"), ORACLE, Broken())
    assert got is not None and got.source == EQUAL
    assert got.batches == (3, 3, 2, 2) and "profile store unreadable" in got.reason


def test_no_rank_is_left_idle() -> None:
    v100, t4 = resolve_flavor("V100-16GB"), resolve_flavor("T4")
    # Device 0's fixed cost exceeds the whole step: the planner alone would give it nothing.
    costs = [DeviceCost(v100, 10.0, 0.001, 100), DeviceCost(t4, 0.0, 0.001, 100)]
    assert integer_split(costs, 4, 8) == (0, 4)
    assert balanced_split(costs, 4, 8) == (1, 3)


def test_a_large_gangs_split_is_shown_in_runs() -> None:
    big = LocalBatches((31,) * 2048 + (17,) * 2047 + (16,), PLANNER, "imagenet on …")
    assert big.describe() == ("local batches 31×2048+17×2047+16 (planner cost model: "
                              "imagenet on …)")
    ragged = LocalBatches(tuple(range(1, 2000)), COMPUTE, "x")
    assert len(ragged.describe()) < 450 and "…" in ragged.describe()
