"""The decision core's view of speed: per job, which flavors it can use and how fast.

Policies never read profiles; they ask a :class:`ThroughputOracle`, which asks
:mod:`tessera.perf` once per (job type, gang size) and caches the answer.

An oracle is either **heterogeneity-aware** (policies see each flavor's real speed) or
**agnostic** (policies see every usable flavor as running at the reference flavor's speed, as
Gavel's un-suffixed baselines do). The simulator always advances jobs at their real speed, so an
agnostic policy pays for its blindness.

A job that asks for a 3-D plan (``JobSpec.parallelism``, :mod:`tessera.sched.core.plans`) is not
priced from the throughput table: its speed on a gang is the planner's plan for that gang, one
optimizer step per predicted step time, cached in :attr:`ThroughputOracle.plans` -- the cache
the live service takes each rank's role from when it launches the gang the scheduler chose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.errors import NoProfileError
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec, ThreeDParallel
from tessera.perf.profiles import ThroughputTable
from tessera.perf.steptime import CostModel
from tessera.sched.core.plans import ThreeDPlans
from tessera.sched.core.snapshot import Placement
from tessera.sched.mixed.rates import MixedRates

RateKey = tuple[str, int, tuple[GpuFlavor, ...], ThreeDParallel | None]
"""What a job's per-flavor rates depend on: job type, gang size, allowed flavors, parallelism."""


_UNKNOWN = object()
"""A cache miss (``None`` is a cached answer)."""


def rate_key(job: JobSpec) -> RateKey:
    """The key under which jobs share per-flavor rates (a 3-D job never shares with a
    data-parallel one of the same type, nor with one of another model or batch)."""
    return job.job_type, job.num_gpus, job.flavors, job.parallelism


@dataclass(frozen=True, slots=True)
class FlavorRate:
    """Steps/s of one job on one flavor, on one node and split across nodes.

    For a gang larger than every node of the flavor, ``consolidated`` is the split speed too:
    it can never sit on one node.
    """

    flavor: GpuFlavor
    consolidated: float
    spread: float


class ThroughputOracle:
    """Cached throughput answers for the jobs of one workload on one cluster."""

    #: Whether the policy-visible rates differ between jobs of one :func:`rate_key` and change
    #: as jobs run (learned speeds, :mod:`tessera.sched.core.learned`): caches per job kind
    #: must not hold them.
    per_job_rates: bool = False

    def __init__(
        self,
        table: ThroughputTable,
        cluster: ClusterSpec,
        agnostic: bool = False,
        unprofiled_uniform: bool = False,
        split_large_gangs: bool = True,
        cost_model: CostModel | None = None,
        truth: ThroughputOracle | None = None,
        plans: ThreeDPlans | None = None,
    ) -> None:
        """Args:
            table: measured throughputs.
            cluster: the inventory (which flavors exist).
            agnostic: hide speed differences from policies.
            unprofiled_uniform: a job type with no measurement on any allowed flavor runs at
                rate 1.0 everywhere it is allowed (the live service's jobs are arbitrary
                commands); otherwise such a job cannot be placed.
            split_large_gangs: a gang larger than every node of a flavor runs at the split
                speed even when asked for the consolidated one, and a flavor where the split
                speed was never measured cannot run the gang at all. Off for Gavel
                compatibility, where every gang runs at its consolidated speed: there a
                flavor with a consolidated measurement is runnable even if the split one is
                missing (Gavel's ``_throughputs`` never read ``*_unconsolidated``).
            cost_model: the planner's cost model, used to predict mixed gangs of jobs that
                name a profiled model; ``None``: the oracle makes its own over the bundled Sia
                profiles when it first needs one.
            truth: an oracle over the same table and cluster whose true rates this one shares
                (how :meth:`as_agnostic` builds its twin).
            plans: the 3-D plan cache to price 3-D jobs with (shared with the twin and with
                the live service's launches); ``None``: this oracle's own.
        """
        self.table = table
        self._cluster = cluster
        self._truth = truth
        self.agnostic = agnostic
        self.unprofiled_uniform = unprofiled_uniform
        self.split_large_gangs = split_large_gangs
        self.cluster_flavors = tuple(cluster.flavors())
        self._max_node = {f: cluster.max_gpus_per_node(f) for f in cluster.flavors()}
        self._reference = table.reference_flavor
        self._cache: dict[tuple[str, int, tuple[GpuFlavor, ...]], tuple[FlavorRate, ...]] = {}
        self._view: dict[tuple[object, ...], tuple[FlavorRate, ...]] = {}
        self._types: frozenset[str] | None = None
        self._twin: ThroughputOracle | None = None
        self._upgrades: dict[tuple[tuple[object, ...], GpuFlavor, bool],
                             tuple[GpuFlavor, float, float] | None] = {}
        self._fastest_first: dict[tuple[object, ...], tuple[GpuFlavor, ...]] = {}
        self._cost_model = cost_model
        self._mixed: MixedRates | None = None
        self.plans: ThreeDPlans = plans if plans is not None else (
            truth.plans if truth is not None else ThreeDPlans())
        self._plan_rates: dict[tuple[int, tuple[GpuFlavor, ...], ThreeDParallel],
                               tuple[tuple[FlavorRate, ...], str]] = {}
        self._measured: dict[str, dict[GpuFlavor, float]] = {}

    @property
    def cluster(self) -> ClusterSpec:
        """The inventory this oracle answers for."""
        return self._cluster

    def set_measured(self, job_id: str, rates: dict[GpuFlavor, float] | None) -> None:
        """Overlay measured steps/s of one job (the live service's progress reports) on its
        prior, or drop the overlay (``None``); see :meth:`real_rates`."""
        truth = self._truth if self._truth is not None else self
        if rates:
            truth._measured[job_id] = dict(rates)
        else:
            truth._measured.pop(job_id, None)
        for o in (truth, truth._twin):
            if o is not None:
                o._view.clear()
                o._fastest_first.clear()
                o._upgrades.clear()

    def key(self, job: JobSpec) -> tuple[object, ...]:
        """The key under which ``job`` shares rates with others (:func:`rate_key`), its own id
        added when it has measured rates (those are its alone)."""
        truth = self._truth if self._truth is not None else self
        if job.job_id in truth._measured:
            return (*rate_key(job), job.job_id)
        return rate_key(job)

    def real_rates(self, job: JobSpec) -> tuple[FlavorRate, ...]:
        """True rates on every allowed cluster flavor where the job can run (rate > 0).

        Order: the job's own preference order when it gives one, else the cluster's order.
        A job with measured rates (:meth:`set_measured`) runs at them on the flavors it was
        measured on, and elsewhere at its prior scaled by the geometric mean of
        measured/prior over the measured flavors: the prior's ratios between flavors, the
        measurements' level.
        """
        if self._truth is not None:
            return self._truth.real_rates(job)
        measured = self._measured.get(job.job_id) if self._measured else None
        prior = self.prior_rates(job)
        return prior if measured is None else with_measured(prior, measured)

    def prior_rates(self, job: JobSpec) -> tuple[FlavorRate, ...]:
        if job.parallelism is not None:
            return self._planned_rates(job)[0]
        key = (job.job_type, job.num_gpus, job.flavors)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        allowed = self.cluster_flavors
        if job.flavors:
            allowed = tuple(f for f in job.flavors if f in self.cluster_flavors)
        out = []
        for f in allowed:
            try:
                c = self.table.throughput(job.job_type, f, job.num_gpus, True)
            except NoProfileError:
                continue
            try:
                s = self.table.throughput(job.job_type, f, job.num_gpus, False)
            except NoProfileError:
                if self.split_large_gangs:
                    continue  # a gang we may have to split, with no split speed: cannot run
                s = 0.0  # consolidated always (Gavel): the split speed is never needed
            if c > 0:
                spread = s if s > 0 else c
                # A gang larger than any node of this flavor is always split.
                if self.split_large_gangs and job.num_gpus > self._max_node.get(f, 0):
                    c = spread
                out.append(FlavorRate(f, c, spread))
        if not out and self.unprofiled_uniform and job.job_type not in self._known_types():
            out = [FlavorRate(f, 1.0, 1.0) for f in allowed]
        rates = tuple(out)
        self._cache[key] = rates
        return rates

    def _allowed(self, job: JobSpec) -> tuple[GpuFlavor, ...]:
        if not job.flavors:
            return self.cluster_flavors
        return tuple(f for f in job.flavors if f in self.cluster_flavors)

    def _planned_rates(self, job: JobSpec) -> tuple[tuple[FlavorRate, ...], str]:
        """A 3-D job's rates per flavor from its plans, and the planner's messages for the
        flavors no plan fits. Consolidated: the gang on one server when one holds it, else on
        full servers; spread: split over two servers (full servers for a larger gang)."""
        p3 = job.parallelism
        assert p3 is not None
        key = (job.num_gpus, job.flavors, p3)
        hit = self._plan_rates.get(key)
        if hit is not None:
            return hit
        g = job.num_gpus
        out: list[FlavorRate] = []
        why: list[str] = []
        for f in self._allowed(job):
            per_node = max(1, self._max_node.get(f, 0))
            whole = [min(per_node, g - k) for k in range(0, g, per_node)]
            halves = [g - g // 2, g // 2] if 2 <= g <= per_node else whole
            c, s = (self.plans.steps_per_s(p3, _parts_of(f, sizes)) for sizes in (whole, halves))
            if c > 0 or s > 0:
                out.append(FlavorRate(f, c if c > 0 else s, s if s > 0 else c))
            else:
                why.append(self.plans.why_not(p3, _parts_of(f, whole)) or "")
        answer = (tuple(out), "; ".join(why) if why else "no allowed flavor on this cluster")
        self._plan_rates[key] = answer
        return answer

    def cannot_run_reason(self, job: JobSpec) -> str | None:
        """Why ``job`` can run on no allowed flavor (``None`` if it can run somewhere)."""
        if self.real_rates(job):
            return None
        if job.parallelism is not None:
            oracle = self._truth if self._truth is not None else self
            return oracle._planned_rates(job)[1]
        return "no allowed flavor can run this job"

    def as_agnostic(self) -> ThroughputOracle:
        """The heterogeneity-agnostic twin (same table and cluster), created once.

        The twin shares this oracle's true rates (and their cache) and keeps its own caches of
        what an agnostic policy sees."""
        if self.agnostic:
            return self
        if self._twin is None:
            self._twin = ThroughputOracle(
                self.table, self._cluster, agnostic=True,
                unprofiled_uniform=self.unprofiled_uniform,
                split_large_gangs=self.split_large_gangs, cost_model=self._cost_model,
                truth=self, plans=self.plans)
        return self._twin

    def _known_types(self) -> frozenset[str]:
        if self._types is None:
            self._types = frozenset(self.table.job_types())
        return self._types

    def rates(self, job: JobSpec) -> tuple[FlavorRate, ...]:
        """What a policy sees: real rates (aware) or reference-speed rates (agnostic)."""
        real = self.real_rates(job)
        if not self.agnostic:
            return real
        key = self.key(job)
        hit = self._view.get(key)
        if hit is not None:
            return hit
        ref = next((r for r in real if r.flavor == self._reference), None)
        if ref is None and job.parallelism is not None:
            c = max((r.consolidated for r in real), default=0.0)
            ref = FlavorRate(self._reference, c, c)
        if ref is None:
            try:
                c = self.table.throughput(job.job_type, self._reference, job.num_gpus, True)
            except NoProfileError:
                c = max((r.consolidated for r in real), default=0.0)
            ref = FlavorRate(self._reference, c, c)
        view = tuple(FlavorRate(r.flavor, ref.consolidated, ref.consolidated) for r in real)
        self._view[key] = view
        return view

    def fastest_first(self, job: JobSpec) -> tuple[GpuFlavor, ...]:
        """The job's usable flavors, fastest first as a policy sees them (cached per rate key:
        event-driven policies ask for every job they rank, at every event).

        Aware oracles order by real speed; agnostic ones see equal speeds, so the order falls
        back to the order of :meth:`rates` (the job's own preference, or the cluster's), which
        the sort keeps stable.
        """
        key = self.key(job)
        hit = self._fastest_first.get(key)
        if hit is None:
            hit = tuple(r.flavor for r in sorted(self.rates(job), key=lambda r: -r.consolidated))
            self._fastest_first[key] = hit
        return hit

    def faster_than(
        self, job: JobSpec, flavor: GpuFlavor, consolidated: bool
    ) -> tuple[GpuFlavor, float, float] | None:
        """``(fastest flavor, its rate, current rate)`` when ``job`` would run faster on
        another flavor than on ``flavor``, else ``None`` (cached; the policy's view)."""
        key = (self.key(job), flavor, consolidated)
        hit = self._upgrades.get(key, _UNKNOWN)
        if hit is not _UNKNOWN:
            return hit  # type: ignore[return-value]
        rates = self.rates(job)
        current = next((r for r in rates if r.flavor == flavor), None)
        answer: tuple[GpuFlavor, float, float] | None = None
        if current is not None and rates:
            cur = current.consolidated if consolidated else current.spread
            best = max(rates, key=lambda r: r.consolidated)
            if best.flavor != flavor and best.consolidated > cur > 0:
                answer = (best.flavor, best.consolidated, cur)
        self._upgrades[key] = answer
        return answer

    def best_rate(self, job: JobSpec) -> float:
        """The policy-visible rate on the job's fastest flavor (0 if it can run nowhere)."""
        return max((r.consolidated for r in self.rates(job)), default=0.0)

    def rate(self, job: JobSpec, flavor: GpuFlavor, consolidated: bool) -> float:
        """True steps/s of ``job`` on ``flavor`` (0.0 if it cannot run there)."""
        for r in self.real_rates(job):
            if r.flavor == flavor:
                return r.consolidated if consolidated else r.spread
        return 0.0

    def _mixed_rates(self) -> MixedRates:
        if self._mixed is None:
            if self.agnostic:
                # Blind to speed differences: every flavor of the mix at the reference speed.
                self._mixed = MixedRates(self._view_spread_rate)
            else:
                cm = self._cost_model
                if cm is None:  # this oracle's own, never a process-wide one
                    cm = self._cost_model = CostModel()
                self._mixed = MixedRates(lambda job, f: self.rate(job, f, False), cm,
                                         plans=self.plans)
        return self._mixed

    def _view_spread_rate(self, job: JobSpec, flavor: GpuFlavor) -> float:
        for r in self.rates(job):
            if r.flavor == flavor:
                return r.spread
        return 0.0

    def mixed_rate(self, job: JobSpec, mix: tuple[tuple[GpuFlavor, int], ...]) -> float:
        """Steps/s of ``job`` on a mixed gang with ``mix`` GPUs per flavor (the policy's view:
        true speeds when aware, reference speeds when agnostic); see
        :mod:`tessera.sched.mixed.rates`.
        """
        return self._mixed_rates().rate(job, mix)

    def placement_rate(self, job: JobSpec, placement: Placement) -> float:
        """Steps/s of ``job`` on ``placement``, homogeneous or mixed (the policy's view); a
        CPU-only job's own ``cpu_steps_per_s`` wherever it runs (no GPU flavor in it)."""
        if job.cpu_steps_per_s is not None:
            return job.cpu_steps_per_s
        if placement.is_mixed:
            if job.parallelism is not None:
                return self._mixed_rates().predict(job, placement.flavor_counts(),
                                                   placement.parts()).steps_per_s
            return self.mixed_rate(job, placement.flavor_counts())
        if job.parallelism is not None and not self.agnostic:
            return self.plans.steps_per_s(job.parallelism, placement.parts())
        if self.agnostic:
            for r in self.rates(job):
                if r.flavor == placement.flavor:
                    return r.consolidated if placement.consolidated else r.spread
            return 0.0
        return self.rate(job, placement.flavor, placement.consolidated)


def with_measured(prior: tuple[FlavorRate, ...],
                  measured: dict[GpuFlavor, float]) -> tuple[FlavorRate, ...]:
    """``prior`` with measured steps/s where there are some (see
    :meth:`ThroughputOracle.real_rates`); a flavor's spread speed keeps its prior ratio to the
    consolidated one."""
    ratios = [measured[r.flavor] / r.consolidated for r in prior
              if r.flavor in measured and r.consolidated > 0 and measured[r.flavor] > 0]
    # one ratio exactly (a flavor measured at x runs where the prior saw it at par: a tie)
    level = (ratios[0] if len(ratios) == 1 else
             math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0)
    out = []
    for r in prior:
        m = measured.get(r.flavor)
        scale = m / r.consolidated if m is not None and m > 0 and r.consolidated > 0 else level
        out.append(FlavorRate(r.flavor, r.consolidated * scale, r.spread * scale))
    return tuple(out)


def _parts_of(flavor: GpuFlavor, sizes: list[int]) -> tuple[tuple[str, int, GpuFlavor], ...]:
    """A gang of one flavor on servers of ``sizes`` GPUs (node ids for the rank layout only)."""
    return tuple((f"{flavor}-{k}", n, flavor) for k, n in enumerate(sizes))
