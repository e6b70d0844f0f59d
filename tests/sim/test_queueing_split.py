"""Queueing delay split by reason (quota, capacity, fragmentation), on hand-built cases."""

from __future__ import annotations

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.report.tables import comparison_table, wait_split_table
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import QueueQuotaConfig, QuotaConfig, SimConfig
from tessera.sim.engine import simulate
from tests.builders import RESNET, make_cluster, make_job, make_workload

T = default_throughputs()
V100 = T.throughput(RESNET, resolve_flavor("v100"))
NO_COST = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events"))


def _rec(result: object) -> dict[str, object]:
    return {j.job_id: j for j in result.jobs}  # type: ignore[attr-defined]


def test_quota_holds_a_job_while_gpus_are_free() -> None:
    c = make_cluster().node("v100", gpus=2).build()
    w = make_workload(make_job("a", steps=V100 * 100, queue="vision"),
                      make_job("b", steps=V100 * 100, submit_s=10, queue="vision"))
    quotas = QuotaConfig(queues={"vision": QueueQuotaConfig(nominal_gpus=1,
                                                            borrowing_limit_gpus=0)})
    r = simulate(w, c, "fifo", NO_COST.model_copy(update={"quotas": quotas}))
    b = _rec(r)["b"]
    assert b.queue_delay_s == pytest.approx(90.0)  # type: ignore[attr-defined]
    assert b.wait_quota_s == pytest.approx(90.0)  # type: ignore[attr-defined]
    assert b.wait_capacity_s == 0 and b.wait_fragmentation_s == 0  # type: ignore[attr-defined]
    assert r.summary.wait_quota_h == pytest.approx(90.0 / 3600)


def test_borrowing_lets_the_job_run_at_once() -> None:
    c = make_cluster().node("v100", gpus=2).build()
    w = make_workload(make_job("a", steps=V100 * 100, queue="vision"),
                      make_job("b", steps=V100 * 100, submit_s=10, queue="vision"))
    quotas = QuotaConfig(queues={"vision": QueueQuotaConfig(nominal_gpus=1,
                                                            borrowing_limit_gpus=1)})
    r = simulate(w, c, "fifo", NO_COST.model_copy(update={"quotas": quotas}))
    assert _rec(r)["b"].queue_delay_s == pytest.approx(0.0)  # type: ignore[attr-defined]
    assert r.summary.wait_quota_h == 0


def test_quota_off_changes_nothing() -> None:
    c = make_cluster().node("v100", gpus=2).build()
    w = make_workload(make_job("a", steps=V100 * 100, queue="vision"),
                      make_job("b", steps=V100 * 100, submit_s=10, queue="vision"))
    r = simulate(w, c, "fifo", NO_COST)
    assert _rec(r)["b"].queue_delay_s == pytest.approx(0.0)  # type: ignore[attr-defined]


def _fragmenting_workload(locality: bool) -> tuple[object, object]:
    # Two 2-GPU nodes. a and b pack onto one node (best fit), c takes the other; when b ends
    # at t=100 two GPUs are free, one on each node: d (2 GPUs, submitted at 50) is first short
    # of capacity (50 s), then blocked by fragmentation until a and c end at 1000.
    c = make_cluster().node("v100", gpus=2, count=2).build()
    w = make_workload(
        make_job("a", steps=V100 * 1000),
        make_job("b", steps=V100 * 100),
        make_job("c", steps=V100 * 1000),
        make_job("d", gpus=2, steps=1000.0, submit_s=50, requires_locality=locality),
    )
    return c, w


def test_locality_gang_waits_for_fragmentation_while_gpus_are_free() -> None:
    c, w = _fragmenting_workload(locality=True)
    r = simulate(w, c, "fifo", NO_COST)  # type: ignore[arg-type]
    d = _rec(r)["d"]
    assert d.first_start_s == pytest.approx(1000.0)  # type: ignore[attr-defined]
    assert d.wait_capacity_s == pytest.approx(50.0)  # type: ignore[attr-defined]
    assert d.wait_fragmentation_s == pytest.approx(900.0)  # type: ignore[attr-defined]
    assert d.wait_quota_s == 0  # type: ignore[attr-defined]
    s = r.summary
    assert s.wait_fragmentation_h == pytest.approx(900 / 3600)
    assert s.wait_capacity_h == pytest.approx(50 / 3600)


@pytest.mark.parametrize(("wait_s", "start_s", "frag_s"), [
    pytest.param(0.0, 100.0, 0.0, id="split-at-once"),
    pytest.param(300.0, 350.0, 250.0, id="split-after-locality-wait"),
    pytest.param(float("inf"), 1000.0, 900.0, id="never-split"),
])
def test_locality_wait_threshold(wait_s: float, start_s: float, frag_s: float) -> None:
    c, w = _fragmenting_workload(locality=False)
    cfg = NO_COST.model_copy(update={"scheduler": NO_COST.scheduler.model_copy(
        update={"locality_wait_s": wait_s})})
    r = simulate(w, c, "fifo", cfg)  # type: ignore[arg-type]
    d = _rec(r)["d"]
    assert d.first_start_s == pytest.approx(start_s)  # type: ignore[attr-defined]
    assert d.wait_fragmentation_s == pytest.approx(frag_s)  # type: ignore[attr-defined]
    assert d.wait_capacity_s == pytest.approx(50.0)  # type: ignore[attr-defined]
    if start_s < 1000:
        assert r.extras["split_gpu_h"] > 0
        assert r.extras["split_slowdown_gpu_h"] >= 0


def test_capacity_wait_is_the_whole_queueing_delay() -> None:
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("a", steps=V100 * 100), make_job("b", steps=V100 * 50, submit_s=20))
    r = simulate(w, c, "fifo", NO_COST)
    b = _rec(r)["b"]
    assert b.wait_capacity_s == pytest.approx(b.queue_delay_s)  # type: ignore[attr-defined]
    assert b.wait_capacity_s == pytest.approx(80.0)  # type: ignore[attr-defined]


def test_waits_add_up_to_queueing_delay_without_preemption() -> None:
    c, w = _fragmenting_workload(locality=True)
    r = simulate(w, c, "fifo", NO_COST)  # type: ignore[arg-type]
    for j in r.jobs:
        total = j.wait_quota_s + j.wait_capacity_s + j.wait_fragmentation_s
        assert total == pytest.approx(j.queue_delay_s)


def test_split_quotas_cover_every_queue_and_its_largest_gang() -> None:
    w = make_workload(make_job("a", gpus=8, queue="big"), make_job("b", queue="big"),
                      make_job("c", queue="small"), make_job("d", gpus=2, queue="tiny"))
    eq = QuotaConfig(split="equal").resolve(w, 12)  # type: ignore[arg-type]
    assert {q: (v.nominal_gpus, v.borrowing_limit_gpus) for q, v in eq.items()} == {
        "big": (8, 0), "small": (4, 0), "tiny": (4, 0)}
    dem = QuotaConfig(split="demand", borrowing_limit_gpus=None).resolve(w, 100)  # type: ignore[arg-type]
    assert dem["big"].nominal_gpus > dem["small"].nominal_gpus
    assert dem["tiny"].nominal_gpus >= 2 and dem["big"].borrowing_limit_gpus is None


def test_split_quota_makes_fair_share_delay_on_a_shared_cluster() -> None:
    c = make_cluster().node("v100", gpus=4).build()
    jobs = [make_job(f"v{i}", steps=V100 * 100, queue="vision") for i in range(4)]
    jobs.append(make_job("n0", steps=V100 * 100, submit_s=1, queue="nlp"))
    cfg = NO_COST.model_copy(update={"quotas": QuotaConfig(split="equal")})
    r = simulate(make_workload(*jobs), c, "fifo", cfg)
    rec = _rec(r)
    # vision may use 2 of 4 GPUs: two of its jobs wait for quota; nlp starts at once.
    assert rec["n0"].queue_delay_s == pytest.approx(0.0)  # type: ignore[attr-defined]
    assert r.summary.wait_quota_h == pytest.approx(200 / 3600)


def test_tables_show_the_split() -> None:
    c, w = _fragmenting_workload(locality=True)
    r = simulate(w, c, "fifo", NO_COST)  # type: ignore[arg-type]
    d = r.as_dict()
    for k in ("wait_quota_h", "wait_capacity_h", "wait_fragmentation_h",
              "wait_fragmentation_s_mean"):
        assert k in d
    assert comparison_table([r]).row_count == 1
    assert wait_split_table([r]).row_count == 1
