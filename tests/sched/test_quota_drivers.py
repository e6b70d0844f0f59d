"""The tenancy reaches the core from both drivers (issue 32): the simulator's
``SimConfig.tenancy`` and the live service's snapshot (``build_snapshot(..., tenancy=)``,
``Tenancy.quota_tree``)."""

from __future__ import annotations

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.quota_round import needs_tenancy_round
from tessera.sched.core.quotas import FlavorQuota, QueueQuota
from tessera.sched.core.tenancy import Tenancy
from tessera.sim.config import SimConfig
from tessera.sim.engine import Simulator
from tests.builders import make_cluster, make_job, make_workload

K80 = resolve_flavor("K80")


def _sim(tenancy: Tenancy | None) -> Simulator:
    c = make_cluster().node("v100", gpus=4).node("k80", gpus=4).build()
    jobs = [make_job(f"j{i}", 2, steps=2e4, submit_s=float(i), queue="a") for i in range(4)]
    return Simulator(make_workload(*jobs), c, make_policy("fifo"), SimConfig(tenancy=tenancy),
                     default_throughputs())


def test_the_simulator_enforces_a_per_flavor_quota() -> None:
    # Queue a may use K80 only: nothing it runs ever lands on the faster, idle V100 node.
    t = Tenancy(queues={"a": QueueQuota.per_flavor("a", {K80: FlavorQuota(4, 0)})})
    sim = _sim(t)
    flavors: set[str] = set()
    inner = sim.world.decide

    def spy(snap, opts=None):  # type: ignore[no-untyped-def]
        assert snap.tenancy is t
        d = inner(snap, opts)
        flavors.update(p.label for p in d.placements.values())
        return d

    sim.world.decide = spy  # type: ignore[method-assign]
    result = sim.run()
    assert flavors == {"K80"}
    assert sum(1 for r in result.jobs if r.finish_s is not None) == 4
    plain: set[str] = set()
    sim = _sim(None)
    inner2 = sim.world.decide
    sim.world.decide = lambda snap, opts=None: (  # type: ignore[method-assign]
        lambda d: (plain.update(p.label for p in d.placements.values()), d)[1])(
            inner2(snap, opts))
    sim.run()
    assert "V100-16GB" in plain  # without the tenancy the V100s are used


def test_the_live_snapshot_carries_the_services_tenancy() -> None:
    from tessera.live.tenancy import Tenancy as LiveTenancy
    from tessera.live.view import build_snapshot

    c = make_cluster().node("v100", gpus=4).build()
    oracle = ThroughputOracle(default_throughputs(), c)
    legacy = LiveTenancy({"a": QueueQuota("a", 2, 1)}, {})
    tree = legacy.quota_tree
    assert dict(tree.queues) == {"a": QueueQuota("a", 2, 1)} and not needs_tenancy_round(tree)
    t = Tenancy(queues={"a": QueueQuota.per_flavor("a", {K80: FlavorQuota(4, 0)})})
    live = LiveTenancy({"a": QueueQuota("a", 4)}, {}, tree=t)
    assert live.quota_tree is t
    snap = build_snapshot(0.0, c, [], [], live.quotas, oracle, None, tenancy=live.quota_tree)
    assert snap.tenancy is t and snap.queue_quotas() is t.queues
