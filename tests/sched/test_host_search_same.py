"""The faster host-aware and domain searches decide exactly what the old ones did (issue 33,
performance goal).

``benchmarks/bench_decide.py --host --domains 4`` measured the decision with CPUs, memory and
domains at up to 2x the GPU-only one; the searches were rewritten to stay in C where they
walked a flavor's nodes (:func:`~tessera.sched.core.host_free.find_fed`,
:func:`~tessera.sched.core.domains.choose`), a search's amounts are remembered for the take that
follows (:meth:`~tessera.sched.core.host_free.HostFree.remember`), and ``explain`` asks each
host question once (:func:`~tessera.sched.core.reasons._host_reasons`). None of that may change
a decision. The old code is kept here, verbatim, as the reference: random searches are
compared one by one, and random whole rounds (two rounds each, the second with the first's
gangs running) are decided once with the new code and once with the old code patched in, and
must agree on every placement, every amount of CPUs and memory, and every waiting reason.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import GpuFlavor, resolve_flavor
from tessera.model.host_need import EPS, gang_host_by_node, gpus_fed
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.model.nodes import Node
from tessera.model.resources import HostDemand
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core import placement as placement_mod
from tessera.sched.core import reasons as reasons_mod
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.count_index import CountIndex
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.domains import DomainMap, choose
from tessera.sched.core.free_view import BlockInfo
from tessera.sched.core.host_free import HostFree, find_fed
from tessera.sched.core.host_reasons import host_shortage
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.reasons import Fragmented, NoCapacity, PendingKind, PendingReason
from tessera.sched.core.snapshot import JobView, Placement, Snapshot

V100 = resolve_flavor("v100")
K80 = resolve_flavor("k80")

# ---- the reference: the searches as they were before the rewrite (verbatim) ----


def old_find_fed(
    host_free: HostFree, free: Mapping[str, int], ids: Sequence[str],
    rack: Mapping[str, str], gpus: int, require_locality: bool, host: HostDemand | None,
) -> tuple[tuple[str, int], ...] | None:
    if not ids:
        return None
    fixed = host.per_gpu_amounts(gpus) if host is not None else None
    key = (host_free.nodes[ids[0]].flavor, require_locality,
           fixed[0] if fixed else -1.0, fixed[1] if fixed else -1.0, gpus)
    if host_free.known_to_fail(key):
        return None
    cpus, mem, share = host_free.cpus, host_free.mem_gib, host_free.share
    best_f = 1 << 30
    best_node = None
    for n in ids:
        f = free[n]
        if f < gpus or f >= best_f:
            continue
        cpg, mpg = fixed if fixed is not None else share[n]
        if cpus[n] + EPS >= cpg * gpus and mem[n] + EPS >= mpg * gpus:
            best_f, best_node = f, n
            if f == gpus:
                break
    if best_node is not None:
        return ((best_node, gpus),)
    if require_locality:
        host_free.note_failed(key)
        return None
    usable: dict[str, int] = {}
    for n in ids:
        f = free[n]
        if f <= 0:
            continue
        cpg, mpg = fixed if fixed is not None else share[n]
        fed = gpus_fed(cpus[n], mem[n], cpg, mpg)
        u = int(f if fed >= f else fed)
        if u > 0:
            usable[n] = u
    if sum(usable.values()) < gpus:
        host_free.note_failed(key)
        return None
    by_rack: dict[str, list[str]] = {}
    for n in usable:
        by_rack.setdefault(rack[n], []).append(n)
    candidates = [ns for ns in by_rack.values() if sum(usable[n] for n in ns) >= gpus]
    pool = (min(candidates, key=lambda ns: sum(usable[n] for n in ns)) if candidates
            else list(usable))
    taken: list[tuple[str, int]] = []
    need = gpus
    for n in sorted(pool, key=lambda n: -usable[n]):
        c = min(usable[n], need)
        taken.append((n, c))
        need -= c
        if need == 0:
            return tuple(taken)
    return None


def old_choose(
    nodes: Sequence[str], counts: Sequence[int], free: Mapping[str, int], gpus: int,
    require_local: bool, domains: DomainMap,
) -> tuple[tuple[str, int], ...] | None:
    present = set(counts)
    best_free = next((k for k in range(gpus, max(present) + 1) if k in present), 0)
    if best_free:
        ties = [i for i, f in enumerate(counts) if f == best_free]
        if len(ties) == 1:
            return ((nodes[ties[0]], gpus),)
        smallest, members = domains.smallest, domains.members
        best: tuple[int, int] | None = None
        seen: set[str] = set()
        for i in ties:
            d = smallest.get(nodes[i])
            if d is None:
                return ((nodes[i], gpus),)
            if d in seen:
                continue
            seen.add(d)
            ns = members[d]
            s = sum(operator.itemgetter(*ns)(free)) if len(ns) > 1 else free[ns[0]]
            if best is None or s < best[0]:
                best = (s, i)
        assert best is not None
        return ((nodes[best[1]], gpus),)
    avail = [(n, f) for n, f in zip(nodes, counts, strict=True) if f > 0]
    levels = domains.levels[:1] if require_local else domains.levels
    for level in levels:
        groups: dict[str, list[tuple[str, int]]] = {}
        for n, f in avail:
            d = level.get(n)
            if d is not None:
                groups.setdefault(d, []).append((n, f))
        fits = [(s, i, g) for i, g in enumerate(groups.values())
                if (s := sum(f for _n, f in g)) >= gpus]
        if fits:
            group = min(fits, key=lambda x: (x[0], x[1]))[2]
            taken: list[tuple[str, int]] = []
            need = gpus
            for n, f in sorted(group, key=lambda nf: -nf[1]):
                c = min(f, need)
                taken.append((n, c))
                need -= c
                if need == 0:
                    break
            return tuple(taken)
    if require_local or sum(f for _n, f in avail) < gpus:
        return None
    taken = []
    need = gpus
    for n, f in sorted(avail, key=lambda nf: -nf[1]):
        c = min(f, need)
        taken.append((n, c))
        need -= c
        if need == 0:
            break
    return tuple(taken)


def old_host_reasons(
    jobs: list[JobView], reasons: dict[JobId, PendingReason], oracle: ThroughputOracle,
    free: FreeGpus, needs_locality: dict[JobId, bool], infos: dict[GpuFlavor, BlockInfo],
) -> None:
    seen: dict[tuple[GpuFlavor, ...], tuple[Node, float, float]] = {}
    for j in jobs:
        jid = j.spec.job_id
        if isinstance(reasons[jid].detail, NoCapacity | Fragmented):
            short = host_shortage(j, tuple(r.flavor for r in oracle.real_rates(j.spec)),
                                  free, needs_locality[jid], infos, seen)
            if short is not None:
                reasons[jid] = PendingReason(PendingKind.CAPACITY, short)


def old_choose_at(
    nodes: tuple[str, ...], _by_count: CountIndex, free: Mapping[str, int], gpus: int,
    require_local: bool, domains: DomainMap,
) -> tuple[tuple[str, int], ...] | None:
    """The old domain search, called as the new one is (it reads the counts itself)."""
    return old_choose(nodes, tuple(free[n] for n in nodes), free, gpus, require_local, domains)


def old_search_fed(
    host_free: HostFree, free: Mapping[str, int], ids: tuple[str, ...], _by_count: CountIndex,
    rack: Mapping[str, str], gpus: int, require_locality: bool, host: HostDemand | None,
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, float, float], ...]] | None:
    """The old search, with the amounts the old round computed for its answer."""
    parts = old_find_fed(host_free, free, ids, rack, gpus, require_locality, host)
    if parts is None:
        return None
    return parts, gang_host_by_node(parts, host, host_free.nodes)


@contextmanager
def old_searches() -> Iterator[None]:
    """The old searches patched in where the round calls them."""
    with (mock.patch.object(placement_mod, "search_fed", old_search_fed),
          mock.patch.object(placement_mod, "choose", old_choose_at),
          mock.patch.object(reasons_mod, "_host_reasons", old_host_reasons),
          mock.patch.object(HostFree, "remember", lambda _self, p, _held: p)):
        yield


# ---- random inputs ----


def _cluster(rng: random.Random, with_domains: bool) -> ClusterSpec:
    nodes: list[Node] = []
    for flavor in (V100, K80):
        for i, n in enumerate(make_nodes(flavor, rng.randint(1, 8), rng.choice([4, 8]),
                                         rack=None)):
            nodes.append(replace(n, cpu_cores=rng.choice([8, 16, 24, 48]),
                                 mem_gib=float(rng.choice([64, 128, 256])),
                                 rack=f"r{rng.randint(0, 2)}",
                                 nvlink_domain=(f"d{rng.randint(0, 2)}"
                                                if with_domains and i % 3 else None),
                                 switch_path=((f"tor{rng.randint(0, 1)}", "agg")
                                              if with_domains else ())))
    rng.shuffle(nodes)
    return ClusterSpec("rand", tuple(nodes))


def _demand(rng: random.Random) -> HostDemand | None:
    if rng.random() < 0.3:
        return None
    return HostDemand(rng.choice([0.5, 1.0, 3.0, 6.0, 12.0]),
                      float(rng.choice([2, 8, 32, 96])), per_gpu=rng.random() < 0.7)


def _jobs(rng: random.Random, n: int) -> list[JobSpec]:
    table = default_throughputs()
    single, multi = table.job_types(), table.distributable_types()
    out = []
    for i in range(n):
        g = rng.choice([1, 1, 1, 2, 4, 8, 16])
        out.append(JobSpec(JobId(f"j{i}"), rng.choice(single if g == 1 else multi), g,
                           rng.uniform(1e3, 1e5), float(i), host=_demand(rng)))
    return out


def _digest(d: Decision) -> tuple[object, ...]:
    return (tuple(sorted((j, p.label, p.gpus_by_node, p.host_by_node)
                         for j, p in d.placements.items())),
            tuple(sorted((j, str(r)) for j, r in d.pending.items())),
            tuple(sorted(d.started)), tuple(sorted(d.preempted)))


def _two_rounds(snap: Snapshot, policy: str) -> list[tuple[object, ...]]:
    """Two rounds: the snapshot, then the same jobs with the first round's gangs running."""
    pol = make_policy(policy)
    ctx = DecisionContext(ThroughputOracle(default_throughputs(), snap.cluster),
                          random.Random(0))
    first = decide(snap, pol, ctx)
    views = tuple(JobView(v.spec, JobState.RUNNING, v.remaining_steps * 0.9,
                          first.placements[v.spec.job_id])
                  if v.spec.job_id in first.placements else v for v in snap.jobs)
    second = decide(replace(snap, now_s=snap.now_s + 360.0, jobs=views,
                            policy_state=first.policy_state), pol, ctx)
    return [_digest(first), _digest(second)]


# ---- the tests ----


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**31), with_domains=st.booleans())
def test_find_fed_and_choose_answer_as_before(seed: int, with_domains: bool) -> None:
    """One search at a time, on random free GPUs, CPUs and memory: the same answer."""
    rng = random.Random(seed)
    cluster = _cluster(rng, with_domains)
    for _ in range(6):
        free = {n.node_id: rng.randint(0, n.gpus) for n in cluster.nodes}
        new_host, old_host = HostFree(cluster.nodes), HostFree(cluster.nodes)
        for n in cluster.nodes:
            cpus, mem = rng.uniform(0, n.cpu_cores), rng.uniform(0, n.mem_gib)
            for h in (new_host, old_host):
                h.cpus[n.node_id], h.mem_gib[n.node_id] = cpus, mem
        rack = {n.node_id: n.rack for n in cluster.nodes}
        domains = DomainMap.of(cluster.nodes)
        for flavor in (V100, K80):
            ids = tuple(n.node_id for n in cluster.nodes if n.flavor is flavor)
            for _ in range(4):
                gpus = rng.choice([1, 2, 3, 4, 6, 8, 12, 16])
                local = rng.random() < 0.4
                host = _demand(rng)
                assert (find_fed(new_host, free, ids, rack, gpus, local, host)
                        == old_find_fed(old_host, free, ids, rack, gpus, local, host))
                if domains is not None and ids:
                    counts = tuple(free[n] for n in ids)
                    assert (choose(ids, CountIndex(ids, free), free, gpus, local, domains)
                            == old_choose(ids, counts, free, gpus, local, domains))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), with_domains=st.booleans(),
       policy=st.sampled_from(["fifo", "las", "max_min_fairness", "hetero_srpt"]))
def test_whole_rounds_decide_as_before(seed: int, with_domains: bool, policy: str) -> None:
    """Random clusters (with and without domains) and jobs (with and without demands, per GPU
    and per job): two rounds decided by the new and by the old searches agree exactly."""
    rng = random.Random(seed)
    cluster = _cluster(rng, with_domains)
    views = tuple(JobView(s, JobState.PENDING, s.total_steps)
                  for s in _jobs(rng, rng.randint(4, 40)))
    snap = Snapshot(0.0, cluster, views)
    new = _two_rounds(snap, policy)
    with old_searches():
        old = _two_rounds(snap, policy)
    assert new == old


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31), with_domains=st.booleans())
def test_random_takes_and_give_backs_search_as_before(seed: int, with_domains: bool) -> None:
    """A round's free view taking and giving back gangs in random order (one by one and all
    at once, as round-based rounds do) answers every search as the old search on a copy does:
    the nodes-by-count index follows every change."""
    rng = random.Random(seed)
    cluster = _cluster(rng, with_domains)
    jobs = _jobs(rng, 30)
    views = tuple(JobView(s, JobState.PENDING, s.total_steps) for s in jobs)
    snap = Snapshot(0.0, cluster, views)
    new, old = FreeGpus.of_snapshot(snap), FreeGpus.of_snapshot(snap)
    held: list[tuple[Placement, Placement]] = []
    for _ in range(60):
        op = rng.random()
        if op < 0.6 or not held:
            spec = rng.choice(jobs)
            flavor = rng.choice([V100, K80])
            local = rng.random() < 0.3
            got = new.find(flavor, spec.num_gpus, local, spec.host)
            with old_searches():
                want = old.find(flavor, spec.num_gpus, local, spec.host)
            assert got == want
            if got is not None and want is not None:
                assert new.take_if_free(got) and old.take_if_free(want)
                held.append((got, want))
        elif op < 0.8:
            a, b = held.pop(rng.randrange(len(held)))
            new.release(a)
            old.release(b)
        else:
            some = [held.pop(rng.randrange(len(held))) for _ in range(rng.randint(1, len(held)))]
            new.release_each([a for a, _b in some])
            old.release_each([b for _a, b in some])
