"""3-D plans of the jobs that ask for one: one cache for the scheduler and the live service.

A job with :class:`~tessera.model.jobs.ThreeDParallel` parallelism does not train data
parallel: ``tessera plan`` splits its layer-wise model into pipeline stages, its weight
matrices over tensor-parallel GPUs, and runs copies of that pipeline data parallel
(:func:`tessera.plan.api.plan_ranked`). Its speed on a gang is therefore not a per-flavor
measurement but the plan's predicted step time, and the live service must launch each rank with
its role in *that same* plan. :class:`ThreeDPlans` makes that one object:

* the scheduler prices a gang (:meth:`ThreeDPlans.steps_per_s`, through the oracle's
  :meth:`~tessera.sched.core.oracle.ThroughputOracle.placement_rate` and
  :class:`~tessera.sched.mixed.rates.MixedRates`);
* the live service asks for each rank's role on the placement it launches
  (:meth:`ThreeDPlans.ranked`, from :func:`tessera.live.batches.plan_rank_roles`).

Both go through :meth:`ThreeDPlans.plan`, keyed by exactly what the planner reads from a gang
(:func:`gang_shape`): the GPUs of each flavor, the largest per-server share (the server size
the planner lays the gang out on) and the largest tensor-parallel degree whose groups fit every
server's share. Two placements of the same shape share one :class:`~tessera.plan.hybrid.HybridPlan`;
only the rank layout (which GPU plays which role) is drawn per placement. A gang no plan fits
is remembered too, with the planner's message (``llama-7b does not fit on these devices …``),
which is what a job left pending for it is told.

The cache belongs to whoever owns the oracle (one simulation run, one live service), as the
oracle's other caches do; it is never process-wide. It is bounded: it keeps the
:data:`DEFAULT_MAX_PLANS` (or ``max_plans``) most recently used shapes and forgets the least
recently used one beyond that (a long-running service sees gang shapes come and go; a plan
forgotten is searched again if its shape comes back, at the planner's cost — seconds for a
large model — with the same answer).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tessera.errors import NoProfileError, SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import ThreeDParallel
from tessera.perf.steptime import CostModel

if TYPE_CHECKING:
    from tessera.plan.api import RankedPlan

Part = tuple[str, int, GpuFlavor]
"""One server of a gang: ``(node_id, gpus, flavor)``."""

Parts = tuple[Part, ...]
"""A placement's ``((node_id, gpus, flavor), ...)`` in rank order (:meth:`Placement.parts`)."""

GangShape = tuple[tuple[tuple[GpuFlavor, int], ...], int, int]
"""``(((flavor, gpus), ...) in first-seen order, largest per-server share, max TP degree)``."""

#: Largest tensor-parallel degree a plan may use (one 8-GPU server).
MAX_TP = 8

#: Plans (or no-fit messages) a :class:`ThreeDPlans` keeps: one per (model, global batch, gang
#: shape). A plan is a few kilobytes, so the cap bounds memory at a few megabytes while
#: holding every shape a cluster of a few hundred GPUs offers its 3-D jobs at once.
DEFAULT_MAX_PLANS = 1024


class NoPlanError(SpecError):
    """No 3-D plan of the model fits the gang; the message is the planner's."""


def gang_shape(parts: Sequence[Part]) -> GangShape:
    """What the planner reads from a gang: GPUs per flavor, server size and max TP degree.

    Tensor parallelism is limited to the largest power of two (at most :data:`MAX_TP`) that
    divides every server's share, so every tensor-parallel group fits on one server.

    Raises:
        SpecError: the gang has no GPUs.
    """
    if not parts or any(c < 1 for _n, c, _f in parts):
        raise SpecError(f"a 3-D plan needs a gang of at least one GPU per part, got {parts!r}")
    counts: dict[GpuFlavor, int] = {}
    for _node, count, flavor in parts:
        counts[flavor] = counts.get(flavor, 0) + count
    shares = [count for _node, count, _f in parts]
    max_tp = 1
    while max_tp < MAX_TP and all(c % (2 * max_tp) == 0 for c in shares):
        max_tp *= 2
    return tuple(counts.items()), max(shares), max_tp


class ThreeDPlans:
    """Cached 3-D plans per (model, global batch, gang shape); see the module docstring.

    Args:
        cost_model: the planner's cost model; default one over the bundled profiles that
            estimates unprofiled flavors with the roofline, as ``tessera plan`` does.
        max_plans: most entries kept (least recently used forgotten first).

    Raises:
        SpecError: ``max_plans`` is below 1.
    """

    def __init__(self, cost_model: CostModel | None = None,
                 max_plans: int = DEFAULT_MAX_PLANS) -> None:
        if max_plans < 1:
            raise SpecError(f"a plan cache must hold at least 1 plan, got max_plans={max_plans}")
        self._cm = cost_model or CostModel(estimate_unprofiled=True)
        self.max_plans = max_plans
        self._plans: OrderedDict[tuple[str, int, GangShape], RankedPlan | str] = OrderedDict()

    def plan(self, job: ThreeDParallel, parts: Sequence[Part]) -> RankedPlan:
        """The plan of ``job`` on a gang of ``parts``' shape (ranks laid out on the first
        gang of that shape seen; :meth:`ranked` lays them on a given one).

        Raises:
            NoPlanError: no plan fits (the planner's message), or the model is not a
                layer-wise planner model.
        """
        key = (job.model, job.global_batch_samples, gang_shape(parts))
        hit = self._plans.get(key)
        if hit is None:
            hit = self._plans[key] = self._search(job, tuple(parts), key[2])
            while len(self._plans) > self.max_plans:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        if isinstance(hit, str):
            raise NoPlanError(hit)
        return hit

    def ranked(self, job: ThreeDParallel, parts: Sequence[Part]) -> RankedPlan:
        """The plan of ``job`` with every rank's role on exactly these ``parts``.

        The plan object (:attr:`RankedPlan.plan`) and its breakdown are the cached ones that
        priced the gang; only the ranks are laid out on these GPUs.

        Raises:
            NoPlanError: as :meth:`plan`.
        """
        # lazy: the planner (tessera.plan) is +45 ms at every `tessera` start; 3-D jobs only
        from tessera.plan.models import layered_model
        from tessera.plan.ranks import assign_ranks, slots_of_parts

        cached = self.plan(job, parts)
        slots = slots_of_parts(parts)
        if tuple(r.device for r in cached.ranks) == tuple(s.device for s in slots):
            return cached
        ranks = assign_ranks(cached.plan, slots, layered_model(job.model).n_layers)
        return dataclasses.replace(cached, ranks=ranks)

    def steps_per_s(self, job: ThreeDParallel, parts: Sequence[Part]) -> float:
        """Optimizer steps per second of ``job`` on the gang (0.0 when no plan fits)."""
        try:
            step_s = self.plan(job, parts).plan.step_time_s
        except NoPlanError:
            return 0.0
        return 1.0 / step_s if step_s > 0 else 0.0

    def why_not(self, job: ThreeDParallel, parts: Sequence[Part]) -> str | None:
        """The planner's message when no plan of ``job`` fits the gang, else ``None``."""
        try:
            self.plan(job, parts)
        except NoPlanError as e:
            return str(e)
        return None

    def __len__(self) -> int:
        return len(self._plans)

    def _search(self, job: ThreeDParallel, parts: Parts, shape: GangShape) -> RankedPlan | str:
        from tessera.plan.api import plan_ranked
        from tessera.plan.models import layered_model
        from tessera.plan.pipeline import PipelineConfig
        from tessera.plan.ranks import slots_of_parts
        # (the plan imports above are lazy for the reason given in ranked)

        flavor_counts, per_server, max_tp = shape
        try:
            model = layered_model(job.model)
            counts = dict(flavor_counts)
            return plan_ranked(model, counts, job.global_batch_samples, slots_of_parts(parts),
                               cost_model=self._cm, gpus_per_node=per_server,
                               base=PipelineConfig(1, 1, max_tp=max_tp))
        except (SpecError, NoProfileError, ValueError) as e:
            return f"no 3-D plan of {job.model} fits {_describe(flavor_counts)}: {e}"


def _describe(flavor_counts: tuple[tuple[GpuFlavor, int], ...]) -> str:
    return ", ".join(f"{n}×{f}" for f, n in flavor_counts)
