"""Ask the core before it decides: where would a round put these gangs, and would one split?

A round-based round (:func:`~tessera.sched.core.strategies.place_rounds`) places a policy's
selection in a fixed way: the selected running gangs stay where they run, then the new gangs
go largest first, each on one node when a node of its flavor has room (best fit), else spread
over several nodes. A policy that cares *where* its jobs land -- ``hetero_srpt`` clears a
node for a gang that would otherwise be split -- asks :func:`preview` instead of re-writing
that walk itself::

    pv = preview(up_nodes, layout, [(job, flavor), ...])   # the selection, in rank order
    if pv is not None:
        for job, flavor in pv.new:                      # the core's order: largest first
            if pv.would_split(job, flavor):
                ...                                     # e.g. stop small jobs of one node
            pv.place(job, flavor)                       # then take what the core would take

The preview is a scratch copy of the free GPUs: :meth:`GangPreview.release` (a gang the policy
will stop) and :meth:`GangPreview.place` change it, never the snapshot. Pure, no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tessera.model.cluster import Node
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobState
from tessera.sched.core.free_view import Layout
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.snapshot import JobView, Placement

_RUNNING = JobState.RUNNING


@dataclass(slots=True)
class GangPreview:
    """A round's placement, replayed for the policy; see the module docstring.

    Attributes:
        free: the free GPUs once the kept gangs hold theirs (a scratch copy).
        new: the selected gangs the core will place, with their flavor, largest first (ties
            in selection order) -- the order the core places them in.
        occupants: per node, the kept gangs that run on that node alone, in selection order
            (who could be stopped to clear that node).
        node_max: GPUs of the largest node of each flavor (a larger gang always spreads).
    """

    free: FreeGpus
    new: list[tuple[JobView, GpuFlavor]]
    occupants: dict[str, list[JobView]]
    node_max: Mapping[GpuFlavor, int]

    def on_one_node(self, job: JobView, flavor: GpuFlavor) -> Placement | None:
        """Where the core would put ``job``'s gang on one node of ``flavor`` now (best fit),
        or ``None``: no node has room, or the gang is larger than every node."""
        g = job.spec.num_gpus
        if g > self.node_max.get(flavor, 0):
            return None
        return self.free.find(flavor, g, True)

    def would_split(self, job: JobView, flavor: GpuFlavor) -> bool:
        """Whether a gang of more than one GPU that one node of ``flavor`` could hold finds
        no node with room now, so the core would spread it over several nodes."""
        g = job.spec.num_gpus
        return 1 < g <= self.node_max.get(flavor, 0) and self.on_one_node(job, flavor) is None

    def place(self, job: JobView, flavor: GpuFlavor) -> Placement | None:
        """Take what the core would give ``job`` on ``flavor`` (one node, else spread) and
        return it, or ``None`` when the free GPUs of ``flavor`` cannot hold the gang."""
        placed = self.on_one_node(job, flavor)
        if placed is None:
            placed = self.free.find(flavor, job.spec.num_gpus, False)
        if placed is not None:
            self.free.take(placed)
        return placed

    def take(self, placement: Placement) -> None:
        """Hold ``placement``'s GPUs (a gang the policy places itself)."""
        self.free.take(placement)

    def release(self, placement: Placement) -> None:
        """Give ``placement``'s GPUs back (a kept gang the policy will stop this round)."""
        self.free.release(placement)

    def free_on(self, node_id: str) -> int:
        """Free GPUs on ``node_id`` now."""
        return self.free.free_on(node_id)


def preview(
    nodes: tuple[Node, ...], layout: Layout, selected: Sequence[tuple[JobView, GpuFlavor]]
) -> GangPreview | None:
    """Replay the core's round placement of ``selected`` (``(job, flavor)``, rank order) on
    the up ``nodes`` (their ``layout``).

    Returns ``None`` when no gang can split: every kept gang fits its nodes and no new gang
    has more than one GPU (most rounds, when hardly anyone waits) -- answered without a replay.

    A selected job is *kept* when it runs on the flavor it was selected for; kept gangs are
    taken first, each where it runs. When their GPUs fit their nodes none can fail to take
    its place, so the free counts are the nodes' less the kept GPUs. Otherwise they are taken
    one by one, and one that finds its GPUs taken (a gang shared by two jobs) is new.
    """
    capacity = layout.capacity
    used, new = _kept(selected)
    fits = all(capacity.get(node_id, 0) >= count for node_id, count in used.items())
    if fits and all(j.spec.num_gpus <= 1 for j, _fl in new):
        return None
    occupants: dict[str, list[JobView]] = {}
    if fits:
        free = FreeGpus(nodes, {node_id: capacity[node_id] - count
                                for node_id, count in used.items()}, layout)
        fresh = {j.job_id for j, _fl in new}
        for j, _fl in selected:
            p = j.placement
            if p is not None and p.consolidated and j.job_id not in fresh:
                occupants.setdefault(p.gpus_by_node[0][0], []).append(j)
    else:
        free = FreeGpus(nodes, None, layout)
        new = []
        for j, fl in selected:
            p = j.placement
            if j.running and p is not None and p.sole_flavor == fl and free.take_if_free(p):
                if p.consolidated:
                    occupants.setdefault(p.gpus_by_node[0][0], []).append(j)
            else:
                new.append((j, fl))
    new.sort(key=lambda e: -e[0].spec.num_gpus)
    return GangPreview(free, new, occupants, layout.size)


def _kept(selected: Sequence[tuple[JobView, GpuFlavor]]
          ) -> tuple[dict[str, int], list[tuple[JobView, GpuFlavor]]]:
    """The GPUs per node of the selected jobs that stay where they run (running on the
    flavor they were selected for), and the others with that flavor, in order."""
    used: dict[str, int] = {}
    new: list[tuple[JobView, GpuFlavor]] = []
    for j, fl in selected:
        p = j.placement
        if j.state is _RUNNING and p is not None and p.sole_flavor == fl:
            for node_id, count in p.gpus_by_node:
                used[node_id] = used.get(node_id, 0) + count
        else:
            new.append((j, fl))
    return used, new
