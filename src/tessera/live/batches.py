"""Per-rank local batches for a job the service launches: ``TESSERA_LOCAL_BATCH``.

A job that names a ``global_batch`` B (samples per optimizer step over all ranks) trains data
parallel: rank i computes gradients on b_i samples, all ranks average them and step together,
so a step lasts as long as the slowest rank. On a *mixed* gang (V100s and T4s) an equal split
``B/N`` makes the fast ranks wait at every all-reduce; the balanced split gives each rank
samples in proportion to its speed, so that all finish together, and keeps ``Σ b_i = B`` (the
learning rate stays valid). :func:`plan_local_batches` computes it for a run's placement, rank
by rank in the order :func:`~tessera.live.executors.base.rank_envs` numbers them.

**The split is the planner's** for a fixed set of devices
(:func:`tessera.plan.batch_split.integer_split`, the exact integer min-max split, started from
the continuous optimum of :func:`~tessera.plan.batch_split.continuous_split` per flavor). The
gang is fixed here -- the scheduler already chose it -- so no device is dropped, as the
planner's :func:`~tessera.plan.dp.split_batch` might. Each device's step time is
``t(b) = α·⌈b/cap⌉ + β·b`` (:class:`~tessera.perf.steptime.DeviceCost`); where the costs come
from, first source that knows wins:

1. **planner cost model** -- the job's ``model`` is a profiled planner model (``imagenet``,
   ``bert`` …, :meth:`CostModel.models <tessera.perf.steptime.CostModel.models>`) with a
   profile for every flavor of the gang, and B fits the gang's memory with at most
   :data:`~tessera.plan.dp.DEFAULT_MAX_MICRO_STEPS` accumulation micro-steps: fitted α, β and
   memory caps, exactly what ``tessera plan`` uses;
2. **measured per-flavor speeds** -- the job's ``job_type`` is in the oracle's throughput
   table and runs on every flavor of the gang: a GPU of flavor f processes samples in
   proportion to the gang's measured steps/s on f (α = 0, no cap), as
   :mod:`tessera.sched.mixed.rates` predicts the same gang's speed;
3. **relative compute** -- otherwise the catalog's peak rate of each flavor (fp16 tensor
   TFLOPS when every flavor has them, else fp32), as ``tessera train`` falls back to;
4. **equal shares** -- only if even that fails (an error is caught, never raised: a launch is
   not lost to a split).

A one-flavor gang gets equal shares (``B/N``, the first ``B mod N`` ranks one more): every
source agrees there. Every rank gets at least one sample (a rank with an empty slice would
report a NaN loss): if the planner leaves a rank idle (its fixed cost α exceeds the whole
step), samples are moved to it one at a time from the rank predicted slowest
(:func:`tessera.train.prior.raise_to_min_batch`). The request is refused at submission when
B < N (:class:`~tessera.live.spec.JobRequest`).

:meth:`LocalBatches.describe` is what the job's events show, e.g. ``local batches 31+31+17+17
(planner cost model: imagenet on 2×T4, 2×V100-16GB)``.

**3-D plans.** A job submitted with ``parallelism: 3d`` (and a layer-wise ``model`` such as
``llama-7b``) gets, instead of a data-parallel split, ``tessera plan``'s tensor × pipeline ×
data plan for its gang (:func:`plan_rank_roles`): each rank's stage, layers, TP and DP rank
and its own ``TESSERA_LOCAL_BATCH`` (``docs/live.md`` lists the variables).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import NoProfileError
from tessera.live.spec import LiveJob
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import ThreeDParallel
from tessera.perf.steptime import CostModel, DeviceCost
from tessera.plan.api import default_cost_model
from tessera.plan.batch_split import BatchTooLargeError, continuous_split, integer_split
from tessera.plan.dp import DEFAULT_MAX_MICRO_STEPS
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.plans import ThreeDPlans
from tessera.sched.core.snapshot import Placement
from tessera.train.balancer import equal_split
from tessera.train.prior import raise_to_min_batch

log = logging.getLogger("tessera.live")

PLANNER = "planner cost model"
MEASURED = "measured per-flavor speeds"
COMPUTE = "relative compute"
EQUAL = "equal shares"
#: Gangs up to this size have every rank's batch spelled out in :meth:`LocalBatches.describe`.
SPELLED_OUT_RANKS = 16


@dataclass(frozen=True, slots=True)
class LocalBatches:
    """A run's per-rank local batches and where the speeds behind them came from.

    Attributes:
        batches: samples per step of each rank, in rank order; they sum to the global batch.
        source: :data:`PLANNER`, :data:`MEASURED`, :data:`COMPUTE` or :data:`EQUAL`.
        reason: what the source used, or why the better sources could not be used.
    """

    batches: tuple[int, ...]
    source: str
    reason: str

    def describe(self, most_chars: int = 400) -> str:
        """``local batches 31+31+17+17 (planner cost model: imagenet on …)``.

        Beyond :data:`SPELLED_OUT_RANKS` ranks, runs of equal batches are written ``31×8``,
        and the list is cut at ``most_chars`` (an event of a 4096-rank gang stays short).
        """
        b = self.batches
        if len(b) <= SPELLED_OUT_RANKS:
            text = "+".join(map(str, b))
        else:
            runs: list[list[int]] = []
            for x in b:
                if runs and runs[-1][0] == x:
                    runs[-1][1] += 1
                else:
                    runs.append([x, 1])
            text = "+".join(f"{x}×{n}" if n > 1 else str(x) for x, n in runs)
        if len(text) > most_chars:
            text = text[:most_chars] + "…"
        return f"local batches {text} ({self.source}: {self.reason})"


def plan_local_batches(job: LiveJob, placement: Placement, oracle: ThroughputOracle,
                       cost_model: CostModel | None = None,
                       global_batch: int | None = None) -> LocalBatches | None:
    """The local batch of every rank of ``job`` on ``placement``; ``None`` without a
    ``global_batch``. Never raises: a failure falls back to equal shares, with the error as
    the reason (see the module docstring for the sources).

    Args:
        job: the job; its ``global_batch``, ``model`` and ``spec.job_type`` are read.
        placement: the run's GPUs; ranks follow :meth:`Placement.parts` order.
        oracle: the service's throughput oracle (its table and cluster).
        cost_model: the planner's cost model; default the process-wide one of
            :func:`tessera.plan.api.default_cost_model`.
        global_batch: the run's global batch when it is not the job's own (an elastic job
            resized to another batch, :func:`tessera.live.resize.run_batch`).
    """
    batch = global_batch if global_batch is not None else job.global_batch
    if batch is None:
        return None
    flavors = [f for _node, count, f in placement.parts() for _ in range(count)]
    try:
        return _split(job, flavors, batch, oracle, cost_model)
    except Exception as e:  # a launch must not fail because a speed estimate did
        log.exception("job %s: local batches fell back to equal shares", job.spec.job_id)
        return LocalBatches(equal_split(batch, len(flavors)), EQUAL,
                            f"the split failed ({type(e).__name__}: {e})")


def balanced_split(costs: Sequence[DeviceCost], global_batch: int,
                   max_micro_steps: int) -> tuple[int, ...]:
    """The planner's integer min-max split over exactly these devices, at least 1 each.

    Raises:
        BatchTooLargeError: the devices cannot hold ``global_batch`` with the accumulation.
    """
    classes = list(dict.fromkeys(costs))          # identical devices form one class
    counts = [sum(1 for c in costs if c == k) for k in classes]
    _, per_class = continuous_split(classes, counts, global_batch, max_micro_steps)
    start = [per_class[classes.index(c)] for c in costs]
    split = integer_split(costs, global_batch, max_micro_steps, start)
    return raise_to_min_batch(split, costs, 1)[0]


def _mix(flavors: Sequence[GpuFlavor]) -> str:
    counts: dict[GpuFlavor, int] = {}
    for f in flavors:
        counts[f] = counts.get(f, 0) + 1
    return ", ".join(f"{n}×{f}" for f, n in sorted(counts.items(), key=lambda fn: fn[0].short))


def _split(job: LiveJob, flavors: list[GpuFlavor], global_batch: int, oracle: ThroughputOracle,
           cost_model: CostModel | None) -> LocalBatches:
    if len(set(flavors)) == 1:
        return LocalBatches(equal_split(global_batch, len(flavors)), EQUAL,
                            f"one flavor ({flavors[0]})")
    mix = _mix(flavors)
    cluster = oracle.cluster
    why_not: list[str] = []
    planned = _from_cost_model(job, flavors, global_batch, cluster, cost_model, why_not)
    if planned is not None:
        return planned
    measured = _from_oracle(job, flavors, global_batch, oracle, why_not)
    if measured is not None:
        return measured
    fl = flavors
    metric = "fp16_tensor_tflops" if all(f.fp16_tensor_tflops for f in fl) else "fp32_tflops"
    peaks = [float(getattr(f, metric) or 0.0) for f in fl]
    reason = f"peak {metric.replace('_', ' ')} of {mix}, because " + "; ".join(why_not)
    if min(peaks) <= 0:
        return LocalBatches(equal_split(global_batch, len(flavors)), EQUAL,
                            f"a flavor has no peak rate in the catalog; {reason}")
    costs = [DeviceCost(f, 0.0, 1.0 / p, global_batch) for f, p in zip(fl, peaks, strict=True)]
    return LocalBatches(balanced_split(costs, global_batch, 1), COMPUTE, reason)


def _from_cost_model(job: LiveJob, flavors: list[GpuFlavor], global_batch: int,
                     cluster: ClusterSpec, cost_model: CostModel | None,
                     why_not: list[str]) -> LocalBatches | None:
    cm = cost_model or default_cost_model()
    model = job.model
    if model is None or model not in cm.models():
        named = "the job names no model" if model is None else f"model {model!r} is not one"
        why_not.append(f"{named} of the planner's ({', '.join(cm.models())})")
        return None
    by_flavor: dict[GpuFlavor, DeviceCost] = {}
    try:
        for f in dict.fromkeys(flavors):
            by_flavor[f] = cm.device_cost(model, f)
    except NoProfileError as e:
        why_not.append(str(e))
        return None
    costs = [by_flavor[f] for f in flavors]
    try:
        split = balanced_split(costs, global_batch, DEFAULT_MAX_MICRO_STEPS)
    except BatchTooLargeError as e:
        why_not.append(str(e))
        return None
    return LocalBatches(split, PLANNER, f"{model} on {_mix(flavors)}")


def _from_oracle(job: LiveJob, flavors: list[GpuFlavor], global_batch: int,
                 oracle: ThroughputOracle, why_not: list[str]) -> LocalBatches | None:
    job_type = job.spec.job_type
    if job_type not in oracle.table.job_types():
        why_not.append(f"job type {job_type!r} has no measured throughputs")
        return None
    rates = {f: oracle.rate(job.spec, f, consolidated=False) for f in dict.fromkeys(flavors)}
    slow = sorted(f.short for f, r in rates.items() if not (r > 0 and math.isfinite(r)))
    if slow:
        why_not.append(f"job type {job_type!r} has no measured throughput on {', '.join(slow)}")
        return None
    # A GPU of flavor f does samples at a rate proportional to the gang's steps/s on f.
    costs = [DeviceCost(f, 0.0, 1.0 / rates[f], global_batch) for f in flavors]
    rate_text = ", ".join(f"{f} {r:.3g} steps/s"
                          for f, r in sorted(rates.items(), key=lambda fr: fr[0].short))
    return LocalBatches(balanced_split(costs, global_batch, 1), MEASURED,
                        f"{job_type}: {rate_text}; not the planner's cost model, because "
                        + "; ".join(why_not))


@dataclass(frozen=True, slots=True)
class RankPlan:
    """A run's 3-D plan laid out on its GPUs, or why there is none.

    Attributes:
        envs: per rank (placement order), the ``TESSERA_*`` plan variables
            (:meth:`tessera.plan.ranks.RankRole.env`); empty when planning failed.
        summary: what the job's events show: the plan's shape and speed, or the failure.
    """

    envs: tuple[tuple[tuple[str, str], ...], ...]
    summary: str


def plan_rank_roles(job: LiveJob, placement: Placement, global_batch: int,
                    plans: ThreeDPlans) -> RankPlan:
    """The 3-D plan of a ``parallelism: 3d`` job on ``placement`` and each rank's role.

    The plan is ``tessera plan``'s (:func:`tessera.plan.api.plan_ranked`) for the gang's
    flavors and counts, with servers as large as the gang's largest per-node share and tensor
    parallelism limited to the largest power of two dividing every node's share (so every
    tensor-parallel group fits on one server); ranks follow :meth:`Placement.parts`, as
    :func:`~tessera.live.executors.base.rank_envs` numbers them. On full servers that is the
    same plan, rank for rank, as ``tessera plan --json`` prints for the same devices.

    ``plans`` is the service oracle's cache (:attr:`ThroughputOracle.plans
    <tessera.sched.core.oracle.ThroughputOracle.plans>`): the plan object that priced the gang when
    the scheduler chose it is the one whose roles are exported here. Never raises: a failure
    gives no variables and says why.
    """
    parts = tuple(placement.parts())
    try:
        ranked = plans.ranked(ThreeDParallel(job.model or "", global_batch), parts)
    except Exception as e:  # a launch must not fail because the plan did
        log.exception("job %s: 3-D plan failed", job.spec.job_id)
        return RankPlan((), f"no 3-D plan ({type(e).__name__}: {e}); ranks get no "
                        "stage variables")
    envs = tuple(tuple(sorted(r.env().items())) for r in ranked.ranks)
    p = ranked.plan
    copies = f"{p.dp_copies} cop{'y' if p.dp_copies == 1 else 'ies'}"
    return RankPlan(envs, f"3-D plan: {p.kind}, {copies} x {max(1, len(p.stages))} stage(s), "
                    f"step {p.step_time_s:.3f} s predicted, {ranked.breakdown.bound}-bound")
