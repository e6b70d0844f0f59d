"""How fast a *mixed* gang runs: one job given GPUs of several flavors (Sia/Cannikin style).

A gang of N GPUs that are not all alike trains data-parallel with an uneven split of its global
batch: each GPU takes a local batch in proportion to its speed, so that none waits for a
straggler (:mod:`tessera.plan.dp`). The scheduler needs one number for such a gang -- its speed
in the job's own unit, training steps per second -- and it asks the planner for it. Two ways,
depending on what is known about the job:

**From the job's own per-flavor speeds** (every job the oracle can place). A homogeneous gang of
N GPUs of flavor f runs ``r_f(N)`` steps/s split across servers (a mixed gang always spans
servers: one flavor per server), so each of its GPUs processes ``bs · r_f(N)`` samples/s at
local batch ``bs``. The planner splits the global batch ``N · bs`` over the mixed GPUs with
these per-sample costs (α = 0: the measured rate already contains the fixed costs and the
gang's all-reduce), and the gang's speed is ``1 / step time``. With integer local batches this
sits just under the sum-of-throughputs bound ``Σ_f n_f · r_f(N) / N``; for a homogeneous "mix"
it is exactly ``r_f(N)``.

**From the planner's cost model** (jobs that name a model the Sia/Pollux profiles cover, in
``JobSpec.model``, on flavors those profiles cover). The
planner plans the gang with fitted ``t(b) = α + β·b`` step times, memory caps and the ring
all-reduce, dropping GPUs that would slow it. Its prediction is a ratio against the same plan
on N GPUs of the *anchor* flavor (the flavor of the mix with most GPUs, fastest on ties), and
the ratio scales the job's measured anchor speed: ``rate = r_anchor(N) · P(mix) / P(N·anchor)``.
The answer therefore agrees with the homogeneous speeds wherever both exist, and adds what only
the cost model knows (fixed costs, the all-reduce, devices not worth using). Where the cost
model's relative speeds disagree with the measured ones, the answer is capped at the
sum-of-throughputs bound of the measured speeds: a mix is never faster than its parts.

**From the job's 3-D plan** (a job with ``JobSpec.parallelism``, aware oracles only). Such a
job does not train data parallel at all: its gang runs ``tessera plan``'s tensor × pipeline ×
data plan, so its speed is one optimizer step per predicted step time of the plan for exactly
these GPUs on these servers -- the plan object the live service later takes each rank's role
from (:class:`~tessera.sched.core.plans.ThreeDPlans`, which caches it). A gang no plan fits runs it
at 0 (it is not placed there), with the planner's message as the source.

:class:`MixedRates` caches the first two by (job type, gang size, mix); 3-D plans are cached
by the plan cache.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from tessera.errors import NoProfileError, SpecError
from tessera.model.cluster import make_nodes
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobSpec
from tessera.perf.steptime import CostModel, DeviceCost
from tessera.plan.dp import DpDevice, split_batch
from tessera.sched.core.plans import ThreeDPlans

Mix = tuple[tuple[GpuFlavor, int], ...]
"""``((flavor, GPUs), ...)`` sorted by the flavors' short names."""

SpreadRate = Callable[[JobSpec, GpuFlavor], float]
"""Steps/s of a job's whole gang on one flavor, split across servers (0 if it cannot run)."""

_BATCH_RE = re.compile(r"\(batch size (\d+)\)")
_DEFAULT_LOCAL_BATCH = 32


@dataclass(frozen=True, slots=True)
class MixedPrediction:
    """A mixed gang's speed and how it was obtained.

    Attributes:
        steps_per_s: the gang's training steps per second.
        bound_steps_per_s: the sum-of-throughputs bound ``Σ_f n_f · r_f(N) / N``.
        source: ``"per-flavor speeds"`` or ``"planner cost model (<model>)"``.
    """

    steps_per_s: float
    bound_steps_per_s: float
    source: str


def local_batch_of(job: JobSpec) -> int:
    """Samples per GPU per step: the job type's ``(batch size N)``, else 32 (a granularity)."""
    m = _BATCH_RE.search(job.job_type)
    return int(m.group(1)) if m else _DEFAULT_LOCAL_BATCH


def planner_model(job: JobSpec, cost_model: CostModel) -> str | None:
    """The planner model a job names, if the cost model knows it."""
    name = job.model
    return name if name and name in cost_model.models() else None


def _split_step_s(costs: list[DeviceCost], global_bsz: int, grad_bytes: float,
                  node_gpus: list[int]) -> float:
    """The planner's step time for ``costs`` laid out as ``node_gpus`` GPUs per server."""
    devices: list[DpDevice] = []
    i = 0
    for k, n_gpus in enumerate(node_gpus):
        node = make_nodes(costs[i].flavor, 1, n_gpus, start=k)[0]
        devices += [DpDevice(c, node) for c in costs[i:i + n_gpus]]
        i += n_gpus
    return split_batch(devices, global_bsz, grad_bytes).step_time_s


class MixedRates:
    """Predicted speeds of mixed gangs (see the module docstring), cached.

    Args:
        spread_rate: the job's homogeneous speed per flavor (split across servers).
        cost_model: the planner's cost model; ``None`` uses per-flavor speeds only.
        gpus_per_node: server size used to lay a mix out for the cost model (and for a 3-D
            plan when no placement is given).
        plans: the 3-D plan cache that prices jobs with ``JobSpec.parallelism``; ``None``
            prices them like data-parallel jobs (what a heterogeneity-agnostic view sees).
    """

    def __init__(self, spread_rate: SpreadRate,
                 cost_model: CostModel | None = None, gpus_per_node: int = 8,
                 plans: ThreeDPlans | None = None) -> None:
        self._spread_rate = spread_rate
        self._cost_model = cost_model
        self._gpus_per_node = gpus_per_node
        self._plans = plans
        self._cache: dict[tuple[str, int, str, Mix], MixedPrediction] = {}

    def predict(self, job: JobSpec, mix: Mix,
                parts: tuple[tuple[str, int, GpuFlavor], ...] | None = None) -> MixedPrediction:
        """Speed of ``job`` on the GPUs of ``mix`` (its counts must add up to the gang size).

        ``parts`` (the placement's ``(node, gpus, flavor)`` servers) is read only for a 3-D
        job; without it the mix is laid out on full servers of ``gpus_per_node``, one flavor
        per server.

        Raises:
            SpecError: the mix does not hold exactly the job's gang.
        """
        if sum(n for _f, n in mix) != job.num_gpus or any(n <= 0 for _f, n in mix):
            raise SpecError(f"job {job.job_id}: mix {mix} does not hold its {job.num_gpus} GPUs")
        if job.parallelism is not None and self._plans is not None:
            return self._from_plan(job, mix, parts)
        model = planner_model(job, self._cost_model) if self._cost_model else None
        key = (job.job_type, job.num_gpus, model or "", mix)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        rates = {f: self._spread_rate(job, f) for f, _n in mix}
        bound = sum(n * rates[f] for f, n in mix) / job.num_gpus
        pred: MixedPrediction | None = None
        if min(rates.values()) <= 0:
            pred = MixedPrediction(0.0, bound, "a flavor of the mix cannot run this job")
        elif model is not None:
            pred = self._from_cost_model(job, mix, rates, bound, model)
        if pred is None:
            pred = self._from_speeds(job, mix, rates, bound)
        self._cache[key] = pred
        return pred

    def rate(self, job: JobSpec, mix: Mix) -> float:
        """Steps/s of ``job`` on ``mix`` (0.0 when it cannot run there)."""
        return self.predict(job, mix).steps_per_s

    def _from_plan(self, job: JobSpec, mix: Mix,
                   parts: tuple[tuple[str, int, GpuFlavor], ...] | None) -> MixedPrediction:
        p3, plans = job.parallelism, self._plans
        assert p3 is not None and plans is not None
        if parts is None:
            parts = tuple((f"{f}-{k}", g, f) for f, n in mix
                          for k, g in enumerate(_node_sizes(n, self._gpus_per_node)))
        bound = sum(n * self._spread_rate(job, f) for f, n in mix) / job.num_gpus
        why = plans.why_not(p3, parts)
        if why is not None:
            return MixedPrediction(0.0, bound, why)
        return MixedPrediction(plans.steps_per_s(p3, parts), bound, f"3-D plan ({p3.model})")

    def _from_speeds(self, job: JobSpec, mix: Mix, rates: dict[GpuFlavor, float],
                     bound: float) -> MixedPrediction:
        bs = local_batch_of(job)
        costs: list[DeviceCost] = []
        node_gpus: list[int] = []
        for f, n in mix:
            costs += [DeviceCost(f, 0.0, 1.0 / (bs * rates[f]),
                                 bs * job.num_gpus)] * n
            node_gpus.append(n)
        step_s = _split_step_s(costs, bs * job.num_gpus, 0.0, node_gpus)
        return MixedPrediction(1.0 / step_s, bound, "per-flavor speeds")

    def _from_cost_model(self, job: JobSpec, mix: Mix, rates: dict[GpuFlavor, float], bound: float,
                         model: str) -> MixedPrediction | None:
        cm = self._cost_model
        assert cm is not None
        anchor = max(mix, key=lambda fn: (fn[1], rates[fn[0]]))[0]
        per_node = self._gpus_per_node
        try:
            costs = {f: cm.device_cost(model, f) for f, _n in mix}
            batch = job.batch_size or local_batch_of(job) * job.num_gpus
            grad = cm.gradient_bytes(model)
            mixed_costs = [costs[f] for f, n in mix for _ in range(n)]
            mixed_nodes = [g for _f, n in mix for g in _node_sizes(n, per_node)]
            t_mix = _split_step_s(mixed_costs, batch, grad, mixed_nodes)
            # The anchor's plan on the same servers: both gangs span the same links.
            t_anchor = _split_step_s([costs[anchor]] * job.num_gpus, batch, grad, mixed_nodes)
        except (NoProfileError, SpecError, ValueError):
            return None
        if not (math.isfinite(t_mix) and t_mix > 0):
            return None
        # The cost model's relative speeds may disagree with the measured ones; a mix is never
        # faster than its parts working alone at their measured speeds.
        return MixedPrediction(min(rates[anchor] * t_anchor / t_mix, bound), bound,
                               f"planner cost model ({model})")


def _node_sizes(gpus: int, per_node: int) -> list[int]:
    full, rest = divmod(gpus, per_node)
    return [per_node] * full + ([rest] if rest else [])
