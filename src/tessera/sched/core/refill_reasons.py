"""The waiting jobs' reason *kinds* after the power refill (``--power-fast-boards``).

The cheap refill (:mod:`~tessera.sched.core.power_refill`) keeps the round's reasons for the
jobs still waiting instead of explaining every waiting job again. Their texts may then quote
free counts from before the refill (documented), but the *kind* must be what deciding the
round again would give: the simulator books a waiting job's time by kind and decides again
when a ``FRAGMENTATION`` job's locality wait runs out (``sim/drivers/heap.py``). A job that
waited for ``CAPACITY`` in the round can be ``FRAGMENTATION`` after the refill: the held
job's slow GPUs are free again, so enough GPUs of a flavor are free but on no one node
(found by a review: LAS, locality wait 600 s, a 4-GPU gang left with 3 + 1 free K80s; it
then waited past its locality wait for the next event). And the other way round: a
``FRAGMENTATION`` job whose free GPUs the backfill took is short of capacity.

Only a multi-GPU job's kind can change (one GPU is never fragmented), and a ``CAPACITY`` one
only where a flavor it can use has as many free GPUs as it needs but not on one node; those
few (and every ``FRAGMENTATION`` one) are explained again over the refill's free GPUs, and
take the new reason where its kind differs. At 2,048 jobs that is a handful of jobs, not the
~1,250 a full explanation reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.free_view import BlockInfo
from tessera.sched.core.options import PlacementOptions, needs_locality
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.reasons import NoCapacity, PendingKind, PendingReason, pending_reasons
from tessera.sched.core.snapshot import Snapshot

__all__ = ["rekinded"]


def rekinded(pending: Mapping[JobId, PendingReason], snapshot: Snapshot, free: FreeGpus,
             candidates: tuple[tuple[JobId, GpuFlavor], ...], oracle: ThroughputOracle,
             now_s: float, opts: PlacementOptions) -> dict[JobId, PendingReason]:
    """The reasons of ``pending`` whose kind ``free`` (the GPUs left free by the refill's
    placements) changes, explained again; the others are left out (they keep theirs).

    Args:
        pending: the refilled round's reasons (the round's, for the jobs still waiting).
        snapshot: the round's snapshot (its jobs and cluster).
        free: the free GPUs after the refill placed its jobs.
        candidates: the ranking the reasons' rank positions count in.
        oracle: the round's oracle (its real rates name a job's flavors).
        now_s: the round's time (a gang's locality wait).
        opts: the round's placement options (``largest_node_gpus`` filled in, as ``decide``
            does).
    """
    infos: dict[GpuFlavor, BlockInfo] = {fl: free.info(fl) for fl in free.flavors()}
    split = [(i.largest_block + 1, i.total_free) for i in infos.values()
             if i.total_free > i.largest_block]  # gang sizes free on no one node
    lo = min((a for a, _b in split), default=1 << 30)
    hi = max((b for _a, b in split), default=0)
    ids: set[JobId] = set()
    for jid, why in pending.items():  # (~1,250 reasons at 2,048 jobs: kept to a few tests)
        if why.kind is PendingKind.FRAGMENTATION:
            ids.add(jid)
        elif why.kind is PendingKind.CAPACITY:
            d = why.detail
            if (type(d) is NoCapacity and lo <= d.needs_gpus <= hi
                    and any(fl in infos and infos[fl].total_free >= d.needs_gpus
                            > infos[fl].largest_block for fl in d.flavors)):
                ids.add(jid)
    if not ids:
        return {}
    again = [j for j in snapshot.jobs if j.spec.job_id in ids]
    new = pending_reasons(again, candidates, oracle, free,
                          {j.spec.job_id: needs_locality(j, now_s, opts) for j in again})
    return {jid: why for jid, why in new.items() if why.kind is not pending[jid].kind}
