"""CPU-only jobs (issue 33, part 5): the spec's checks and the placement stage's rules.

:mod:`tessera.sched.core.cpu_stage`: a job with no GPUs is placed after the GPU policy, FIFO, on
one node whose free CPUs and memory hold it, preferring nodes outside NVLink domains, then
domains already broken, then the domain with the fewest free GPUs; no GPU policy ever sees it.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.model.resources import HostDemand, ResourceSensitivity, SensitivityPoint
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import list_policies, make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.feasibility import infeasibility
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.reasons import PendingKind
from tessera.sched.core.snapshot import Placement
from tests.builders import make_job, snapshot, view

V100 = resolve_flavor("v100")


def cpu_job(job_id: str = "cpu", cpus: float = 16.0, mem_gib: float = 64.0,
            submit_s: float = 0.0, **kw: object):  # type: ignore[no-untyped-def]
    kw.setdefault("cpu_steps_per_s", 1.0)
    return make_job(job_id, gpus=0, steps=3600.0, submit_s=submit_s,
                    host=HostDemand(cpus, mem_gib, per_gpu=False), **kw)


def cluster_of(*domains: str | None) -> ClusterSpec:
    """One 8-GPU V100 node (64 CPUs, 512 GiB) per entry, in that NVLink domain."""
    nodes = make_nodes(V100, len(domains), 8)
    return ClusterSpec("t", tuple(replace(n, nvlink_domain=d) for n, d in zip(nodes, domains,
                                                                              strict=True)))


def run(cluster: ClusterSpec, *views, policy: str = "fifo"):  # type: ignore[no-untyped-def]
    oracle = ThroughputOracle(default_throughputs(), cluster)
    return decide(snapshot(cluster, *views), make_policy(policy),
                  DecisionContext(oracle, random.Random(0)))


# -- the spec ----------------------------------------------------------------------------------

def test_a_zero_gpu_job_must_ask_for_cpus() -> None:
    with pytest.raises(SpecError, match="0 for a CPU-only job that asks for CPUs"):
        make_job("a", gpus=0, cpu_steps_per_s=1.0)
    with pytest.raises(SpecError, match="asks for CPUs"):
        make_job("a", gpus=0, host=HostDemand(0.0, 8.0), cpu_steps_per_s=1.0)
    with pytest.raises(SpecError, match="num_gpus must be >= 1"):
        make_job("a", gpus=-1)


def test_a_cpu_only_job_needs_its_own_speed_and_no_gpu_fields() -> None:
    with pytest.raises(SpecError, match="needs cpu_steps_per_s"):
        make_job("a", gpus=0, host=HostDemand(4.0, 8.0))
    with pytest.raises(SpecError, match="needs cpu_steps_per_s"):
        cpu_job(cpu_steps_per_s=float("nan"))
    with pytest.raises(SpecError, match="is for CPU-only jobs"):
        make_job("a", gpus=2, cpu_steps_per_s=1.0)
    with pytest.raises(SpecError, match="cannot set flavors"):
        cpu_job(flavors=(V100,))
    prof = ResourceSensitivity((SensitivityPoint(3.0, 8.0, 1.0),), 3.0, 8.0)
    with pytest.raises(SpecError, match="cannot set sensitivity"):
        cpu_job(sensitivity=prof)


def test_a_cpu_only_demand_is_the_jobs_total() -> None:
    """With no GPUs there is nothing to be "per": a per-GPU demand is read as the job's."""
    j = make_job("a", gpus=0, host=HostDemand(6.0, 12.0), cpu_steps_per_s=2.0)
    assert j.cpu_only and j.host == HostDemand(6.0, 12.0, per_gpu=False)


def test_a_cpu_job_no_server_can_hold_is_refused_with_the_reason() -> None:
    c = cluster_of(None)
    oracle = ThroughputOracle(default_throughputs(), c)
    assert "needs 100 CPUs on one node; the largest server has 64" in str(
        infeasibility(cpu_job(cpus=100.0), c, oracle))
    assert "600 GiB of host memory" in str(infeasibility(cpu_job(mem_gib=600.0), c, oracle))
    assert infeasibility(cpu_job(), c, oracle) is None


# -- the stage ---------------------------------------------------------------------------------

def test_a_node_outside_any_domain_comes_first() -> None:
    d = run(cluster_of("a", "b", None), view(cpu_job()))
    p = d.placements["cpu"]
    assert p.num_gpus == 0 and p.gpus_by_node == (("v100-16gb-0002", 0),)
    assert p.host_by_node == (("v100-16gb-0002", 16.0, 64.0),)
    assert d.started == ("cpu",)


def test_a_broken_domain_before_an_intact_one() -> None:
    """Domain b has a running 1-GPU job: the CPU job joins it and leaves domain a whole,
    although a comes first in the host list."""
    c = cluster_of("a", "a", "b", "b")
    small = make_job("small", gpus=1)
    on_b = Placement.of(V100, (("v100-16gb-0003", 1),))
    d = run(c, view(small, JobState.RUNNING, on_b), view(cpu_job()))
    (node, _c, _m), = d.placements["cpu"].host_by_node
    assert node in ("v100-16gb-0002", "v100-16gb-0003")


def test_cpu_jobs_pack_into_the_domain_one_of_them_broke() -> None:
    """Three CPU-only jobs of 40 of a node's 64 CPUs, all domains intact: the first breaks
    domain a, the second follows it there (a domain holding a CPU job is broken), only the
    third, which a's nodes can no longer hold, breaks a second domain; c stays whole. (Hosts
    listed across domains: first fit in host order would break a and b at once.)"""
    c = cluster_of("a", "b", "a", "b", "c", "c")
    d = run(c, *(view(cpu_job(f"cpu{i}", cpus=40.0)) for i in range(3)))
    dom = {n.node_id: n.nvlink_domain for n in c.nodes}
    used = [dom[d.placements[f"cpu{i}"].host_by_node[0][0]] for i in range(3)]
    assert used[:2] == ["a", "a"] and used[2] == "b"


def test_the_domain_with_fewest_free_gpus_among_broken_ones() -> None:
    c = cluster_of("a", "a", "b", "b")
    run_a = Placement.of(V100, (("v100-16gb-0000", 2),))   # a: 14 free
    run_b = Placement.of(V100, (("v100-16gb-0002", 6),))   # b: 10 free
    d = run(c, view(make_job("ja", gpus=2), JobState.RUNNING, run_a),
            view(make_job("jb", gpus=6), JobState.RUNNING, run_b), view(cpu_job(cpus=8.0)))
    assert d.placements["cpu"].host_by_node[0][0] in ("v100-16gb-0002", "v100-16gb-0003")


def test_fifo_and_a_waiting_cpu_job_is_explained_by_cpus_or_memory() -> None:
    c = cluster_of(None)
    d = run(c, view(cpu_job("first", cpus=40.0)), view(cpu_job("second", cpus=40.0,
                                                                 submit_s=1.0)))
    assert "first" in d.placements and "second" not in d.placements
    why = d.pending["second"]
    assert why.kind is PendingKind.CAPACITY
    assert str(why) == ("CPU-only job needs 40 CPUs on one node; the most free on any node is "
                        "24 CPUs")
    d = run(c, view(cpu_job("first", mem_gib=400.0)), view(cpu_job("second", mem_gib=400.0,
                                                                     submit_s=1.0)))
    assert "host memory" in str(d.pending["second"])


def test_a_gang_is_not_fed_from_a_running_cpu_jobs_cpus() -> None:
    """A running CPU-only job holds 40 of node 0's 64 CPUs: an 8-GPU gang (proportional: all
    64 CPUs) goes to node 1, and the CPU job keeps its node."""
    c = cluster_of(None, None)
    running = Placement((V100,), (("v100-16gb-0000", 0),),
                        host_by_node=(("v100-16gb-0000", 40.0, 64.0),))
    d = run(c, view(cpu_job(cpus=40.0), JobState.RUNNING, running), view(make_job("g", gpus=8)))
    assert d.placements["g"].gpus_by_node == (("v100-16gb-0001", 8),)
    assert d.placements["cpu"] is running and d.preempted == ()


@pytest.mark.parametrize("policy", [n for n, _doc in list_policies()])
def test_no_gpu_policy_sees_a_cpu_only_job(policy: str) -> None:
    """Every policy decides a round with CPU-only jobs waiting and running (none divides by
    their zero GPUs: they never reach it), and the stage places the waiting one."""
    c = cluster_of(None, None)
    running = Placement((V100,), (("v100-16gb-0000", 0),),
                        host_by_node=(("v100-16gb-0000", 8.0, 8.0),))
    d = run(c, view(cpu_job("old", cpus=8.0, mem_gib=8.0), JobState.RUNNING, running),
            view(cpu_job("new", submit_s=1.0)), view(make_job("g", gpus=2, submit_s=2.0)),
            policy=policy)
    assert "new" in d.placements and d.placements["old"] is running
