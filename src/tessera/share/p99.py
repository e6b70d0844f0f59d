"""Plans that meet p99 under the arrivals they will see, checked by the serving simulation.

The packing planner (:mod:`~tessera.share.packing`) finds the fewest GPUs under a *proxy*: a
segment's profiled batch latency within a fraction of the SLO, and profiled throughput at least
the rate. Queueing is not in that model, so the fewest GPUs can miss an SLO at p99 (ParvaGPU's
scenario 3: resnet101 at 100 % load queues without bound). This module closes the loop:

1. plan with the proxy;
2. replay the arrival process (:class:`ArrivalModel`: Poisson by default, or a trace's shape)
   against the plan with the same simulation that reports attainment
   (:func:`~tessera.share.serving_sim.simulate`);
3. every service whose p99 exceeds its SLO, or whose attainment is below the target, gets a
   tighter *per-service* rule -- first more capacity headroom (lower utilisation), then, once
   the headroom is large, a smaller latency budget (smaller batches) -- and the plan is redone;
4. repeat until every service passes or the rounds run out (then the result says which fail).

The simulation wins over the proxy: a service is only "met" when the replay says so. A per-service
rule is expressed by planning an *adjusted* service (rate ÷ its utilisation, SLO scaled so the
global fraction gives its budget); the plan handed back carries the original services.

The claim a result makes (:func:`p99_claim`) says what it is the fewest under: the proxy model
with the per-service budgets found here, each service verified at p99 by the seeded simulation.
It is not a proof that no smaller plan meets p99 in the simulation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from tessera.errors import SpecError
from tessera.share.mig import MigGpu
from tessera.share.packing import lp_lower_bound, plan_services
from tessera.share.plan import SharePlan
from tessera.share.profiles import BatchingRule, ProfileTable, Service
from tessera.share.segments import SloUnreachableError, all_options, slice_lower_bound
from tessera.share.serving_sim import RequestStream, ServiceOutcome, SimResult, simulate

DEFAULT_REQUESTS = 50_000
"""Requests per service in the check: p99 is then the 500th slowest, stable to a few percent
across seeds (``benchmarks/bench_share_p99.py`` shows the spread)."""

_UTIL_STEP = 0.92  # each failing round keeps 92 % of the service's utilisation cap
_UTIL_FLOOR = 0.5
_FRACTION_STEP = 0.85
_FRACTION_FROM_UTIL = 0.75  # below this utilisation, also shrink the batch budget


class InfeasibleError(SpecError):
    """No plan within the GPUs allowed can carry the services (``infeasible: needs N ...``)."""


@dataclass(frozen=True, slots=True, eq=False)
class ArrivalModel:
    """The arrival process a plan is checked under: ``poisson`` or a trace's inter-arrivals.

    Every service gets exactly ``requests_per_service`` requests (so p99 rests on the same
    number of samples whatever the rate). With ``trace_times_s`` the trace's inter-arrival
    gaps, scaled so their mean is ``1 / rate``, are replayed from a seeded offset (cyclically).
    """

    kind: str = "poisson"
    requests_per_service: int = DEFAULT_REQUESTS
    seed: int = 0
    trace_times_s: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.requests_per_service < 100:
            raise SpecError(
                f"requests_per_service must be >= 100 for a p99, got {self.requests_per_service}"
            )
        if self.kind != "poisson" and self.trace_times_s is None:
            raise SpecError(f"arrival model {self.kind!r} needs trace times")

    def describe(self) -> str:
        return (f"{self.kind} arrivals, {self.requests_per_service:,} requests per service, "
                f"seed {self.seed}")

    def streams(self, services: tuple[Service, ...]) -> tuple[RequestStream, ...]:
        """One stream per service, deterministic in (services, seed)."""
        rng = np.random.default_rng(self.seed)
        n = self.requests_per_service
        gaps_all = None
        if self.trace_times_s is not None:
            gaps_all = np.diff(self.trace_times_s)
            mean = float(gaps_all.mean()) if len(gaps_all) else 0.0
            if mean <= 0:
                raise SpecError("the trace has no time spread")
            gaps_all = gaps_all / mean
        out = []
        for s in services:
            if gaps_all is None:
                gaps = rng.exponential(1.0, n)
            else:
                start = int(rng.integers(len(gaps_all)))
                gaps = gaps_all[(start + np.arange(n)) % len(gaps_all)]
            out.append(RequestStream(s.name, np.cumsum(gaps) / s.rate_rps))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Knobs:
    """The per-service rule the loop settled on."""

    latency_fraction: float
    max_utilization: float


class Checked:
    """What a plan checked by the serving simulation answers: the services that missed.

    Shared by :class:`P99Plan` and :class:`~tessera.share.p99_replan.P99Replan`; a subclass
    has ``sim`` (the replay) and ``target`` (the attainment each service had to reach)."""

    __slots__ = ()
    sim: SimResult
    target: float

    def failing(self) -> tuple[ServiceOutcome, ...]:
        """The services whose p99 or attainment missed in the replay."""
        return tuple(o for o in self.sim.services if not meets(o, self.target))

    @property
    def meets(self) -> bool:
        """Whether every service met its SLO at p99 and the target."""
        return not self.failing()


@dataclass(frozen=True, slots=True)
class P99Plan(Checked):
    """A plan checked at p99, with the evidence.

    Attributes:
        plan: the plan (its ``services`` are the user's, unadjusted).
        sim: the simulation of the final plan under ``arrivals``.
        proxy_gpus: GPUs of the proxy-only plan (round 1).
        rounds: plan-and-simulate rounds run.
        knobs: the per-service rule of the final plan.
        target: the attainment each service had to reach.
        arrivals: the arrival model of the check.
    """

    plan: SharePlan
    sim: SimResult
    proxy_gpus: int
    rounds: int
    knobs: dict[str, Knobs]
    target: float
    arrivals: ArrivalModel
    solve_s: float


def meets(o: ServiceOutcome, target: float) -> bool:
    """A service passes when its p99 is within its SLO and its attainment reaches the target."""
    return o.meets_slo and o.attainment >= target - 1e-12


def _adjusted(svc: Service, k: Knobs, rule: BatchingRule) -> Service:
    return Service(
        svc.name, svc.model, svc.rate_rps * rule.max_utilization / k.max_utilization,
        svc.slo_ms * k.latency_fraction / rule.latency_fraction,
    )


def check_feasible(
    services: tuple[Service, ...], table: ProfileTable, gpu: MigGpu, rule: BatchingRule,
    max_gpus: int | None,
) -> int:
    """The proxy's lower bound on GPUs; raise ``infeasible: needs N GPUs at least`` when it
    exceeds ``max_gpus``. Also raises on an SLO below the best batch-1 latency and on a model
    without profiles (from :func:`~tessera.share.segments.all_options`)."""
    options = all_options(services, table, gpu, rule)
    bound = slice_lower_bound(options)
    if max_gpus is not None and bound > max_gpus:
        raise InfeasibleError(
            f"infeasible: needs {bound} GPUs at least ({gpu.gpu}), {max_gpus} allowed"
        )
    if max_gpus is not None:
        lp = lp_lower_bound(services, table, gpu, rule)
        if lp > max_gpus:
            raise InfeasibleError(
                f"infeasible: needs {lp} GPUs at least ({gpu.gpu}), {max_gpus} allowed"
            )
        bound = max(bound, lp)
    return bound


def plan_for_p99(
    services: tuple[Service, ...],
    table: ProfileTable,
    gpu: MigGpu,
    rule: BatchingRule,
    *,
    arrivals: ArrivalModel | None = None,
    target: float = 0.99,
    method: str = "auto",
    time_limit_s: float = 60.0,
    r510: bool = True,
    max_rounds: int = 12,
    max_gpus: int | None = None,
    batching: str = "greedy",
    util_floor: float = _UTIL_FLOOR,
) -> P99Plan:
    """The fewest-GPU proxy plan whose services all meet p99 and ``target`` in the simulation.

    Raises :class:`InfeasibleError` when even the proxy needs more than ``max_gpus``. When the
    rounds run out, or a tightened plan would exceed ``max_gpus``, the last plan is returned
    with its failing services (:meth:`P99Plan.failing`), never silently. ``util_floor``: the
    lowest utilisation cap the loop may give a service (bursty arrivals may need less than the
    default 0.5; give more ``max_rounds`` with it).
    """
    if not 0 < target <= 1:
        raise SpecError(f"target attainment must be in (0, 1], got {target}")
    t0 = time.perf_counter()
    arrivals = arrivals or ArrivalModel()
    check_feasible(services, table, gpu, rule, max_gpus)
    streams = arrivals.streams(services)
    knobs = {s.name: Knobs(rule.latency_fraction, rule.max_utilization) for s in services}
    proxy_gpus = 0
    best: tuple[SharePlan, SimResult, dict[str, Knobs], int] | None = None
    for rnd in range(1, max_rounds + 1):
        planned = tuple(_adjusted(s, knobs[s.name], rule) for s in services)
        plan = plan_services(planned, table, gpu, rule, method=method,
                             time_limit_s=time_limit_s, r510=r510)
        plan = replace(plan, services=services)
        if rnd == 1:
            proxy_gpus = plan.gpus_used
        if max_gpus is not None and plan.gpus_used > max_gpus:
            break
        sim = simulate(plan, streams, table, seed=arrivals.seed, batching=batching)
        best = (plan, sim, dict(knobs), rnd)
        bad = [o for o in sim.services if not meets(o, target)]
        if not bad:
            break
        by_name = {s.name: s for s in services}
        for o in bad:
            knobs[o.service] = _tighten(by_name[o.service], knobs[o.service], table, gpu, rule,
                                        util_floor)
    assert best is not None  # round 1 always simulates: check_feasible bounds max_gpus
    plan, sim, final, rounds = best
    return P99Plan(plan, sim, proxy_gpus, rounds, final, target, arrivals,
                   time.perf_counter() - t0)


def _tighten(svc: Service, k: Knobs, table: ProfileTable, gpu: MigGpu,
             rule: BatchingRule, util_floor: float = _UTIL_FLOOR) -> Knobs:
    """One step tighter: more headroom; below 75 % utilisation also a smaller batch budget
    (kept only if some configuration still fits it)."""
    util = max(util_floor, k.max_utilization * _UTIL_STEP)
    frac = k.latency_fraction
    if util < _FRACTION_FROM_UTIL or util == k.max_utilization:
        smaller = Knobs(frac * _FRACTION_STEP, util)
        try:
            all_options((_adjusted(svc, smaller, rule),), table, gpu, rule)
            frac = smaller.latency_fraction
        except SloUnreachableError:
            pass
    return Knobs(frac, util)


def p99_claim(result: P99Plan) -> str:
    """Under which model the plan's GPU count is the fewest, in words."""
    checked = (f"checked by the serving simulation ({result.arrivals.describe()}): every "
               f"service p99 <= SLO and >= {result.target * 100:g} % of requests on time")
    if result.plan.gpus_used == result.proxy_gpus:
        proved = "proved" if result.plan.optimal else "not proved"
        return f"fewest GPUs under the profile model ({proved} by the solver), {checked}"
    return (f"fewest GPUs under the profile model with per-service headroom/batch budgets "
            f"tightened until the simulation passed ({result.proxy_gpus} GPUs under the plain "
            f"profile model missed p99); {checked}; not proved fewest under the simulation")


def p99_verdict(result: P99Plan) -> str:
    """The line printed *before* a plan: which services miss p99, if any."""
    bad = result.failing()
    if not bad:
        return (f"every service meets its SLO at p99 in the simulation "
                f"({result.rounds} round(s))")
    names = ", ".join(f"{o.service} p99 {o.p99_ms:.1f} ms / SLO {o.slo_ms:g} ms "
                      f"({o.attainment * 100:.2f} %)" for o in bad)
    return (f"WARNING: {len(bad)} service(s) missed the SLO in the replay (p99 or attainment "
            f"target): {names}")
