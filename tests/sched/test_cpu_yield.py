"""CPU-only jobs give way to another queue's in-quota GPU job (issue 33, part 1).

:mod:`tessera.sched.core.cpu_yield`: a GPU job within its queue's nominal quota that waits only
because running CPU-only jobs of *other* queues hold a node's CPUs or memory gets them: the
fewest of those jobs on one node, newest first, are preempted and the GPU job is placed in the
same round. Exact small cases: who gives way, and every case where nobody does.
"""

from __future__ import annotations

import random
from dataclasses import replace

from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.model.resources import HostDemand
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.quota_round import QUOTA_PREEMPTION
from tessera.sched.core.quotas import QueueQuota
from tessera.sched.core.snapshot import JobView, Placement
from tests.builders import make_job, snapshot, view

V100 = resolve_flavor("v100")
N0, N1 = "v100-16gb-0000", "v100-16gb-0001"


def cluster(nodes: int = 1) -> ClusterSpec:
    """8-GPU V100 nodes (64 CPUs, 512 GiB each), in no NVLink domain."""
    return ClusterSpec("t", tuple(replace(n, nvlink_domain=None)
                                  for n in make_nodes(V100, nodes, 8)))


def cpu_run(job_id: str, queue: str, node: str, cpus: float, started_s: float) -> JobView:
    """A running CPU-only job of ``queue`` holding ``cpus`` CPUs (8 GiB) on ``node``."""
    spec = make_job(job_id, gpus=0, steps=3600.0, queue=queue, cpu_steps_per_s=1.0,
                    host=HostDemand(cpus, 8.0, per_gpu=False))
    p = Placement((V100,), ((node, 0),), host_by_node=((node, cpus, 8.0),))
    return view(spec, JobState.RUNNING, p, progress_from_s=started_s)


def gpu_run(job_id: str, queue: str, node: str, gpus: int) -> JobView:
    return view(make_job(job_id, gpus=gpus, queue=queue), JobState.RUNNING,
                Placement((V100,), ((node, gpus),)))


def run(c: ClusterSpec, *views: JobView, nominal_b: int = 8,
        a_cpus: float | None = None) -> Decision:
    quotas = {"team-a": QueueQuota("team-a", 8, 8, nominal_cpus=a_cpus),
              "team-b": QueueQuota("team-b", nominal_b, 8)}
    oracle = ThroughputOracle(default_throughputs(), c)
    return decide(snapshot(c, *views, now_s=1000.0, quotas=quotas), make_policy("fifo"),
                  DecisionContext(oracle, random.Random(0)))


def test_the_newest_other_queue_cpu_job_gives_way_and_the_gpu_job_starts() -> None:
    """4 GPUs need 32 of the node's 64 CPUs; team-a's two CPU jobs hold all 64. Stopping the
    newer one (started at 50 s) is enough; the older one keeps its CPUs."""
    old, new = cpu_run("a-old", "team-a", N0, 32.0, 0.0), cpu_run("a-new", "team-a", N0, 32.0, 50.0)
    d = run(cluster(), old, new, view(make_job("g", gpus=4, queue="team-b")))
    assert d.preempted == ("a-new",)
    assert d.placements["g"].gpus_by_node == ((N0, 4),) and "g" in d.started
    assert d.placements["a-old"] is old.placement and "a-new" not in d.placements
    assert d.notes["a-new"].startswith(QUOTA_PREEMPTION)
    assert "GPU job g" in d.notes["a-new"] and "'team-b'" in d.notes["a-new"]
    assert "a-new" not in d.pending  # (it waits again from the next round)


def test_the_node_needing_the_fewest_stops_wins() -> None:
    """6 GPUs need 48 CPUs. Node 0 (team-a's 16, 16 and 32 CPUs) would need all three stopped,
    newest first; node 1 only its newest (48 CPUs, started at 5 s)."""
    d = run(cluster(2),
            cpu_run("a0", "team-a", N0, 16.0, 1.0), cpu_run("a1", "team-a", N0, 16.0, 2.0),
            cpu_run("a2", "team-a", N0, 32.0, 0.0), cpu_run("a3", "team-a", N1, 48.0, 5.0),
            cpu_run("a4", "team-a", N1, 16.0, 0.0),
            view(make_job("g", gpus=6, queue="team-b")))
    assert d.preempted == ("a3",) and dict(d.placements["g"].gpus_by_node) == {N1: 6}


def test_the_fewest_stop_and_among_as_few_the_newest() -> None:
    """4 GPUs need 32 CPUs; team-a holds 40 + 8 + 16. One stop is enough only for the 40-CPU
    job (the oldest): it goes alone rather than the two newer ones."""
    d = run(cluster(), cpu_run("a-big", "team-a", N0, 40.0, 0.0),
            cpu_run("a-small", "team-a", N0, 8.0, 9.0), cpu_run("a-rest", "team-a", N0, 16.0, 1.0),
            view(make_job("g", gpus=4, queue="team-b")))
    assert d.preempted == ("a-big",) and "g" in d.placements
    d = run(cluster(), cpu_run("a-1", "team-a", N0, 32.0, 0.0),
            cpu_run("a-2", "team-a", N0, 32.0, 7.0), view(make_job("g", gpus=4, queue="team-b")))
    assert d.preempted == ("a-2",)  # (either would do: the newer one)


def test_no_preemption_when_the_gpu_jobs_queue_is_over_its_nominal_quota() -> None:
    """team-b already holds 4 GPUs of its nominal 4: 4 more would be borrowing."""
    d = run(cluster(2), gpu_run("b-run", "team-b", N1, 4), cpu_run("a", "team-a", N1, 32.0, 0.0),
            cpu_run("a2", "team-a", N0, 64.0, 0.0),
            view(make_job("g", gpus=4, queue="team-b")), nominal_b=4)
    assert d.preempted == () and "g" not in d.placements and "g" in d.pending
    within = run(cluster(2), gpu_run("b-run", "team-b", N1, 4),
                 cpu_run("a", "team-a", N1, 32.0, 0.0), cpu_run("a2", "team-a", N0, 64.0, 0.0),
                 view(make_job("g", gpus=4, queue="team-b")), nominal_b=8)
    assert within.preempted == ("a2",)  # (the same round with 8 nominal: it may)


def test_no_preemption_for_a_cpu_job_of_the_gpu_jobs_own_queue() -> None:
    d = run(cluster(), cpu_run("b-cpu", "team-b", N0, 64.0, 0.0),
            view(make_job("g", gpus=4, queue="team-b")))
    assert d.preempted == () and "g" in d.pending
    assert d.placements["b-cpu"].host_by_node == ((N0, 64.0, 8.0),)
    assert str(d.pending["g"]) == (  # (part 3: the reason says CPUs, and who holds them)
        "needs 32 CPUs per node for 4 GPUs; the largest free on an allowed node is 0 CPUs "
        "(GPUs are free, CPUs are not); CPU-only jobs hold CPUs: 'team-b' 64")


def test_no_preemption_when_stopping_them_would_not_make_room() -> None:
    """8 GPUs need all 64 CPUs; team-b's own CPU job holds 8 of them, so stopping team-a's
    56-CPU job would not feed the gang: nobody is stopped."""
    d = run(cluster(), cpu_run("a", "team-a", N0, 56.0, 0.0),
            cpu_run("b-cpu", "team-b", N0, 8.0, 0.0), view(make_job("g", gpus=8, queue="team-b")))
    assert d.preempted == () and "g" in d.pending and "a" in d.placements


def test_no_preemption_when_the_gpus_are_not_free() -> None:
    """The GPUs are taken by team-a's gang: CPUs would not help."""
    d = run(cluster(), gpu_run("a-gang", "team-a", N0, 6), cpu_run("a", "team-a", N0, 16.0, 0.0),
            view(make_job("g", gpus=4, queue="team-b")))
    assert d.preempted == () and "g" in d.pending


def test_no_preemption_without_quotas_or_for_a_queue_without_one() -> None:
    c = cluster()
    views = (cpu_run("a", "team-a", N0, 64.0, 0.0), view(make_job("g", gpus=4, queue="team-z")))
    assert run(c, *views).preempted == ()
    oracle = ThroughputOracle(default_throughputs(), c)
    d = decide(snapshot(c, *views, now_s=1000.0), make_policy("fifo"),
               DecisionContext(oracle, random.Random(0)))
    assert d.preempted == () and "g" in d.pending


def test_cpu_jobs_within_their_queues_cpus_quota_never_give_way() -> None:
    """A queue given ``cpus: 64`` has its CPU-only jobs guaranteed (Kueue: a queue within its
    nominal quota is not reclaimed from): team-b's GPU job waits; the same jobs in a queue
    without a host quota give way (the first test)."""
    old, new = cpu_run("a-old", "team-a", N0, 32.0, 0.0), cpu_run("a-new", "team-a", N0, 32.0, 50.0)
    d = run(cluster(), old, new, view(make_job("g", gpus=4, queue="team-b")), a_cpus=64.0)
    assert d.preempted == () and "g" not in d.placements and "g" in d.pending
    assert set(d.placements) == {"a-old", "a-new"}


def test_a_cpu_job_restarted_moments_ago_does_not_give_way_again() -> None:
    """Churn: the newest job is the one a yield stops, so a tenant cycling in-quota GPU jobs
    would restart the same job each time. One whose run has progressed for less than
    YIELD_EXEMPT_S (300 s) keeps its CPUs (the older one, past it, gives way instead; with
    both fresh, the GPU job waits)."""
    fresh_s = 990.0  # its run has progressed for 10 s at the round (now 1,000 s)
    old, new = cpu_run("a-old", "team-a", N0, 32.0, 0.0), cpu_run("a-new", "team-a", N0, 32.0,
                                                                  fresh_s)
    d = run(cluster(), old, new, view(make_job("g", gpus=4, queue="team-b")))
    assert d.preempted == ("a-old",) and "g" in d.started
    both = cpu_run("a-old", "team-a", N0, 32.0, fresh_s + 1.0)
    d = run(cluster(), both, new, view(make_job("g", gpus=4, queue="team-b")))
    assert d.preempted == () and "g" in d.pending
