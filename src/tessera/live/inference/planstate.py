"""A plan as the manager stores and applies it, and what its slices cost each queue.

The planner's :class:`~tessera.share.plan.SharePlan` numbers its GPUs 0, 1, ...; the manager
runs them on physical GPUs, so the stored form pairs each planned GPU with the device index it
was given (:class:`Applied`). It is kept as JSON in the store (:mod:`.book`), read back into a
``SharePlan`` so that :func:`tessera.share.replan.replan` can start from it after a restart.

**Quota.** A service's slices are charged to its queue's MIG quota
(:mod:`tessera.sched.core.mig_quota`): each slice by its compute and memory slices, Kueue
#10108's counters, summed over the queue's services. :func:`quota_problem` says, in one line,
which queue a plan would take over its MIG quota on the GPUs' flavor. A queue with no MIG quota
lines for that flavor is not limited by this check (its whole-GPU quota does not apply to
slices: a platform that wants a cap writes ``mig:`` lines for the queue).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from tessera.model.gpus import GpuFlavor
from tessera.sched.core.mig_quota import MigCharge, MigQuotas, mig_budget, mig_charge
from tessera.share.mig import MigGpu
from tessera.share.plan import Instance, SharePlan, gpu_assignment
from tessera.share.profiles import BatchingRule
from tessera.share.segments import SegmentOption


@dataclass(frozen=True, slots=True)
class Applied:
    """A plan and, for each of its GPUs in order, the physical GPU index it runs on."""

    plan: SharePlan
    devices: tuple[int, ...]

    def slots(self) -> dict[tuple[int, str], SegmentOption]:
        """``{(device GPU, "kind@start"): segment}`` for every planned instance."""
        return {(dev, str(inst.placement)): inst.segment
                for dev, ga in zip(self.devices, self.plan.gpus, strict=True)
                for inst in ga.instances}


def applied_json(a: Applied) -> str:
    return json.dumps({
        "gpu": a.plan.gpu,
        "rule": asdict(a.plan.rule),
        "gpus": [{"device": dev, "instances": [{"start": i.start, "segment": asdict(i.segment)}
                                               for i in ga.instances]}
                 for dev, ga in zip(a.devices, a.plan.gpus, strict=True)],
    }, sort_keys=True)


def load_applied(text: str, gpu: MigGpu) -> Applied:
    """The stored form back as an :class:`Applied` (its services: the segments' names)."""
    d = json.loads(text)
    gpus, devices = [], []
    for g in d["gpus"]:
        insts = [Instance(int(i["start"]), SegmentOption(**i["segment"])) for i in g["instances"]]
        gpus.append(gpu_assignment(gpu, insts))
        devices.append(int(g["device"]))
    plan = SharePlan(d["gpu"], "applied", tuple(gpus), len(gpus), False, 0.0, (),
                     BatchingRule(**d["rule"]))
    return Applied(plan, tuple(devices))


def slices_by_queue(plan: SharePlan, gpu: MigGpu,
                    queue_of: Mapping[str, str]) -> dict[str, Counter[str]]:
    """``{queue: Counter(profile name → slices)}`` of a plan's instances."""
    out: dict[str, Counter[str]] = {}
    for ga in plan.gpus:
        for inst in ga.instances:
            q = queue_of.get(inst.segment.service)
            if q is not None:
                out.setdefault(q, Counter())[gpu.profile(inst.segment.kind).name] += 1
    return out


def charge_of(flavor: GpuFlavor, slices: Mapping[str, int]) -> MigCharge:
    total = MigCharge(0, 0)
    for profile, n in slices.items():
        total = total + mig_charge(flavor, profile, n)
    return total


def quota_problem(plan: SharePlan, gpu: MigGpu, queue_of: Mapping[str, str],
                  mig_quotas: Mapping[str, MigQuotas]) -> str | None:
    """Why ``plan`` takes a queue over its MIG quota on ``gpu``'s flavor, or ``None``."""
    flavor = gpu.flavor
    for queue, slices in sorted(slices_by_queue(plan, gpu, queue_of).items()):
        lines = mig_quotas.get(queue, {}).get(flavor)
        if not lines:
            continue
        need, budget = charge_of(flavor, slices), mig_budget(flavor, lines.values())
        if not need.within(budget):
            used = ", ".join(f"{n}x{p}" for p, n in sorted(slices.items()))
            raise_text = (f"queue {queue!r} is over its MIG quota on {flavor.short}: its "
                          f"services need {used} = {need.compute_slices} compute and "
                          f"{need.memory_slices} memory slices; its quota gives "
                          f"{budget.compute_slices} compute and {budget.memory_slices} memory")
            return raise_text
    return None
