"""No node is ever over-committed in CPUs or host memory (issue 33 parts 1, 2 and 5).

Unit cases pin the rule of :mod:`tessera.sched.core.host_free` (a node with free GPUs but
too few free CPUs or too little memory is refused; a job with a demand carries its amounts);
the property test runs whole simulations, event-driven and round-based, with random host
demands (CPU-only jobs among them) on a small cluster and checks every node at every start
and every tick.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tessera.model.cluster import ClusterSpec
from tessera.model.host_need import EPS, gang_host_by_node
from tessera.model.jobs import JobState
from tessera.model.resources import HostDemand
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.feasibility import infeasibility
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import Placement
from tessera.sim import world as world_mod
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import make_cluster, make_job, make_workload, snapshot, view


def _two_nodes() -> ClusterSpec:
    return make_cluster().node("V100", gpus=4, count=2, rack="r").build()  # 32 CPUs, 256 GiB


def _decide(cluster: ClusterSpec, *views, policy: str = "fifo"):  # type: ignore[no-untyped-def]
    oracle = ThroughputOracle(default_throughputs(), cluster)
    return decide(snapshot(cluster, *views), make_policy(policy),
                  DecisionContext(oracle, random.Random(0)))


def test_a_node_without_the_cpus_is_refused() -> None:
    """v100-16gb-0000 has 2 free GPUs but only 2 of its 32 CPUs left: the 2-GPU job asking 8
    CPUs per GPU goes to v100-16gb-0001."""
    c = _two_nodes()
    hog = make_job("hog", gpus=2, host=HostDemand(15.0, 8.0))  # 30 CPUs on node 0
    on0 = Placement.of(c.nodes[0].flavor, (("v100-16gb-0000", 2),))
    new = make_job("new", gpus=2, host=HostDemand(8.0, 8.0))
    d = _decide(c, view(hog, JobState.RUNNING, on0), view(new))
    p = d.placements["new"]
    assert p.gpus_by_node == (("v100-16gb-0001", 2),)
    assert p.host_by_node == (("v100-16gb-0001", 16.0, 16.0),)


def test_a_job_waits_when_no_node_has_the_memory() -> None:
    c = _two_nodes()
    big = make_job("big", gpus=1, host=HostDemand(1.0, 300.0))  # nodes have 256 GiB
    free = FreeGpus.of_snapshot(snapshot(c, view(big)))
    assert free.find(c.nodes[0].flavor, 1, False, big.host) is None


def test_a_gang_spreads_only_over_the_gpus_the_cpus_can_feed() -> None:
    """Per-job demand split over the GPUs: 4 GPUs, 64 CPUs -> 16 per GPU, so each 32-CPU
    node feeds 2 GPUs and the gang spreads 2 + 2 although one node has 4 free GPUs."""
    c = _two_nodes()
    job = make_job("j", gpus=4, host=HostDemand(64.0, 16.0, per_gpu=False))
    d = _decide(c, view(job))
    p = d.placements["j"]
    assert sorted(p.gpus_by_node) == [("v100-16gb-0000", 2), ("v100-16gb-0001", 2)]
    assert sorted(p.host_by_node) == [("v100-16gb-0000", 32.0, 8.0), ("v100-16gb-0001", 32.0, 8.0)]


def test_without_demands_the_gpu_only_path_is_kept() -> None:
    c = _two_nodes()
    free = FreeGpus.of_snapshot(snapshot(c, view(make_job("a", gpus=2))))
    assert free._host is None


def _overcommitted(w: world_mod.SimWorld) -> list[str]:
    used_c: dict[str, float] = {}
    used_m: dict[str, float] = {}
    nodes = {n.node_id: n for n in w.cluster.nodes}
    for j in w.running.values():
        assert j.placement is not None
        for n, cpus, mem in gang_host_by_node(j.placement.gpus_by_node, j.spec.host, nodes,
                                              j.placement.host_by_node):
            used_c[n] = used_c.get(n, 0.0) + cpus
            used_m[n] = used_m.get(n, 0.0) + mem
    return [n for n in used_c if used_c[n] > nodes[n].cpu_cores + EPS
            or used_m[n] > nodes[n].mem_gib + EPS]


_job = st.tuples(
    st.sampled_from([0, 1, 1, 2, 4, 8]),                       # GPUs (0: CPU-only)
    st.floats(0, 16) | st.none(),                               # CPUs (None: proportional)
    st.floats(0, 80), st.booleans(),                            # GiB, per GPU
    st.floats(0, 4000), st.floats(200, 20000),                  # submit, steps
)


@pytest.mark.parametrize(("policy", "mode"), [("fifo", "events"), ("las", "rounds"),
                                              ("srtf", "events"),
                                              ("fifo:resources=tune", "events"),
                                              ("fifo:resources=greedy", "rounds"),
                                              ("fifo:resources=tune:repack=round", "rounds")])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(_job, min_size=1, max_size=14))
@example(jobs=[(0, 0.0, 0.0, False, 0.0, 18764.7), *[(0, None, 0.0, False, 0.0, 200.0)] * 3,
               (4, None, 0.0, False, 1.0, 200.0), (0, 9.0, 1.0390625, False, 0.0, 366.0),
               (8, None, 76.0, False, 2.0, 897.0)])  # TUNE rounded 510.9609375 GiB up
def test_no_node_is_ever_overcommitted(policy: str, mode: str, jobs: list) -> None:  # type: ignore[type-arg]
    cluster = make_cluster().node("V100", gpus=4, count=2, rack="a").node(
        "V100", gpus=8, count=1, rack="b").build()
    specs = []
    for i, (gpus, cpus, mem, per_gpu, submit, steps) in enumerate(
            sorted(jobs, key=lambda j: j[4])):
        if gpus == 0:  # a CPU-only job: CPUs it must ask for, a speed of its own
            host = HostDemand(min(max(cpus or 0.0, 0.5) * 4, 64.0), mem, per_gpu=False)
            specs.append(make_job(f"j{i}", gpus=0, steps=steps, submit_s=submit, host=host,
                                  cpu_steps_per_s=1.0))
            continue
        host = None if cpus is None else HostDemand(cpus, mem, per_gpu)
        if host is not None:  # keep each job feasible on the largest node
            tc, tm = host.total(gpus)
            if tc > 64 or tm > 512:
                host = HostDemand(min(cpus, 64 / gpus), min(mem, 512 / gpus), True)
        specs.append(make_job(f"j{i}", gpus=gpus, steps=steps, submit_s=submit, host=host))
    checks = [0]
    start, tick = world_mod.SimWorld.start, world_mod.SimWorld.tick

    def checked_start(self: world_mod.SimWorld, job, p, t_s):  # type: ignore[no-untyped-def]
        start(self, job, p, t_s)
        checks[0] += 1
        assert not _overcommitted(self), f"over-committed at {t_s} s after {job.spec.job_id}"

    def checked_tick(self: world_mod.SimWorld, t_s, advance):  # type: ignore[no-untyped-def]
        tick(self, t_s, advance)
        assert not _overcommitted(self), f"over-committed at {t_s} s"

    cfg = SimConfig(scheduler=SchedulerSettings(mode=mode))  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(world_mod.SimWorld, "start", checked_start)
        mp.setattr(world_mod.SimWorld, "tick", checked_tick)
        res = simulate(make_workload(*specs), cluster, policy, cfg)
    assert res.summary.succeeded == len(specs)
    assert checks[0] >= len(specs)


def test_explain_names_the_cpus_a_waiting_job_lacks() -> None:
    """Both nodes have 3 free GPUs but only 8 free CPUs: a 1-GPU job asking 16 CPUs waits,
    and the reason says CPUs, with the numbers."""
    c = _two_nodes()
    fl = c.nodes[0].flavor
    hogs = [view(make_job(f"hog{i}", gpus=1, host=HostDemand(24.0, 8.0)), JobState.RUNNING,
                 Placement.of(fl, ((c.nodes[i].node_id, 1),))) for i in range(2)]
    new = make_job("new", gpus=1, host=HostDemand(16.0, 8.0))
    d = _decide(c, *hogs, view(new))
    assert "new" not in d.placements
    why = str(d.pending["new"])
    assert why.startswith("needs 16 CPUs per node for 1 GPU; the largest free on an allowed "
                          "node is 8 CPUs"), why


def test_explain_names_memory_when_memory_is_short() -> None:
    c = _two_nodes()
    fl = c.nodes[0].flavor
    hogs = [view(make_job(f"hog{i}", gpus=1, host=HostDemand(1.0, 200.0)), JobState.RUNNING,
                 Placement.of(fl, ((c.nodes[i].node_id, 1),))) for i in range(2)]
    d = _decide(c, *hogs, view(make_job("new", gpus=2, host=HostDemand(1.0, 40.0),
                                                   requires_locality=True)))
    assert "needs 80 GiB of host memory per node for 2 GPUs; the largest free on an allowed " \
        "node is 56 GiB" in str(d.pending["new"])


@pytest.mark.parametrize(("host", "local", "words"), [
    (HostDemand(48.0, 8.0), True, "needs 192 CPUs per node for 4 GPUs (48 per GPU); the "
     "largest server of an allowed flavor has 32 CPUs"),
    (HostDemand(40.0, 8.0), False, "(40 per GPU)"),
    (HostDemand(1.0, 600.0, per_gpu=False), True, "needs 600 GiB of host memory per node"),
])
def test_a_job_no_server_can_feed_is_refused_with_the_reason(
        host: HostDemand, local: bool, words: str) -> None:
    c = _two_nodes()
    oracle = ThroughputOracle(default_throughputs(), c)
    job = make_job("j", gpus=4, host=host, requires_locality=local)
    why = infeasibility(job, c, oracle)
    assert why is not None and words in why, why
    d = _decide(c, view(job))  # the round agrees: the job never starts
    assert "j" not in d.placements


def test_a_job_the_servers_can_feed_together_is_accepted() -> None:
    """12 CPUs per GPU: each 32-CPU server feeds 2 of the 4 GPUs; spread, it fits."""
    c = _two_nodes()
    oracle = ThroughputOracle(default_throughputs(), c)
    assert infeasibility(make_job("j", gpus=4, host=HostDemand(12.0, 8.0)), c, oracle) is None
    assert "feed 2 of its 4 GPUs on one node" in (infeasibility(
        make_job("j", gpus=4, host=HostDemand(12.0, 8.0), requires_locality=True), c, oracle)
        or "")


def test_the_domain_choice_must_feed_the_gang_else_the_host_search_places_it() -> None:
    """With NVLink domains and host demands together: the domain rule picks the best-fitting
    server (node 0, 2 GPUs free of 4), but its CPUs are all taken, so the gang goes where the
    CPUs are (node 1) and carries its amounts; with the CPUs free, the domain choice stands."""
    base = _two_nodes()
    c = ClusterSpec("nvl", tuple(replace(n, nvlink_domain=f"d{i}")
                                 for i, n in enumerate(base.nodes)))
    flavor = c.nodes[0].flavor
    on0 = Placement.of(flavor, (("v100-16gb-0000", 2),))
    new = make_job("new", gpus=1, host=HostDemand(8.0, 8.0))
    hog = make_job("hog", gpus=2, host=HostDemand(15.0, 8.0))  # 30 of node 0's 32 CPUs
    p = _decide(c, view(hog, JobState.RUNNING, on0), view(new)).placements["new"]
    assert p.gpus_by_node == (("v100-16gb-0001", 1),)
    assert p.host_by_node == (("v100-16gb-0001", 8.0, 8.0),)
    light = make_job("hog", gpus=2, host=HostDemand(1.0, 8.0))
    p = _decide(c, view(light, JobState.RUNNING, on0), view(new)).placements["new"]
    assert p.gpus_by_node == (("v100-16gb-0000", 1),)
    assert p.host_by_node == (("v100-16gb-0000", 8.0, 8.0),)
