"""Where the batch split of step 0 comes from, before anything has been measured.

The online balancer (:mod:`tessera.train.balancer`) needs a first split. With ``--split planned``
it is the data-parallel planner's (:func:`tessera.plan.api.plan_data_parallel`), which balances
fitted step times ``t(b) = α + β·b`` of real models on real GPUs and weighs the all-reduce cost
of every extra device. The planner only knows the Sia/Pollux profiles (``imagenet``, ``cifar10``,
``bert``, ``deepspeech2``, ``yolov3``, ``ncf``) on seven flavors, not Tessera's small examples,
so each example is planned as the profiled model whose cost behaves most like it
(:data:`PLAN_MODELS`); ``--plan-model`` names another.

**Shares to ranks.** The planner answers per device class, the runtime per rank. Every rank of
flavor F takes the next of the planner's local batches for F, in the planner's order, then the
zeros of F's dropped devices.

**Dropped devices.** The planner may leave a device idle (local batch 0) when adding it to the
all-reduce ring costs more than its compute saves. The runtime has no idle ranks: an empty
slice makes that rank's mean loss NaN (and with it the reported global loss), and the balancer
cannot fit a rank it never measured, so it would never rebalance. Such a rank therefore starts
at ``min_batch`` samples, taken one at a time from the rank the planner's cost model predicts
slowest, and the output says so. Measurement then decides whether it keeps them.

**Fallback.** When a rank's flavor has no profile for the model (K80, P100 …), the model has no
profile at all, or the planner cannot fit the global batch in the devices' memory, the split is
proportional to the catalog's relative speeds (:func:`tessera.train.devices.relative_speeds`),
and :attr:`InitialSplit.reason` says why.

**Never the emulated truth.** Both sources read only the flavors and the planner's profiles,
never the emulated speeds (``TrainConfig.speeds``): the balancer has to discover those.

This module imports no torch; the planner (numpy) is imported when a split is planned.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.errors import NoProfileError, SpecError
from tessera.plan.dp import DEFAULT_MAX_MICRO_STEPS, BatchTooLargeError
from tessera.train.balancer import proportional_split
from tessera.train.devices import DeviceSlot, relative_speeds, speed_metric

if TYPE_CHECKING:
    from tessera.model.gpus import GpuFlavor
    from tessera.perf.steptime import DeviceCost
    from tessera.plan.dp import DpPlan

PLAN_MODELS: dict[str, str] = {
    "mlp": "ncf",
    "cnn": "cifar10",
    "transformer": "bert",
    "wide-mlp": "ncf",
}
"""The profiled model each example is planned as, by the shape of its cost:

* ``mlp`` -> ``ncf``: NeuMF is embeddings feeding a small MLP; its step time is almost flat in
  the batch (a fixed cost dominates) and its gradient is tiny, like a two-layer MLP's;
* ``cnn`` -> ``cifar10``: ResNet-18 on 32×32 images, the profiled convolutional net on small
  images, whose cost grows per sample like a conv net on 12×12 inputs;
* ``transformer`` -> ``bert``: the only profiled transformer (BERT-base fine-tuning).
"""


class SplitSource(enum.StrEnum):
    """Where a step-0 split came from (``initial_split_source`` in ``--json``)."""

    PLANNER = "planner"
    """:func:`tessera.plan.api.plan_data_parallel` on the example's planner model."""
    CATALOG = "catalog"
    """Proportional to the catalog's relative peak speeds (the planner could not be used)."""
    EQUAL = "equal"
    """``B/N`` per rank (``--split equal``)."""
    FIXED = "fixed"
    """Given explicitly (``TrainConfig.fixed_split``)."""


_LABELS = {SplitSource.PLANNER: "the planner", SplitSource.CATALOG: "the catalog",
           SplitSource.EQUAL: "an equal split", SplitSource.FIXED: "a fixed split"}


@dataclass(frozen=True, slots=True)
class InitialSplit:
    """The local batches of step 0, their source and, when planned, the planner's forecast.

    Attributes:
        split: local batch per rank, summing to the global batch.
        source: where ``split`` came from.
        reason: one sentence on why this source (and, for the catalog, why not the planner).
        plan_model: the planner model asked (``None`` for equal and fixed splits).
        min_batch_ranks: ranks the planner left idle that start at ``min_batch`` instead.
        planner_step_s: the planner's predicted step time for its own split, on real GPUs.
        planner_samples_per_s: the planner's predicted throughput for its own split.
    """

    split: tuple[int, ...]
    source: SplitSource
    reason: str
    plan_model: str | None = None
    min_batch_ranks: tuple[int, ...] = ()
    planner_step_s: float | None = None
    planner_samples_per_s: float | None = None

    def describe(self) -> str:
        """One line for the human output of ``tessera train``."""
        return f"initial split {list(self.split)} from {_LABELS[self.source]}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """The fields ``tessera train --json`` adds to its summary."""
        return {
            "initial_split": list(self.split),
            "initial_split_source": str(self.source),
            "initial_split_reason": self.reason,
            "plan_model": self.plan_model,
            "min_batch_ranks": list(self.min_batch_ranks),
            "planner_step_time_s": self.planner_step_s,
            "planner_throughput_samples_per_s": self.planner_samples_per_s,
        }


def planner_models() -> tuple[str, ...]:
    """Models the planner's cost model can plan (valid ``--plan-model`` values)."""
    from tessera.plan.api import default_cost_model  # lazy: plan.api +45 ms at `tessera` start

    return default_cost_model().models()


def check_plan_model(name: str) -> None:
    """Reject a ``--plan-model`` the planner does not know.

    Raises:
        SpecError: the message lists the known models.
    """
    known = planner_models()
    if name not in known:
        raise SpecError(f"unknown planner model {name!r} (--plan-model); choose one of: "
                        f"{', '.join(known)}")


def catalog_split(slots: Sequence[DeviceSlot], global_batch: int, min_batch: int, why: str,
                  plan_model: str | None = None) -> InitialSplit:
    """The split proportional to the catalog's relative speeds; ``why`` says why not planned."""
    metric = speed_metric([s.flavor for s in slots]).replace("_", " ")
    return InitialSplit(
        proportional_split(relative_speeds(slots), global_batch, min_batch),
        SplitSource.CATALOG, f"relative peak speeds ({metric}), because {why}", plan_model,
    )


@functools.lru_cache(maxsize=16)
def planned_split(slots: tuple[DeviceSlot, ...], global_batch: int, model: str,
                  min_batch: int = 1) -> InitialSplit:
    """Step 0 from the data-parallel planner for ``model``, or the catalog when it cannot plan.

    Cached: every rank of a job asks once, and the answer is deterministic.

    Args:
        slots: one per rank.
        global_batch: samples per step (at least ``min_batch`` per rank).
        model: a planner model (see :func:`planner_models`).
        min_batch: the least a rank may get (the balancer's ``min_batch``).
    """
    from tessera.plan.api import default_cost_model, plan_data_parallel  # lazy: as above

    cm = default_cost_model()
    try:
        profiled = {f.name for f in cm.flavors(model)}
    except NoProfileError as e:
        return catalog_split(slots, global_batch, min_batch, f"the planner cannot plan it: {e}",
                             model)
    missing = sorted({s.flavor.short for s in slots if s.flavor.name not in profiled})
    if missing:
        why = (f"the planner has no {model} profile for {', '.join(missing)} (profiled: "
               f"{', '.join(sorted(f.short for f in cm.flavors(model)))})")
        return catalog_split(slots, global_batch, min_batch, why, model)
    counts: dict[GpuFlavor, int] = {}
    for s in slots:
        counts[s.flavor] = counts.get(s.flavor, 0) + 1
    try:
        plan = plan_data_parallel(model, counts, global_batch, cost_model=cm)
    except BatchTooLargeError as e:
        why = (f"the planner cannot fit a global batch of {global_batch} {model} samples in "
               f"these GPUs' memory ({e.per_pass_bsz} per pass, "
               f"{e.per_pass_bsz * DEFAULT_MAX_MICRO_STEPS} with {DEFAULT_MAX_MICRO_STEPS} "
               f"accumulation micro-steps)")
        return catalog_split(slots, global_batch, min_batch, why, model)
    planned = shares_to_ranks(plan, slots)
    costs = [cm.device_cost(model, s.flavor) for s in slots]
    split, raised = raise_to_min_batch(planned, costs, min_batch)
    reason = (f"planned as {model}, predicted {1000 * plan.step_time_s:.1f} ms/step, "
              f"{plan.throughput_samples_per_s:,.0f} samples/s on real GPUs")
    if raised:
        reason += "; " + _raised_note(plan, planned, raised, min_batch)
    return InitialSplit(split, SplitSource.PLANNER, reason, model, raised, plan.step_time_s,
                        plan.throughput_samples_per_s)


def _raised_note(plan: DpPlan, planned: Sequence[int], raised: Sequence[int], min_batch: int
                 ) -> str:
    ranks = ", ".join(str(r) for r in raised)
    if all(planned[r] == 0 for r in raised):
        dropped = "; ".join(f"{d.count}×{d.flavor.short}: {d.reason}" for d in plan.dropped)
        what = f"it leaves rank(s) {ranks} idle ({dropped})"
    else:
        what = f"it gives rank(s) {ranks} {[planned[r] for r in raised]} sample(s)"
    return (f"{what}, but the runtime keeps every rank measured, so they start at the minimum "
            f"batch ({min_batch}), taken from the ranks predicted slowest")


def shares_to_ranks(plan: DpPlan, slots: Sequence[DeviceSlot]) -> tuple[int, ...]:
    """The planner's local batch per rank: rank i takes the next of its flavor's batches.

    Dropped devices count as batch 0, after the flavor's used ones.
    """
    per_flavor: dict[str, list[int]] = {}
    for share in plan.shares:
        per_flavor.setdefault(share.flavor.name, []).append(share.local_bsz)
    for d in plan.dropped:
        per_flavor.setdefault(d.flavor.name, []).extend([0] * d.count)
    out = []
    for s in slots:
        batches = per_flavor.get(s.flavor.name)
        if not batches:
            raise SpecError(f"the plan has no device left for rank {s.rank} ({s.flavor.short})")
        out.append(batches.pop(0))
    return tuple(out)


def raise_to_min_batch(split: Sequence[int], costs: Sequence[DeviceCost], min_batch: int
                       ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Give every rank at least ``min_batch``, taking samples from the predicted-slowest ranks.

    Each missing sample comes from the rank (above ``min_batch``) whose ``costs[i].step_time_s``
    is largest at its current batch, so the planned step time grows as little as possible.

    Returns:
        ``(split, raised)``: the new split (same sum) and the ranks that were raised.

    Raises:
        SpecError: the split holds fewer than ``min_batch`` samples per rank.
    """
    b = list(split)
    if sum(b) < min_batch * len(b):
        raise SpecError(f"split {b} cannot give {len(b)} ranks {min_batch} sample(s) each")
    raised = tuple(i for i, x in enumerate(b) if x < min_batch)
    for i in raised:
        for _ in range(min_batch - b[i]):
            donor = max((j for j in range(len(b)) if b[j] > min_batch),
                        key=lambda j: costs[j].step_time_s(b[j]))
            b[donor] -= 1
        b[i] = min_batch
    return tuple(b), raised
