"""``hetero_pack``: ``hetero_gittins`` that also space-shares GPUs (no oracle durations).

``hetero_gittins`` decides who runs (Gittins index over attained service, per GPU) and where
(flavors matched by completion rate, whole nodes for gangs). ``hetero_pack`` keeps all of that
and then uses the GPUs a second time: each job left waiting, in the same Gittins order, may join
the GPUs of a job chosen to run, at the pair speeds Gavel measured.

**When to pack.** Two jobs sharing a GPU each run slower than alone; the pair pays when the
two together do more work than one of them alone. With ``a_h``, ``a_p`` the jobs' speeds alone
on the host's flavor and ``r_h``, ``r_p`` their measured speeds together, the pair's
*normalised throughput* is ``r_h / a_h + r_p / a_p``: 1 is what the host alone does, 2 would be
two whole GPUs. A waiting job joins the host where that sum is largest and above
``1 + min_gain`` (default 1.2). Hosts take one partner (only pairs were measured).

**A variant measured worse.** ``by_remaining=True`` weighs by how close each job is to
finishing instead, ``Δ = (r_p / best_p) / τ_p − ((a_h − r_h) / best_h) / τ_h`` (the round's
change in expected completion rate, ``τ`` the Gittins remaining time): it shields hosts near
their end but packs less, and on heavy Gavel-like traces it lost 2-3 % average JCT to the plain
throughput test (``benchmarks/bench_packing.py``); at heavy load the queue, not the host,
decides JCT.

Only jobs that would otherwise wait are packed, so packing never delays a job's start, and
``hetero_srpt``'s starvation rule still puts a job that waited too long first. A pair without a
positive measurement, a job marked ``exclusive``, or a pair whose declared memory does not fit
is never proposed (:func:`tessera.sched.packing.may_share`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from pydantic import Field

from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId, JobSpec
from tessera.perf.colocation import PairRates, PairRefusal
from tessera.perf.profiles import ThroughputTable
from tessera.sched.packing import MEMORY_KEY, may_share
from tessera.sched.policies.hetero_gittins import HeteroGittins, HeteroGittinsConfig
from tessera.sched.policy import POLICIES, PolicyContext, Ranking
from tessera.sched.snapshot import JobView

_HostKind = tuple[str, int, str, tuple[GpuFlavor, ...], str | None]
"""Hosts that pair alike: job type, gang size, flavor, allowed flavors, declared memory."""


class HeteroPackConfig(HeteroGittinsConfig):
    min_gain: float = Field(
        0.2, ge=0,
        description="pack when the pair does more than 1 + this times the work of one job "
        "alone (with by_remaining: when the completion-rate gain exceeds this × the host's)",
    )
    by_remaining: bool = Field(
        False, description="weigh the pair's speeds by 1/τ (expected completion rate) "
        "instead of plain normalised throughput",
    )
    scan_factor: int = Field(
        4, ge=1, description="waiting jobs examined per GPU-holding job (bounds a round's cost)"
    )


@POLICIES.register(
    "hetero_pack",
    "Tessera, no oracle: hetero_gittins plus space sharing at measured pair speeds when the "
    "pair raises the expected completion rate.",
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
        now = snap.now_s
        by_id = {j.job_id: j for j in snap.jobs}
        count: dict[str, int] = {}
        for node in snap.up_nodes():
            count[node.flavor.short] = count.get(node.flavor.short, 0) + node.gpus
        hosts: dict[JobId, str] = {}
        waiting: list[JobId] = []
        seen: set[JobId] = set()
        for jid, fl in base.candidates:  # the core's selection by count, replayed
            if jid in hosts:
                continue
            g = by_id[jid].spec.num_gpus
            if count.get(fl, 0) >= g:
                count[fl] -= g
                hosts[jid] = fl
            elif jid not in seen:
                waiting.append(jid)
            seen.add(jid)
        waiting = [j for j in dict.fromkeys(waiting) if j not in hosts]
        if not hosts or not waiting:
            return base
        tau: dict[JobId, float] = {}
        best: dict[JobId, float] = {}

        def weigh(j: JobView) -> tuple[float, float]:
            jid = j.job_id
            if jid not in tau:
                rates = ctx.oracle.rates(j.spec)
                top = max((r.consolidated for r in rates), default=0.0)
                best[jid] = top
                tau[jid] = self._remaining_best_s(j, top, now) if top > 0 else float("inf")
            return tau[jid], best[jid]

        # Hosts that are alike (type, gang, flavor, allowed flavors, memory) pair alike: a
        # waiting job is weighed against each class once, which keeps a round linear in the
        # number of waiting jobs. Within a class the host with the most work left goes first
        # (the one a slowdown costs least).
        classes: dict[_HostKind, list[JobId]] = {}
        for hid, fl in hosts.items():
            hs = by_id[hid].spec
            if hs.exclusive:
                continue
            kind = (hs.job_type, hs.num_gpus, fl, hs.flavors, hs.extra.get(MEMORY_KEY))
            classes.setdefault(kind, []).append(hid)
        for members in classes.values():
            members.sort(key=lambda hid: weigh(by_id[hid])[0])  # pop() takes the longest
        partner_of: dict[JobId, JobId] = {}
        # Plain normalised throughput depends on the jobs' kinds only: each kind of waiting job
        # ranks the host classes once, and each such job takes the best class with a host left.
        ranked: dict[tuple[object, ...], list[_HostKind]] = {}
        for pid in waiting[: cfg.scan_factor * len(hosts)]:
            p = by_id[pid]
            if p.spec.exclusive:
                continue
            if cfg.by_remaining:
                choice = self._by_remaining(ctx, p, classes, by_id, weigh)
            else:
                ps = p.spec
                pkind = (ps.job_type, ps.num_gpus, ps.flavors, ps.extra.get(MEMORY_KEY))
                options = ranked.get(pkind)
                if options is None:
                    options = ranked[pkind] = self._ranked_classes(ctx, p, classes, by_id)
                choice = next((key for key in options if classes[key]), None)
            if choice is not None:
                partner_of[pid] = classes[choice].pop()
        if not partner_of:
            return base
        cands = tuple(c for c in base.candidates if c[0] not in partner_of)
        return Ranking(cands, state=base.state, notes=base.notes, wakeup_s=base.wakeup_s,
                       fallbacks=base.fallbacks, colocate=partner_of)

    def _ranked_classes(self, ctx: PolicyContext, p: JobView,
                        classes: dict[_HostKind, list[JobId]], by_id: dict[JobId, JobView],
                        ) -> list[_HostKind]:
        """The host classes ``p`` may join, best normalised throughput first (ties: the first
        class), keeping those above ``1 + min_gain``."""
        cfg = self.config
        assert isinstance(cfg, HeteroPackConfig)
        if max((r.consolidated for r in ctx.oracle.rates(p.spec)), default=0.0) <= 0:
            return []
        scored: list[tuple[float, int, _HostKind]] = []
        for i, (key, h, fl, rates) in enumerate(self._pairable(ctx, p, classes, by_id)):
            best_h = max((r.consolidated for r in ctx.oracle.rates(h.spec)), default=0.0)
            alone_h = ctx.oracle.rate(h.spec, fl, True)
            alone_p = ctx.oracle.rate(p.spec, fl, True)
            if best_h <= 0 or alone_h <= 0 or alone_p <= 0:
                continue
            gain = rates.first_steps_per_s / alone_h + rates.second_steps_per_s / alone_p - 1.0
            if gain > cfg.min_gain:
                scored.append((-gain, i, key))
        scored.sort()
        return [key for _g, _i, key in scored]

    def _by_remaining(self, ctx: PolicyContext, p: JobView,
                      classes: dict[_HostKind, list[JobId]], by_id: dict[JobId, JobView],
                      weigh: Callable[[JobView], tuple[float, float]]) -> _HostKind | None:
        """The host class where ``p`` raises the round's expected completion rate most
        (``by_remaining``, see the module docstring), or ``None``."""
        cfg = self.config
        assert isinstance(cfg, HeteroPackConfig)
        tau_p, best_p = weigh(p)
        if best_p <= 0:
            return None
        choice: _HostKind | None = None
        top_gain = 0.0
        for key, h, _fl, rates in self._pairable(ctx, p, classes, by_id):
            tau_h, best_h = weigh(h)
            alone_h = ctx.oracle.rate(h.spec, key[2], True)
            if best_h <= 0 or alone_h <= 0:
                continue
            own = (alone_h / best_h) / tau_h
            gain = (rates.second_steps_per_s / best_p) / tau_p - (
                (alone_h - rates.first_steps_per_s) / best_h) / tau_h
            if gain > cfg.min_gain * own and gain > top_gain:
                choice, top_gain = key, gain
        return choice

    def _pairable(self, ctx: PolicyContext, p: JobView,
                  classes: dict[_HostKind, list[JobId]], by_id: dict[JobId, JobView],
                  ) -> Iterator[tuple[_HostKind, JobView, str, PairRates]]:
        """Each non-empty host class of ``p``'s gang size whose pair with ``p`` is measured
        and allowed: ``(class, its representative host, flavor, the pair's rates)``, in the
        classes' order."""
        for key, members in classes.items():
            if not members or key[1] != p.spec.num_gpus:
                continue
            h = by_id[members[-1]]
            rates = self._pair(ctx.oracle.table, ctx.snapshot.cluster, h.spec, p.spec, key[2])
            if rates is not None:
                yield key, h, key[2], rates

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
