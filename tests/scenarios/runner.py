"""Runs a scenario case through the decision core and checks Kueue's expected outcome.

Two helpers alone touch the tenancy fields the enforcement engine adds: :func:`snapshot_of`
(``Snapshot.tenancy``) and :func:`sim_config_of` (``SimConfig.tenancy``). Everything else
builds ordinary snapshots, so when those fields change only these two lines move.

A case's running jobs are laid on its nodes first fit, in the order the case lists them; their
JobViews are measured at the case's clock. Every job trains the same model for a very long time,
so nothing finishes during a case: what changes is only what the tenancy decides.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from tessera.model.cluster import ClusterSpec, Node, make_nodes
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import JobView, Placement, Snapshot
from tessera.sched.core.tenancy import Tenancy
from tessera.sim.config import SimConfig
from tests.scenarios.model import Case, NodePool, PendingJob, RunningJob

JOB_TYPE = "ResNet-18 (batch size 64)"
"""The model every case job trains."""

SPEEDUP_VS_V100 = {"A100-80GB": 2.0, "H100-80GB": 3.0, "L4": 0.8}
"""The bundled Gavel table measures K80, P100 and V100 only; the cases speak of the GPUs
platform teams buy. These factors (rough, and irrelevant to any expectation: a case's
outcome is decided by quotas and priorities, never by speed) give them rates from V100's."""


@functools.cache
def scenario_throughputs() -> ThroughputTable:
    """The bundled table plus A100-80GB, H100-80GB and L4 rows scaled from V100's."""
    base = default_throughputs()
    isolated = {k: dict(v) for k, v in base.isolated.items()}
    for consolidated in (True, False):
        v100 = base.isolated.get(("V100-16GB", consolidated), {})
        for flavor, factor in SPEEDUP_VS_V100.items():
            isolated[(flavor, consolidated)] = {k: r * factor for k, r in v100.items()}
    return replace(base, source=base.source + " + scenario rows", isolated=isolated)

LONG_STEPS = 1e12
"""Steps of a case job: it never finishes within a case."""


def cluster_of(pools: Iterable[NodePool], name: str = "scenario") -> ClusterSpec:
    """The case's nodes, pool by pool (ids like ``a100-80gb-0000``)."""
    nodes: list[Node] = []
    for p in pools:
        nodes += make_nodes(p.flavor, p.nodes, p.gpus_per_node)
    return ClusterSpec(name, tuple(nodes))


def _spec(job: RunningJob | PendingJob, submit_s: float,
          flavors: tuple[GpuFlavor, ...] = ()) -> JobSpec:
    return JobSpec(JobId(job.name), JOB_TYPE, job.gpus, LONG_STEPS, submit_s, flavors=flavors,
                   queue=job.queue, priority=job.priority)


def _lay_out(cluster: ClusterSpec, running: Sequence[RunningJob]) -> dict[str, Placement]:
    """First-fit GPUs for the running jobs, on nodes of their flavor."""
    free = {n.node_id: n.gpus for n in cluster.nodes}
    out: dict[str, Placement] = {}
    for j in running:
        need, parts = j.gpus, []
        for n in cluster.nodes:
            if n.flavor != j.flavor or need == 0 or free[n.node_id] == 0:
                continue
            take = min(need, free[n.node_id])
            free[n.node_id] -= take
            need -= take
            parts.append((n.node_id, take))
        if need:
            raise ValueError(f"running job {j.name!r}: no room for {j.gpus} GPUs of "
                             f"{j.flavor.short} on the case's nodes")
        parts.sort(key=lambda p: -p[1])
        out[j.name] = Placement.of(j.flavor, tuple(parts))
    return out


def running_view(spec: JobSpec, placement: Placement, start_s: float, now_s: float) -> JobView:
    """A running job as the core sees it: started at ``start_s``, measured at ``now_s``."""
    run_s = max(now_s - start_s, 0.0)
    return JobView(spec, JobState.RUNNING, LONG_STEPS, placement,
                   attained_gpu_s=placement.num_gpus * run_s,
                   run_s_by_flavor=tuple((f, run_s) for f, _ in placement.flavor_counts()),
                   pending_since_s=spec.submit_time_s, as_of_s=now_s, progress_rate=1.0,
                   progress_from_s=start_s)


def snapshot_of(case: Case, *, now_s: float | None = None,
                jobs: Sequence[JobView] | None = None) -> Snapshot:
    """The case's snapshot: its cluster, its jobs (or ``jobs``) and its tenancy.

    The one place that sets ``Snapshot.tenancy``.
    """
    cluster = cluster_of(case.cluster, case.name)
    t = case.now_s if now_s is None else now_s
    if jobs is None:
        placed = _lay_out(cluster, case.running)
        views = [running_view(_spec(j, j.submit_s), placed[j.name], j.start_s, t)
                 for j in case.running]
        views += [JobView(_spec(j, j.submit_s, j.flavors), JobState.PENDING, LONG_STEPS,
                          pending_since_s=j.submit_s, as_of_s=t) for j in case.pending]
        jobs = views
    return Snapshot(t, cluster, tuple(jobs), tenancy=case.tenancy)


def sim_config_of(tenancy: Tenancy, **settings: object) -> SimConfig:
    """A simulator configuration that enforces ``tenancy`` (``settings`` go to
    :class:`~tessera.sched.core.settings.SchedulerSettings`).

    The one place that sets ``SimConfig.tenancy``.
    """
    return SimConfig(scheduler=SchedulerSettings(**settings),
                     tenancy=tenancy)


def decide_once(snapshot: Snapshot) -> Decision:
    """One FIFO decision over ``snapshot`` (priority and quotas come from the tenancy)."""
    oracle = ThroughputOracle(scenario_throughputs(), snapshot.cluster)
    return decide(snapshot, make_policy("fifo"), DecisionContext(oracle, random.Random(0)))


def apply(snapshot: Snapshot, decision: Decision, now_s: float) -> tuple[JobView, ...]:
    """The jobs after ``decision``, measured at ``now_s``: started jobs run where they were
    placed, preempted jobs wait again, everyone else stays as they were."""
    out: list[JobView] = []
    for j in snapshot.jobs:
        jid = j.job_id
        if jid in decision.preempted:
            out.append(JobView(j.spec, JobState.PENDING, j.remaining_steps,
                               attained_gpu_s=j.attained_at(snapshot.now_s),
                               pending_since_s=snapshot.now_s, last_run_end_s=snapshot.now_s,
                               as_of_s=now_s))
        elif jid in decision.started:
            out.append(running_view(j.spec, decision.placements[jid], snapshot.now_s, now_s))
        elif j.running and j.placement is not None:
            start = j.progress_from_s
            out.append(running_view(j.spec, j.placement, start, now_s))
        else:
            out.append(j)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a decision did, in the case's words."""

    admitted: dict[str, GpuFlavor | None]
    preempted: tuple[str, ...]
    moved: tuple[str, ...]
    pending_kind: dict[str, str]

    @classmethod
    def of(cls, snapshot: Snapshot, d: Decision) -> Outcome:
        waiting = {j.job_id for j in snapshot.jobs if not j.running}
        admitted = {str(j): d.placements[j].sole_flavor for j in d.started if j in waiting}
        moved = tuple(sorted(str(j) for j in d.started if j not in waiting))
        kinds = {str(j): r.kind.name.lower() for j, r in d.pending.items()}
        return cls(admitted, tuple(str(j) for j in d.preempted), moved, kinds)


def _describe(o: Outcome) -> str:
    adm = ", ".join(f"{j}->{f.short if f else '?'}" for j, f in sorted(o.admitted.items()))
    return f"admitted [{adm}] preempted {list(o.preempted)} moved {list(o.moved)}"


def check_case(case: Case) -> None:
    """Decide the case and assert its expectations (see :class:`~tests.scenarios.model.Expect`)."""
    snap = snapshot_of(case)
    decision = decide_once(snap)
    got = Outcome.of(snap, decision)
    e = case.expect
    context = f"{case.name} ({case.source}): got {_describe(got)}"
    assert set(got.admitted) == set(e.admitted), context
    for job, flavor in e.admitted.items():
        if flavor is not None:
            assert got.admitted[job] == flavor, context
    assert frozenset(got.preempted) == e.preempted, context
    assert len(set(got.preempted)) == len(got.preempted), f"a job preempted twice: {context}"
    if e.preempted_order is not None:
        assert got.preempted == e.preempted_order, context
    assert not got.moved, f"running jobs moved: {context}"
    for job, kind in e.pending_kind.items():
        assert got.pending_kind.get(job) == kind, f"{job}: {context}"
    if e.deterministic:
        _check_deterministic(case, snap, got)
    _check_stable(case, snap, decision)


def _check_deterministic(case: Case, snap: Snapshot, first: Outcome) -> None:
    """Same state, other job orders: the same decision (no victim chosen at random)."""
    orders = itertools.islice(itertools.permutations(range(len(snap.jobs))), 1, None)
    rng = random.Random(7)
    picks = [tuple(rng.sample(range(len(snap.jobs)), len(snap.jobs))) for _ in range(4)]
    for perm in [*itertools.islice(orders, 2), *picks]:
        jobs = [snap.jobs[i] for i in perm]
        s = snapshot_of(case, jobs=jobs)
        o = Outcome.of(s, decide_once(s))
        assert (o.admitted, sorted(o.preempted)) == (first.admitted, sorted(first.preempted)), (
            f"{case.name}: order {perm} gives {_describe(o)}, the case's order "
            f"{_describe(first)}")


def _check_stable(case: Case, snap: Snapshot, decision: Decision) -> None:
    """Later rounds change nothing: the state the first round left is a fixed point."""
    now = snap.now_s
    for k in range(1, case.expect.rounds):
        later = now + case.expect.round_step_s
        jobs = apply(snap, decision, later)
        snap = snapshot_of(case, now_s=later, jobs=jobs)
        decision = decide_once(snap)
        o = Outcome.of(snap, decision)
        assert not o.preempted and not o.admitted, (
            f"{case.name}: round {k + 1} is not stable: {_describe(o)}")
        now = later
