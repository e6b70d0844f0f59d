"""GPU quota held by runs that are stopping: what ``Snapshot.gpu_draining`` charges.

A driver with grace periods (the live service) leaves a job whose run is stopping out of the
snapshot -- it may not be placed again until the run exits -- and keeps the run's GPUs out of
the free count, so nobody is placed *on* them. Its queue's GPU quota must still count them:
a tenant at its nominal quota that cancels a job (or is preempted) and submits another would
otherwise get the new one placed on other free GPUs at once, its queue holding twice its
quota for each grace period, and for as long as it keeps cancelling and resubmitting.

Both quota rounds read the same field: the plain round's admission (one-number quotas,
:func:`draining_use`) and the tenancy round's :class:`~tessera.sched.core.quota_book.QuotaBook`
(:func:`charge_draining`: per flavor, up the cohort tree). A draining run is never a
preemption victim: it is stopping already. The simulator stops runs at once and sets none.
"""

from __future__ import annotations

from collections.abc import Iterable

from tessera.sched.core.quota_book import QuotaBook
from tessera.sched.core.snapshot import Placement

__all__ = ["charge_draining", "draining_use"]


def draining_use(draining: Iterable[tuple[str, Placement]]) -> dict[str, int]:
    """``{queue: GPUs}`` the stopping runs ``draining`` (``Snapshot.gpu_draining``) hold:
    where the plain round's admission starts counting a queue's use."""
    out: dict[str, int] = {}
    for queue, p in draining:
        out[queue] = out.get(queue, 0) + p.num_gpus
    return out


def charge_draining(book: QuotaBook, draining: Iterable[tuple[str, Placement]],
                    held_by_queue: dict[str, int]) -> None:
    """Charge the stopping runs ``draining`` to ``book`` (per flavor for a per-flavor queue;
    a queue the tenancy does not know is not limited, as for running jobs) and add their GPUs
    to ``held_by_queue`` (fair sharing's usage: the GPUs are held)."""
    for queue, p in draining:
        q = book.queue_of(queue)
        if q is None:
            continue
        held_by_queue[q.name] = held_by_queue.get(q.name, 0) + p.num_gpus
        for k, n in book.charges(q, p):
            book.charge(q.name, k, n)
