"""Re-planning after a load change, tearing down as few MIG instances as possible.

MIG-serving calls this the *reconfigurable machine* view: each GPU is a machine whose
configuration (its MIG layout) can change, but only idle instances can be destroyed and every
new model process pays a load time, so a good transition keeps what still serves. Starting from
the running plan and the new services (rates or SLOs changed, services added or removed):

1. *Keep.* Each surviving service keeps its existing instances, largest throughput first, until
   they carry its new required rate (batch and process count are re-tuned to the new SLO, which
   needs no MIG change).
2. *Top up.* The remaining rate gets the cheapest cover in compute slices.
3. *Reuse.* Instances no longer needed are handed to new segments of the same kind (the GI
   stays; only the model processes change).
4. *Place.* Remaining new segments go into free legal slots on running GPUs (best fit), then onto
   new GPUs packed with patterns; instances still unused are destroyed, and GPUs left empty are
   released.

The :class:`Transition` lists every change in a safe order, exchange before compact: create new
instances first, then move reused ones, then destroy, so capacity never drops below demand
during the change. It also reports the GPU count a fresh plan would need, so the price of
stability is visible.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from tessera.share.mig import MigGpu, free_placements
from tessera.share.packing import greedy_patterns, kind_demand, materialise, plan_heuristic
from tessera.share.plan import GpuAssignment, Instance, SharePlan, gpu_assignment
from tessera.share.profiles import BatchingRule, ProfileTable, Service
from tessera.share.segments import SegmentOption, ServiceOptions, all_options, cheapest_cover


@dataclass(frozen=True, slots=True)
class Change:
    """One step of a transition: ``create``, ``reassign``, ``retune`` or ``destroy``."""

    action: str
    gpu: int
    placement: str
    service: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Transition:
    plan: SharePlan
    changes: tuple[Change, ...]
    fresh_gpus: int  # what planning from scratch (heuristic) would use

    def count(self, action: str) -> int:
        return sum(c.action == action for c in self.changes)

    @property
    def torn_down(self) -> int:
        return self.count("destroy")


def _keep(so: ServiceOptions, old: list[tuple[int, Instance]]) -> tuple[list, float]:
    """Old instances (retuned) that a service keeps, and the capacity they carry."""
    kinds = {o.kind: o for o in so.options}
    usable = [(g, inst, kinds[inst.segment.kind]) for g, inst in old if inst.segment.kind in kinds]
    usable.sort(key=lambda t: -t[2].throughput_rps)
    kept, cap = [], 0.0
    for g, inst, opt in usable:
        if cap >= so.required_rps * (1 - 1e-9):
            break
        kept.append((g, inst, opt))
        cap += opt.throughput_rps
    return kept, cap


def replan(
    old: SharePlan,
    services: tuple[Service, ...],
    table: ProfileTable,
    gpu: MigGpu,
    rule: BatchingRule | None = None,
) -> Transition:
    """Move from ``old`` to a plan for ``services`` with few instances destroyed."""
    t0 = time.perf_counter()
    rule = rule or old.rule
    options = all_options(services, table, gpu, rule)
    by_service: dict[str, list[tuple[int, Instance]]] = {}
    for g_i, ga in enumerate(old.gpus):
        for inst in ga.instances:
            by_service.setdefault(inst.segment.service, []).append((g_i, inst))
    placed: dict[int, list[Instance]] = {g_i: [] for g_i in range(len(old.gpus))}
    changes: list[Change] = []
    taken: set[tuple[int, int]] = set()
    new_segments: list[SegmentOption] = []
    for so in options:
        kept, cap = _keep(so, by_service.get(so.service.name, []))
        for g_i, inst, opt in kept:
            placed[g_i].append(Instance(inst.start, opt))
            taken.add((g_i, inst.start))
            if (opt.batch, opt.procs) != (inst.segment.batch, inst.segment.procs):
                changes.append(Change("retune", g_i, str(inst.placement), opt.service,
                                      f"batch {opt.batch} x {opt.procs} proc"))
        if cap < so.required_rps * (1 - 1e-9):
            rest = replace(so, required_rps=so.required_rps - cap)
            new_segments.extend(cheapest_cover(rest))
    # 3. reuse idle instances of the same kind
    pending = _reuse_idle(old, taken, new_segments, placed, changes)
    # 4. free slots on running GPUs (best fit: fewest free compute slices left), then new GPUs
    assignments = {g_i: gpu_assignment(gpu, insts) for g_i, insts in placed.items()}
    overflow = _fill_free_slots(gpu, assignments, pending, changes)
    new_gpus = materialise(gpu, greedy_patterns(gpu, kind_demand(overflow)), overflow)
    gpus: list[GpuAssignment] = [ga for _, ga in sorted(assignments.items()) if ga.instances]
    for k, ga in enumerate(new_gpus):
        for inst in ga.instances:
            changes.append(Change("create", len(old.gpus) + k, str(inst.placement),
                                  inst.segment.service))
    gpus.extend(new_gpus)
    fresh = plan_heuristic(services, table, gpu, rule)
    plan = SharePlan(
        gpu.gpu, "replan", tuple(gpus), fresh.lower_bound, False, time.perf_counter() - t0,
        services, rule,
    )
    order = {"create": 0, "reassign": 1, "retune": 2, "destroy": 3}
    changes.sort(key=lambda c: (order[c.action], c.gpu, c.placement))
    return Transition(plan, tuple(changes), fresh.gpus_used)


def _reuse_idle(old: SharePlan, taken: set[tuple[int, int]], new_segments: list[SegmentOption],
                placed: dict[int, list[Instance]], changes: list[Change]) -> list[SegmentOption]:
    """Step 3: give each new segment (largest first) an idle old instance of its kind
    (``reassign``); old instances left idle are destroyed. Returns the segments still
    without a place."""
    idle = [(g_i, inst) for g_i, ga in enumerate(old.gpus) for inst in ga.instances
            if (g_i, inst.start) not in taken]
    pending: list[SegmentOption] = []
    for seg in sorted(new_segments, key=lambda s: -s.compute_slices):
        match = next((t for t in idle if t[1].segment.kind == seg.kind), None)
        if match is None:
            pending.append(seg)
            continue
        idle.remove(match)
        g_i, inst = match
        placed[g_i].append(Instance(inst.start, seg))
        changes.append(Change("reassign", g_i, str(inst.placement), seg.service,
                              f"from {inst.segment.service}"))
    for g_i, inst in idle:
        changes.append(Change("destroy", g_i, str(inst.placement), inst.segment.service))
    return pending


def _fill_free_slots(gpu: MigGpu, assignments: dict[int, GpuAssignment],
                     pending: list[SegmentOption], changes: list[Change]) -> list[SegmentOption]:
    """Step 4: put each pending segment in a free slot of a running GPU, best fit first (the
    GPU with the fewest free compute slices left; ``create``). Returns those that fit nowhere
    (they go on new GPUs)."""
    overflow: list[SegmentOption] = []
    for seg in pending:
        best: tuple[int, int, int] | None = None
        for g_i, ga in assignments.items():
            if not ga.instances:
                continue
            starts = free_placements(gpu, ga.layout, seg.kind, r510=True)
            if starts:
                used = sum(gpu.profile(k).compute_slices for k in ga.layout.kinds())
                key = (-used, g_i, starts[-1])
                if best is None or key < best:
                    best = key
        if best is None:
            overflow.append(seg)
            continue
        g_i, start = best[1], best[2]
        assignments[g_i] = gpu_assignment(
            gpu, [*assignments[g_i].instances, Instance(start, seg)]
        )
        changes.append(Change("create", g_i, f"{seg.kind}@{start}", seg.service))
    return overflow
