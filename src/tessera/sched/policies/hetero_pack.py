"""``hetero_pack``: ``hetero_gittins`` that also space-shares GPUs (no oracle durations).

``hetero_gittins`` decides who runs (Gittins index over attained service, per GPU) and where
(flavors matched by completion rate, whole nodes for gangs). ``hetero_pack`` keeps its order and
its gang rules, matches flavors by throughput instead, and then uses the GPUs a second time, at
the pair speeds Gavel measured.

**What a pair is worth.** Two jobs sharing a GPU each run slower than alone. Measure each job's
progress *normalised* by its best speed alone (``rate / best``: 1 is the job alone on its
fastest flavor). A partner ``p`` joining host ``h`` on flavor ``f`` changes the round's
normalised progress by

    net = (r_p − k_p) / best_p − (a_h − r_h) / best_h

with ``a_h`` the host's speed alone on ``f``, ``r_h``, ``r_p`` the measured speeds of the pair
on ``f``, and ``k_p`` what the partner would do otherwise: 0 if it would wait, its speed alone
on its own flavor if the round gives it one. The pair is formed when ``net`` exceeds
``min_gain`` × the host's own normalised progress ``a_h / best_h``.

**Flavors by throughput.** ``hetero_gittins`` hands its flavors out by *completion rate*
(speed ÷ expected work left), which puts a young job on the V100 even where an old one gains ten
times more from it. ``hetero_pack`` weighs each job's flavors by its speed there relative to its
best instead (every job counts alike), so the fast GPUs go to the jobs they speed up most; who
runs at all is still decided by the Gittins order. On the heavy Gavel-like traces this alone
took ``hetero_pack`` from 0.95-0.98× to 0.92-0.96× of the best Gavel policy; weights in between
(``τ^-α`` for α = 0.25, 0.5, or ``1 / (τ + T)`` for T = 1, 10, 100 h) all did worse than α = 0.

**Two kinds of partner.** A job left waiting joins a host where the pair does more work than
the host alone -- packing a queue. A job the round puts on a *slower* flavor may instead join a
host on a faster one (``move_slow``): half a V100 often beats a whole K80, and the K80 it leaves
goes to the next job in line. On a cluster that is busy but not full (a third of its GPUs K80s,
most jobs on them for part of their life) this second kind is most of the gain: without it,
``hetero_pack`` was 1.02-1.04× slower than Gavel's packed max-min on 400-job traces at 3 jobs
per hour; with it 0.97-0.98× (``benchmarks/bench_packing.py``). A running job that moves pays
its restart (``restart_s`` of the round) in the reckoning; a host never restarts for a partner.

**Who pairs with whom.** Every (partner, host class) option above the threshold is taken
greedily, largest ``net`` first; a host takes one partner (only pairs were measured), a job
that took a partner is no longer a candidate partner, and within a class the host with the most
expected work left is taken first (the one a slowdown costs least). Hosts alike in job type,
gang size, flavor, allowed flavors and declared memory form a class, and partners alike in the
same and in their alternative form a kind: each kind ranks the classes once, which keeps a round
linear in the jobs.

Packing never delays a job's start (the partners are jobs the round would leave waiting or
slower), and ``hetero_srpt``'s starvation rule still puts a job that waited too long first. A
pair without a positive measurement, a job marked ``exclusive``, or a pair whose declared memory
does not fit is never proposed (:func:`tessera.sched.packing.may_share`).

**Measured and dropped.** Weighing each job's progress by its expected completion rate (÷ its
Gittins remaining time, as ``hetero_srpt`` weighs flavors) packed less where it mattered: 2-3 %
worse average JCT on 100-job heavy traces and 14 % worse on a 400-job trace at 3 jobs/h. Taking
options in the partners' Gittins order instead of by ``net``: 1.3 % worse on that trace.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from pydantic import Field

from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec, JobState
from tessera.perf.colocation import PairRates, PairRefusal
from tessera.perf.profiles import ThroughputTable
from tessera.sched.lp import LpSolver
from tessera.sched.packing import MEMORY_KEY, may_share
from tessera.sched.policies.hetero_gittins import HeteroGittins, HeteroGittinsConfig
from tessera.sched.policies.hetero_srpt import HeteroSrpt
from tessera.sched.policy import POLICIES, PolicyContext, Ranking
from tessera.sched.snapshot import JobView, Snapshot

_HostKind = tuple[str, int, str, tuple[GpuFlavor, ...], str | None]
"""Hosts that pair alike: job type, gang size, flavor, allowed flavors, declared memory."""
_PartnerKind = tuple[str, int, tuple[GpuFlavor, ...], str | None, str | None, bool]
"""Partners that pair alike: job type, gang size, allowed flavors, declared memory, the flavor
the round gives it alone (``None``: it would wait), and whether moving costs it a restart."""


class HeteroPackConfig(HeteroGittinsConfig):
    min_gain: float = Field(
        0.1, ge=0,
        description="pair when the round's normalised progress rises by more than this × the "
        "host's own",
    )
    move_slow: bool = Field(
        True, description="a job the round puts on a slower flavor may join a host on a faster "
        "one (else only waiting jobs pair)",
    )
    scan_factor: int = Field(
        4, ge=1, description="waiting jobs examined per GPU-holding job (bounds a round's cost)"
    )


@POLICIES.register(
    "hetero_pack",
    "Tessera, no oracle: hetero_gittins plus space sharing at measured pair speeds, for jobs "
    "that would wait or run on a slower flavor.",
)
class HeteroPack(HeteroGittins):
    """See the module docstring."""

    packs = True
    Config = HeteroPackConfig

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)
        self._pairs: dict[tuple[object, ...], PairRates | None] = {}

    def rank(self, ctx: PolicyContext) -> Ranking:
        base = super().rank(ctx)
        cfg = self.config
        assert isinstance(cfg, HeteroPackConfig)
        snap = ctx.snapshot
        by_id = {j.job_id: j for j in snap.jobs}
        hosts, waiting = _replay(base, by_id, snap)
        if not hosts or not (waiting or cfg.move_slow):
            return base
        now = snap.now_s
        work_left: dict[JobId, float] = {}

        def expected_left_s(jid: JobId) -> float:
            if jid not in work_left:
                j = by_id[jid]
                top = ctx.oracle.best_rate(j.spec)
                work_left[jid] = (self._remaining_best_s(j, top, now) if top > 0
                                  else float("inf"))
            return work_left[jid]

        classes: dict[_HostKind, list[JobId]] = {}
        for hid, fl in hosts.items():
            hs = by_id[hid].spec
            if not hs.exclusive:
                kind = (hs.job_type, hs.num_gpus, fl, hs.flavors, hs.extra.get(MEMORY_KEY))
                classes.setdefault(kind, []).append(hid)
        for members in classes.values():
            members.sort(key=expected_left_s)  # the end of the list: the most work left
        partners = waiting[: cfg.scan_factor * len(hosts)]
        if cfg.move_slow:
            partners += list(hosts)
        restart = min(cfg.restart_s / snap.round_s, 1.0) if snap.round_s else 0.0
        ranked: dict[_PartnerKind, list[tuple[float, _HostKind]]] = {}
        heap: list[tuple[float, int, int, JobId]] = []
        options: list[list[tuple[float, _HostKind]]] = []
        for pid in partners:
            p = by_id[pid]
            ps = p.spec
            if ps.exclusive:
                continue
            alone = hosts.get(pid)
            pays_restart = (alone is not None and p.state is JobState.RUNNING
                            and p.placement is not None and p.placement.flavor == alone)
            pkind = (ps.job_type, ps.num_gpus, ps.flavors, ps.extra.get(MEMORY_KEY), alone,
                     pays_restart)
            mine = ranked.get(pkind)
            if mine is None:
                mine = ranked[pkind] = self._ranked_classes(ctx, p, alone, restart * pays_restart,
                                                            classes, by_id)
            if mine:
                heapq.heappush(heap, (-mine[0][0], len(options), 0, pid))
                options.append(mine)
        partner_of: dict[JobId, JobId] = {}
        paired: set[JobId] = set()  # hosts that took a partner, and the partners
        while heap:
            _neg, n, i, pid = heapq.heappop(heap)
            if pid in paired:
                continue
            members = classes[options[n][i][1]]
            while members and members[-1] in paired:
                members.pop()
            if members:
                hid = members.pop()
                partner_of[pid] = hid
                paired.update((pid, hid))
            elif i + 1 < len(options[n]):
                heapq.heappush(heap, (-options[n][i + 1][0], n, i + 1, pid))
        if not partner_of:
            return base
        cands = tuple(c for c in base.candidates if c[0] not in partner_of)
        return Ranking(cands, state=base.state, notes=base.notes, wakeup_s=base.wakeup_s,
                       fallbacks=base.fallbacks, colocate=partner_of)

    @staticmethod
    def _match(
        selected: list[tuple[JobView, dict[str, float], list[str]]], cap: dict[str, int],
        solver: LpSolver,
    ) -> tuple[list[tuple[JobView, dict[str, float], list[str]]], tuple[str, ...]]:
        """The matching LP of :class:`HeteroSrpt`, each job's weights divided by its best one
        (its seconds on each flavor over its seconds on the best): normalised throughput, not
        completion rate (see the module docstring)."""
        scaled = []
        for j, cost, order in selected:
            best = max(min(cost.values()), 1e-9)
            scaled.append((j, {f: c / best for f, c in cost.items()}, order))
        matched, fallbacks = HeteroSrpt._match(scaled, cap, solver)
        costs = {id(j): cost for j, cost, _order in selected}
        return [(j, costs[id(j)], order) for j, _c, order in matched], fallbacks

    def _ranked_classes(
        self, ctx: PolicyContext, p: JobView, alone: str | None, restart_share: float,
        classes: dict[_HostKind, list[JobId]], by_id: dict[JobId, JobView],
    ) -> list[tuple[float, _HostKind]]:
        """The host classes ``p`` may join with their ``net`` (see the module docstring), best
        first (ties: the first class), keeping those above the threshold. ``alone``: the
        flavor the round gives ``p`` by itself (``None``: it would wait); ``restart_share``:
        the part of the round a move costs ``p``."""
        cfg = self.config
        assert isinstance(cfg, HeteroPackConfig)
        oracle = ctx.oracle
        best_p = oracle.best_rate(p.spec)
        if best_p <= 0:
            return []
        kept = 0.0 if alone is None else oracle.rate(p.spec, alone, True) / best_p
        scored: list[tuple[float, int, _HostKind]] = []
        for i, (key, members) in enumerate(classes.items()):
            fl = key[2]
            if key[1] != p.spec.num_gpus or fl == alone:
                continue
            h = by_id[members[-1]]
            rates = self._pair(oracle.table, ctx.snapshot.cluster, h.spec, p.spec, fl)
            best_h = oracle.best_rate(h.spec)
            alone_h = oracle.rate(h.spec, fl, True)
            if rates is None or best_h <= 0 or alone_h <= 0:
                continue
            gained = rates.second_steps_per_s * (1.0 - restart_share) / best_p - kept
            lost = (alone_h - rates.first_steps_per_s) / best_h
            net = gained - lost
            if net > cfg.min_gain * alone_h / best_h:
                scored.append((-net, i, key))
        scored.sort()
        return [(-neg, key) for neg, _i, key in scored]

    def _pair(self, table: ThroughputTable, cluster: ClusterSpec, host: JobSpec,
              partner: JobSpec, flavor: str) -> PairRates | None:
        """:func:`~tessera.sched.packing.may_share` for jobs without declared memory (cached
        per job kind), or for any pair with memory declared (not cached)."""
        if MEMORY_KEY in host.extra or MEMORY_KEY in partner.extra:
            got = may_share(table, cluster, host, partner, flavor)
            return None if isinstance(got, PairRefusal) else got
        key = (host.job_type, partner.job_type, host.num_gpus, partner.num_gpus, flavor,
               host.flavors, partner.flavors, id(table))
        if key not in self._pairs:
            if len(self._pairs) > 100_000:
                self._pairs.clear()
            got = may_share(table, cluster, replace(host, exclusive=False),
                            replace(partner, exclusive=False), flavor)
            self._pairs[key] = None if isinstance(got, PairRefusal) else got
        return self._pairs[key]


def _replay(base: Ranking, by_id: dict[JobId, JobView], snap: Snapshot
            ) -> tuple[dict[JobId, str], list[JobId]]:
    """The core's selection by count, replayed: ``({job: flavor it gets alone}, [jobs left
    waiting, in the ranking's order])``."""
    count: dict[str, int] = {}
    for node in snap.up_nodes():
        count[node.flavor.short] = count.get(node.flavor.short, 0) + node.gpus
    hosts: dict[JobId, str] = {}
    waiting: list[JobId] = []
    seen: set[JobId] = set()
    for jid, fl in base.candidates:
        if jid in hosts:
            continue
        g = by_id[jid].spec.num_gpus
        if count.get(fl, 0) >= g:
            count[fl] -= g
            hosts[jid] = fl
        elif jid not in seen:
            waiting.append(jid)
        seen.add(jid)
    return hosts, [j for j in dict.fromkeys(waiting) if j not in hosts]
