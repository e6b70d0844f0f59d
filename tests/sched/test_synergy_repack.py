"""Issue 33, part 3: Synergy's round as a twin setting (``resources=...:repack=round``).

Every decision deals every running gang and every waiting job again from an empty cluster,
oldest first, GPUs included (:mod:`tessera.sched.resources.repack`). The exact cases below
differ from the sticky default (running gangs keep their GPUs) on two servers.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

import tessera.sched.core.decide as decide_mod
from tessera.errors import SpecError
from tessera.model.cluster import load_cluster
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.host_profiles import synergy_profile
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tessera.workload.synergy import CARRIER_TYPE, generate_synergy_like

CLUSTER = load_cluster("synergy-128")
TWO = replace(CLUSTER, nodes=CLUSTER.nodes[:2])  # 2 × (8 V100, 24 CPUs, 500 GB)
N0, N1 = (n.node_id for n in TWO.nodes)
#: 2 servers of 2 GPUs and 12 CPUs each: few enough GPUs that none is free to move to.
SMALL = replace(CLUSTER, nodes=tuple(replace(n, gpus=2, cpu_cores=12, mem_gib=125.0)
                                     for n in CLUSTER.nodes[:2]))


def _job(jid: str, model: str, submit_s: float) -> JobSpec:
    return JobSpec(JobId(jid), CARRIER_TYPE, 1, total_steps=1e6, submit_time_s=submit_s,
                   model=model, sensitivity=synergy_profile(model, 1).sensitivity)


def _on(node: str, cpus: float, mem: float = 62.5) -> Placement:
    return replace(Placement.of(CLUSTER.nodes[0].flavor, ((node, 1),)),
                   host_by_node=((node, cpus, mem),))


def _decide(cluster: object, running: list[tuple[JobSpec, Placement]], waiting: list[JobSpec],
            spec: str) -> Decision:
    views = tuple([JobView(s, JobState.RUNNING, 1.0, p) for s, p in running]
                  + [JobView(s, JobState.PENDING, 1.0) for s in waiting])
    snap = Snapshot(10.0, cluster, views)  # type: ignore[arg-type]
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), snap.cluster),
                          random.Random(0))
    return decide(snap, make_policy(spec), ctx)


def _cpus(d: Decision, jid: str) -> float:
    return sum(c for _n, c, _m in d.placements[JobId(jid)].host_by_node)


def test_greedy_twin_gives_an_older_waiting_job_its_demand_sticky_gangs_deny() -> None:
    """An AlexNet (12 CPUs) skipped earlier waits while younger gangs hold 21 and 13 of the
    two servers' 24 CPUs: no server has 12 free, so sticky GREEDY keeps it waiting. Synergy's
    round deals everyone again oldest first: the AlexNet gets its 12 CPUs on the first server,
    a ResNet-18 moves (free) to the second, and every gang still gets its demand."""
    hungry = _job("a", "alexnet", 0.0)
    running = [(_job("r1", "res18", 1.0), _on(N0, 9)), (_job("r2", "res18", 2.0), _on(N0, 9)),
               (_job("r3", "res18", 3.0), _on(N1, 9))]
    running += [(_job(f"g{k}", "gnmt", 4.0 + k), _on(N0 if k < 3 else N1, 1, 20.0))
                for k in range(7)]
    sticky = _decide(TWO, running, [hungry], "fifo:resources=greedy")
    assert JobId("a") not in sticky.placements
    assert "needs 12 CPUs" in str(sticky.pending[JobId("a")])
    twin = _decide(TWO, running, [hungry], "fifo:resources=greedy:repack=round")
    assert twin.placements[JobId("a")].host_by_node == ((N0, 12.0, 62.5),)
    assert twin.placements[JobId("r2")].gpus_by_node == ((N1, 1),)
    assert JobId("r2") in twin.started and JobId("a") in twin.started
    assert JobId("r1") not in twin.started  # same GPUs, same CPUs: it keeps running
    assert twin.preempted == () and not twin.pending
    assert all(_cpus(twin, f"r{k}") == 9.0 for k in (1, 2, 3))
    _not_overcommitted(twin, TWO)


def test_tune_twin_serves_the_older_gang_s_demand_where_sticky_gpus_cannot() -> None:
    """Two servers of 2 GPUs and 12 CPUs, every GPU busy. Sticky TUNE deals CPUs oldest
    first but keeps GPUs: the ResNet-18 beside an AlexNet (12 CPUs) has no free GPU to move to
    and no partner that loses nothing at its share (the younger ResNet-18), so it gets its
    share (6) and the younger one its demand (9). Synergy's round re-packs the GPUs: the older
    ResNet-18 lands on the second server with its 9 CPUs; the younger is dealt last and gets
    its share beside the AlexNet, reset to its share to make room."""
    running = [(_job("a", "alexnet", 0.0), _on(N0, 12)), (_job("g", "gnmt", 1.0), _on(N1, 1, 20)),
               (_job("r", "res18", 2.0), _on(N0, 0)), (_job("x", "res18", 3.0), _on(N1, 9))]
    sticky = _decide(SMALL, running, [], "fifo:resources=tune")
    assert _cpus(sticky, "r") == 6.0 and _cpus(sticky, "x") == 9.0
    assert sticky.placements[JobId("r")].gpus_by_node == ((N0, 1),)
    twin = _decide(SMALL, running, [], "fifo:resources=tune:repack=round")
    assert twin.placements[JobId("r")].host_by_node[0][:2] == (N1, 9.0)
    assert twin.placements[JobId("x")].gpus_by_node == ((N0, 1),)
    assert _cpus(twin, "x") == 6.0 and _cpus(twin, "a") == 6.0
    assert set(twin.started) == {JobId("r"), JobId("x")}  # they swapped servers, for free
    _not_overcommitted(twin, SMALL)


def test_proportional_twin_changes_no_allocation_of_a_settled_cluster() -> None:
    running = [(_job("r", "res18", 0.0), _on(N0, 3)), (_job("g", "gnmt", 1.0), _on(N0, 3))]
    d = _decide(TWO, running, [], "fifo:resources=proportional:repack=round")
    assert d.started == () and d.preempted == ()
    assert _cpus(d, "r") == 3.0 and _cpus(d, "g") == 3.0


def _not_overcommitted(d: Decision, cluster: object) -> None:
    used: dict[str, list[float]] = {}
    gpus: dict[str, int] = {}
    for p in d.placements.values():
        for n, c, m in p.host_by_node:
            used.setdefault(n, [0.0, 0.0])
            used[n][0] += c
            used[n][1] += m
        for n, g in p.gpus_by_node:
            gpus[n] = gpus.get(n, 0) + g
    for node in cluster.nodes:  # type: ignore[attr-defined]
        c, m = used.get(node.node_id, [0.0, 0.0])
        assert c <= node.cpu_cores + 1e-9 and m <= node.mem_gib + 1e-9
        assert gpus.get(node.node_id, 0) <= node.gpus


@pytest.mark.parametrize("spec,match", [
    ("fifo:repack=round", "repack=round needs resources="),
    ("fifo:resources=opt:repack=round", "repack=round needs resources="),
    ("fifo:resources=tune:repack=always", "repack='always': choose one of none, round"),
])
def test_bad_repack_options_are_clear_errors(spec: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        make_policy(spec)


def test_twin_runs_finish_every_job_in_rounds_free_of_restart_cost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A short Synergy-like stream on 4 servers, Synergy's round model (300 s rounds, free
    moves): every job finishes in every mode, no decision over-commits a node's GPUs, CPUs or
    memory, and TUNE's twin does move gangs."""
    w = generate_synergy_like(120, 40, 3)
    small = replace(CLUSTER, nodes=CLUSTER.nodes[:4])
    real, seen = decide_mod.repack_round, []

    def checking(*args: Any) -> Any:
        out = real(*args)
        _not_overcommitted(out, small)  # type: ignore[arg-type]
        seen.append(len(out.placements))
        return out

    monkeypatch.setattr(decide_mod, "repack_round", checking)
    cfg = SimConfig(scheduler=SchedulerSettings(mode="rounds", round_s=300.0, checkpoint_s=0.0,
                                                restore_s=0.0))
    for mode in ("proportional", "greedy", "tune"):
        r = simulate(w, small, f"fifo:resources={mode}:repack=round", cfg)
        assert r.summary.succeeded == 120, mode
        if mode == "tune":
            assert sum(x.migrations for x in r.jobs) > 0
    assert max(seen) > 8  # the check saw loaded decisions

