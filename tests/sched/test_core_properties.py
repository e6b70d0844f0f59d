"""Properties of one decision round, for every registered policy and its agnostic twin.

Hypothesis draws small clusters (1-3 flavors of K80/P100/V100, 1-6 nodes of 1-8 GPUs, some
nodes down), tenant queues with quotas, and active jobs: pending, preempted, or running on a
valid placement. Whatever the policy, a round must:

* never give a node more GPUs than it has, nor use a node that is down;
* place each gang whole (its size), on flavors the job allows and the node really has;
* never let a queue that admits a new job hold more than nominal + borrowing GPUs;
* account for every active job: placed, or pending with a reason (never both, never neither);
* give the same decision for the same seed (a fresh policy and oracle, or a warm oracle).

``decide`` is called through :func:`_decide` only, so a change of its signature is a one-line
change here. Example counts are kept small (the file runs in ~15 s); a local soak with a few
hundred examples per policy found no failure when this was written.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import list_policies, make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, PlacementOptions, decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import AGNOSTIC_SUFFIX, Policy
from tessera.sched.core.snapshot import JobView, Placement, QueueQuota, Snapshot
from tests.builders import RECO, RESNET, make_cluster


def _decide(snap: Snapshot, policy: Policy, oracle: ThroughputOracle, seed: int,
            opts: PlacementOptions | None = None) -> Decision:
    """The one call site of ``decide`` in this module."""
    return decide(snap, policy, DecisionContext(oracle, random.Random(seed)), opts)


_NAMES = [n for n, _ in list_policies()]
POLICIES = sorted(_NAMES + [n + AGNOSTIC_SUFFIX for n in _NAMES])
FLAVORS = ("k80", "p100", "v100")
GANG_TYPES = (RESNET, "Transformer (batch size 64)", "LM (batch size 20)")
# Single-GPU types in the Gavel table: drawn as a gang now and then, which runs nowhere (a
# NO_FIT reason).
SINGLE_TYPES = (RECO, "A3C")
QUEUES = ("default", "team-a", "team-b")
TABLE = default_throughputs()


class Scenario:
    """A drawn snapshot and placement options (a plain class, so that hypothesis prints the
    short form below for a failing example instead of every node's full catalog entry)."""

    def __init__(self, snapshot: Snapshot, options: PlacementOptions) -> None:
        self.snapshot = snapshot
        self.options = options

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        s = self.snapshot
        nodes = ", ".join(f"{n.node_id}:{n.gpus}" for n in s.cluster.nodes)
        jobs = "\n  ".join(
            f"{j.spec.job_id} {j.state.value} {j.spec.job_type} x{j.spec.num_gpus} "
            f"flavors={j.spec.flavors} queue={j.spec.queue} local={j.spec.requires_locality} "
            f"rem={j.remaining_steps:g} attained={j.attained_gpu_s:g} "
            f"at={j.placement.describe() if j.placement else None}"
            for j in s.jobs
        )
        return (f"Scenario(now={s.now_s}, nodes=[{nodes}], down={sorted(s.down_nodes)}, "
                f"quotas={dict(s.quotas)}, free_gpus={s.free_gpus}, options={self.options}\n"
                f"  {jobs})")


def _allocate(flavor: GpuFlavor, gpus: int, free: dict[str, int], cluster: ClusterSpec,
              down: frozenset[str], local: bool) -> Placement | None:
    """A valid placement for a running job (fullest nodes first), or ``None``."""
    nodes = sorted((n for n in cluster.nodes
                    if n.flavor == flavor and n.node_id not in down and free[n.node_id]),
                   key=lambda n: -free[n.node_id])
    if local:
        nodes = [n for n in nodes if free[n.node_id] >= gpus][:1]
    parts: list[tuple[str, int]] = []
    left = gpus
    for n in nodes:
        take = min(left, free[n.node_id])
        parts.append((n.node_id, take))
        left -= take
        if not left:
            break
    if left:
        return None
    for node_id, k in parts:
        free[node_id] -= k
    return Placement.of(flavor, tuple(sorted(parts, key=lambda p: -p[1])))


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    flavors = draw(st.lists(st.sampled_from(FLAVORS), min_size=1, max_size=3, unique=True))
    b = make_cluster()
    for _ in range(draw(st.integers(1, 6))):
        b.node(draw(st.sampled_from(flavors)), gpus=draw(st.integers(1, 8)))
    cluster = b.build()
    ids = [n.node_id for n in cluster.nodes]
    down = frozenset(draw(st.lists(st.sampled_from(ids), max_size=min(2, len(ids) - 1),
                                   unique=True)))
    quotas = {
        q: QueueQuota(q, draw(st.integers(0, 8)), draw(st.one_of(st.none(), st.integers(0, 4))))
        for q in QUEUES if draw(st.booleans())
    }
    now = 3600.0
    free = {n.node_id: n.gpus for n in cluster.nodes}
    views: list[JobView] = []
    for i in range(draw(st.integers(0, 10))):
        if draw(st.integers(0, 3)):
            job_type = draw(st.sampled_from(GANG_TYPES))
            gpus = draw(st.sampled_from((1, 1, 1, 2, 2, 3, 4, 8, 12)))
        else:
            job_type = draw(st.sampled_from(SINGLE_TYPES))
            gpus = draw(st.sampled_from((1, 1, 1, 1, 2)))
        wanted = draw(st.one_of(st.just(()), st.just(()), st.lists(
            st.sampled_from(FLAVORS), min_size=1, max_size=3, unique=True).map(tuple)))
        spec = JobSpec(JobId(f"j{i}"), job_type, gpus, draw(st.sampled_from((100.0, 1e4, 1e6))),
                       submit_time_s=float(i * 60), flavors=wanted,
                       priority_weight=draw(st.sampled_from((1.0, 1.0, 5.0))),
                       queue=draw(st.sampled_from(QUEUES)),
                       requires_locality=draw(st.booleans()))
        state = draw(st.sampled_from((JobState.PENDING, JobState.PREEMPTED, JobState.RUNNING,
                                      JobState.RUNNING)))
        done = draw(st.sampled_from((0.0, 0.3, 0.9)))
        attained = done * 600.0 * gpus
        placement = None
        if state is JobState.RUNNING:
            usable = [f for f in (wanted or flavors) if _runs_on(spec, f)]
            if usable:
                placement = _allocate(resolve_flavor(draw(st.sampled_from(usable))), gpus,
                                      free, cluster, down, spec.requires_locality)
            if placement is None:
                state = JobState.PENDING
        views.append(JobView(
            spec, state, spec.total_steps * (1 - done), placement, attained_gpu_s=attained,
            run_s_by_flavor=((placement.flavor, attained / gpus),) if placement else (),
            pending_since_s=spec.submit_time_s, as_of_s=now,
            last_run_end_s=None if state is JobState.PENDING else now - 10,
        ))
    free_known = draw(st.booleans())
    snap = Snapshot(
        now, cluster, tuple(views), quotas=quotas, down_nodes=down, round_s=360.0,
        free_gpus={k: (0 if k in down else v) for k, v in free.items()} if free_known else None,
    )
    opts = PlacementOptions(locality_wait_s=draw(st.sampled_from((0.0, 600.0, math.inf))),
                            mixed_gangs=draw(st.booleans()))
    return Scenario(snap, opts)


def _runs_on(spec: JobSpec, flavor: str) -> bool:
    try:
        return TABLE.throughput(spec.job_type, resolve_flavor(flavor), spec.num_gpus,
                                False) > 0
    except Exception:
        return False


def _check_invariants(scn: Scenario, d: Decision) -> None:
    snap = scn.snapshot
    nodes = {n.node_id: n for n in snap.cluster.nodes}
    by_id = {j.job_id: j for j in snap.jobs}

    # Every job that runs is an active job of the snapshot.
    assert set(d.placements) <= set(by_id)

    # Co-located jobs share one gang: both hold the same GPUs, and say so of each other.
    for jid, p in d.placements.items():
        for other in p.colocated_with:
            q = d.placements[other]
            assert q.gpus_by_node == p.gpus_by_node and jid in q.colocated_with, (jid, other)

    # No node over-allocated (a shared gang counted once), none that is down used.
    used: Counter[str] = Counter()
    for jid, p in d.placements.items():
        if any(str(o) < str(jid) for o in p.colocated_with):
            continue
        for node_id, k in p.gpus_by_node:
            assert k > 0
            used[node_id] += k
    for node_id, k in used.items():
        assert node_id in nodes and node_id not in snap.down_nodes, node_id
        assert k <= nodes[node_id].gpus, f"{node_id}: {k} > {nodes[node_id].gpus}"

    # Whole gangs, on flavors the job allows and the nodes have.
    for jid, p in d.placements.items():
        spec = by_id[jid].spec
        assert p.num_gpus == spec.num_gpus, (jid, p.describe())
        allowed = set(spec.flavors) or {n.flavor for n in nodes.values()}
        for node_id, _k, flavor in p.parts():
            assert nodes[node_id].flavor == flavor, (jid, p.describe())
            assert flavor in allowed, (jid, p.describe(), allowed)
        if p.is_mixed:
            assert scn.options.mixed_gangs and not spec.requires_locality, (jid, p.describe())
        elif spec.requires_locality:
            assert p.consolidated, (jid, p.describe())

    # A queue that admits a new job stays within nominal + borrowing.
    new_by_queue: Counter[str] = Counter()
    held_by_queue: Counter[str] = Counter()
    for jid, p in d.placements.items():
        q = by_id[jid].spec.queue
        held_by_queue[q] += p.num_gpus
        if not by_id[jid].running:
            new_by_queue[q] += p.num_gpus
    for q, new in new_by_queue.items():
        quota = snap.quotas.get(q)
        if quota is not None and quota.borrowing_limit_gpus is not None:
            limit = quota.nominal_gpus + quota.borrowing_limit_gpus
            assert held_by_queue[q] <= limit, (q, held_by_queue[q], limit, new)

    # Every active job: placed, or pending with a reason; never both.
    for jid in by_id:
        assert (jid in d.placements) != (jid in d.pending), (
            jid, d.placements.get(jid), d.pending.get(jid))

    # Started and preempted are consistent with the placements.
    assert set(d.started) <= set(d.placements)
    for jid in d.preempted:
        assert by_id[jid].running and jid not in d.placements


def _same(a: Decision, b: Decision) -> None:
    assert dict(a.placements) == dict(b.placements)
    assert a.started == b.started and a.preempted == b.preempted
    assert dict(a.pending) == dict(b.pending)
    assert a.wakeup_s == b.wakeup_s


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scn=scenarios(), seed=st.integers(0, 2**16))
def test_round_invariants(policy: str, scn: Scenario, seed: int) -> None:
    cluster = scn.snapshot.cluster
    oracle = ThroughputOracle(default_throughputs(), cluster)
    first = _decide(scn.snapshot, make_policy(policy), oracle, seed, scn.options)
    _check_invariants(scn, first)
    # Same seed, fresh policy and oracle: the same decision; and the first oracle's warm
    # caches must not change the answer either.
    fresh = ThroughputOracle(default_throughputs(), cluster)
    _same(first, _decide(scn.snapshot, make_policy(policy), fresh, seed, scn.options))
    _same(first, _decide(scn.snapshot, make_policy(policy), oracle, seed, scn.options))
