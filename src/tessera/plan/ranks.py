"""Which GPU does what: a plan's stages laid out on concrete devices, rank by rank.

A :class:`~tessera.plan.hybrid.HybridPlan` says *how many* GPUs of each flavor every stage uses
(``tp × replicas`` per pipeline copy, ``dp_copies`` copies); a launcher needs to know *which*
GPU is which. :func:`assign_ranks` answers that for an ordered list of GPUs (the order ranks
are numbered in: ``tessera plan`` lays GPUs out server by server with
:func:`~tessera.plan.api.nodes_for`, the live service takes its placement's order), so the
command line and the live service give every rank the same role for the same devices.

**Rules.**

* A tensor-parallel group never spans servers (it all-reduces activations several times per
  layer, over the server's NVLink/PCIe link): groups are packed onto the flavor's servers
  largest first, first fit, and a plan whose groups do not fit the servers is refused with the
  sizes that did not fit.
* Groups are taken stage by stage, all copies of a stage together, so a stage's data-parallel
  ranks share a server when they fit in one -- what the planner assumes when it prices their
  gradient all-reduce over the server's link -- while pipeline hand-offs, priced over the
  network, cross servers.
* Servers and GPUs are taken in name order, so a device's role does not depend on the order
  the devices were listed in (only its rank number does).
* Within a stage, data-parallel rank ``copy × replicas + replica`` (``dp_size = replicas ×
  dp_copies``): the stage's gradients are all-reduced over exactly those ranks.
* Each rank's ``local_batch`` is the samples it processes per step: a pipeline copy takes
  ``micro_batch × n_micro`` samples per step and a stage's replicas share them equally (the
  first ones one more when they do not divide); tensor-parallel ranks of one group see the
  same samples. A data-parallel plan's ranks keep the planner's own local batches.
* GPUs the plan leaves idle get ``stage = -1`` and ``local_batch = 0``.

:meth:`RankRole.env` is the per-rank environment (``TESSERA_PP_STAGE`` …) documented in
``docs/live.md``; Tessera's own trainer (:mod:`tessera.train`) runs data parallel only — the
variables are for the user's Megatron/DeepSpeed-style program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessera.errors import SpecError

if TYPE_CHECKING:
    from tessera.model.cluster import Node
    from tessera.model.gpus import GpuFlavor
    from tessera.plan.hybrid import HybridPlan

#: The environment variables :meth:`RankRole.env` sets, in the order documented.
PLAN_ENV_VARS = ("TESSERA_PP_STAGE", "TESSERA_PP_STAGES", "TESSERA_LAYERS", "TESSERA_TP_RANK",
                 "TESSERA_TP_SIZE", "TESSERA_DP_RANK", "TESSERA_DP_SIZE", "TESSERA_MICRO_BATCH",
                 "TESSERA_MICRO_BATCHES", "TESSERA_RECOMPUTE", "TESSERA_ZERO",
                 "TESSERA_LOCAL_BATCH")


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One GPU: its server and its index there. ``device`` is ``node:index``."""

    node_id: str
    flavor: GpuFlavor
    index: int

    @property
    def device(self) -> str:
        return f"{self.node_id}:{self.index}"


@dataclass(frozen=True, slots=True)
class RankRole:
    """What one rank (one GPU) does in a plan.

    Attributes:
        rank: global rank (position in the device order).
        device: ``node:index``.
        flavor: the GPU's flavor.
        stage: pipeline stage index, ``-1`` if the plan leaves this GPU idle.
        stages: pipeline stages per copy (1 for a data-parallel plan).
        first_layer / end_layer: the stage's layers ``[first_layer, end_layer)``.
        tp_rank / tp_size: position in and size of its tensor-parallel group.
        dp_rank / dp_size: position among the stage's data-parallel ranks (all copies).
        micro_batch / n_micro: a pipeline copy's micro-batch size and count per step
            (data parallel: the rank's local batch, 1).
        recompute / zero: the stage's activation recomputation and ZeRO level.
        local_batch: samples this rank processes per step.
    """

    rank: int
    device: str
    flavor: GpuFlavor
    stage: int
    stages: int
    first_layer: int
    end_layer: int
    tp_rank: int
    tp_size: int
    dp_rank: int
    dp_size: int
    micro_batch: int
    n_micro: int
    recompute: bool
    zero: int
    local_batch: int

    def env(self) -> dict[str, str]:
        """The rank's ``TESSERA_*`` plan variables (:data:`PLAN_ENV_VARS`)."""
        values = (self.stage, self.stages, f"{self.first_layer}:{self.end_layer}",
                  self.tp_rank, self.tp_size, self.dp_rank, self.dp_size, self.micro_batch,
                  self.n_micro, int(self.recompute), self.zero, self.local_batch)
        return {k: str(v) for k, v in zip(PLAN_ENV_VARS, values, strict=True)}

    def to_json(self) -> dict[str, object]:
        return {"rank": self.rank, "device": self.device, "flavor": self.flavor.short,
                "stage": self.stage, "first_layer": self.first_layer,
                "end_layer": self.end_layer, "tp_rank": self.tp_rank, "tp_size": self.tp_size,
                "dp_rank": self.dp_rank, "dp_size": self.dp_size,
                "local_batch": self.local_batch}


def slots_of_nodes(nodes: Sequence[Node]) -> tuple[GpuSlot, ...]:
    """Every GPU of ``nodes``, server by server (the order ``tessera plan`` numbers ranks)."""
    return tuple(GpuSlot(n.node_id, n.flavor, i) for n in nodes for i in range(n.gpus))


def slots_of_parts(parts: Sequence[tuple[str, int, GpuFlavor]]) -> tuple[GpuSlot, ...]:
    """Every GPU of a placement's ``(node_id, gpus, flavor)`` parts, in rank order."""
    return tuple(GpuSlot(node, flavor, i) for node, count, flavor in parts for i in range(count))


def assign_ranks(plan: HybridPlan, slots: Sequence[GpuSlot], n_layers: int
                 ) -> tuple[RankRole, ...]:
    """Every GPU's role in ``plan``, in the order of ``slots`` (see the module docstring).

    ``n_layers`` is the model's layer count (a data-parallel rank holds layers
    ``0:n_layers``).

    Raises:
        SpecError: the plan needs more GPUs of a flavor than ``slots`` has, or a
            tensor-parallel group does not fit on one server.
    """
    if plan.dp is not None:
        return _data_parallel(plan, slots, n_layers)
    roles: dict[int, RankRole] = {}
    for flavor in dict.fromkeys(st.flavor for st in plan.stages):
        groups = [(st.tp, copy, k, rep) for k, st in enumerate(plan.stages)
                  if st.flavor == flavor for copy in range(plan.dp_copies)
                  for rep in range(st.replicas)]
        groups.sort(key=lambda g: -g[0])              # largest groups first (stable)
        free = _free_by_node(slots, flavor)
        for tp, copy, k, rep in groups:
            node = next((n for n, idx in free.items() if len(idx) >= tp), None)
            if node is None:
                have = ", ".join(f"{n}: {len(idx)}" for n, idx in free.items()) or "none"
                raise SpecError(f"plan needs a tensor-parallel group of {tp} x {flavor} on one "
                                f"server; free {flavor} GPUs per server: {have}")
            taken, free[node] = free[node][:tp], free[node][tp:]
            st = plan.stages[k]
            per_copy = plan.micro_bsz * plan.n_micro
            share = per_copy // st.replicas + (1 if rep < per_copy % st.replicas else 0)
            for t, r in enumerate(taken):
                roles[r] = RankRole(r, slots[r].device, flavor, k, len(plan.stages),
                                    st.first_layer, st.end_layer, t, tp,
                                    copy * st.replicas + rep, st.replicas * plan.dp_copies,
                                    plan.micro_bsz, plan.n_micro, st.recompute,
                                    st.option.zero, share)
    return tuple(roles.get(r) or _idle(r, slots[r], len(plan.stages))
                 for r in range(len(slots)))


def _free_by_node(slots: Sequence[GpuSlot], flavor: GpuFlavor) -> dict[str, list[int]]:
    """Ranks of ``flavor`` per server, servers and GPUs in name order (so a device's role does
    not depend on the order the devices were listed in)."""
    free: dict[str, list[int]] = {}
    for r in sorted(range(len(slots)), key=lambda r: (slots[r].node_id, slots[r].index)):
        if slots[r].flavor == flavor:
            free.setdefault(slots[r].node_id, []).append(r)
    return free


def _idle(rank: int, slot: GpuSlot, stages: int) -> RankRole:
    return RankRole(rank, slot.device, slot.flavor, -1, stages, 0, 0, 0, 1, 0, 1, 0, 0, False,
                    0, 0)


def _data_parallel(plan: HybridPlan, slots: Sequence[GpuSlot], n_layers: int
                   ) -> tuple[RankRole, ...]:
    """A data-parallel plan's local batches given to the slots of each flavor, in order (the
    planner's servers of one flavor are interchangeable)."""
    assert plan.dp is not None
    by_flavor: dict[GpuFlavor, list[int]] = {}
    for sh in plan.dp.shares:
        by_flavor.setdefault(sh.flavor, []).append(sh.local_bsz)
    order = sorted(range(len(slots)), key=lambda r: (slots[r].node_id, slots[r].index))
    used = [(r, by_flavor[slots[r].flavor].pop(0)) for r in order
            if by_flavor.get(slots[r].flavor)]
    short = {f: len(v) for f, v in by_flavor.items() if v}
    if short:
        raise SpecError("plan uses more GPUs than the device list has: "
                        + ", ".join(f"{n} more {f}" for f, n in short.items()))
    roles = {r: RankRole(r, slots[r].device, slots[r].flavor, 0, 1, 0, n_layers, 0, 1, i,
                         len(used), b, 1, False, 0, b) for i, (r, b) in enumerate(used)}
    return tuple(roles.get(r) or _idle(r, slots[r], 1) for r in range(len(slots)))
