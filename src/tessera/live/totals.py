"""Per-queue caps on what a tenant keeps in the service: stored jobs, unfinished jobs, bytes.

The per-request limits (:mod:`tessera.live.limits`) bound one submission; these bound the sum,
so one tenant cannot fill the store, the memory or the dashboard with jobs that are each
within limits (issue 30: 300 jobs of a megabyte of ``env`` each took the service from 149 MB to
a gigabyte). Three caps per queue:

=====================  ==========  ===============================================================
 cap                    default     counts
=====================  ==========  ===============================================================
 ``max_queued_jobs``    1,000       unfinished jobs (pending, admitted, running)
 ``max_stored_jobs``    10,000      every stored job of the queue, finished ones included
 ``max_stored_bytes``   256 MiB     the stored spec JSON of those jobs: ``command``, ``env`` and
                                    every other field (what the store and its backups hold)
=====================  ==========  ===============================================================

The defaults are set for every queue in the ``limits:`` section of ``tessera-live.yaml``
(``queue_queued_jobs``, ``queue_stored_jobs``, ``queue_stored_bytes``), and per queue beside its
quota::

    limits: {queue_queued_jobs: 500}
    queues:
      - {name: vision, nominal_gpus: 8, max_queued_jobs: 2000, max_stored_bytes: 1073741824}

**What happens at a cap.** A submission that would pass ``max_queued_jobs`` is refused **429**
with a detail that names the cap; it succeeds again once some of the queue's jobs finish (or are
cancelled). At ``max_stored_jobs`` or ``max_stored_bytes`` the queue's **oldest finished jobs
are deleted** (with their events and run records; a ``pruned`` event says how many) to make
room, 1 % of the cap more than the submission needs so that pruning is not paid at every
submission -- a finished job's record is history, and a full history must not stop a tenant's
work. A
job that is not finished, or a cancelled one whose run still drains, is never deleted: when the
unfinished jobs alone fill the cap, the submission is refused 429 instead. The caps are checked
when a submission is admitted, against what the store holds, so submissions admitted
concurrently (one group commit of :mod:`tessera.live.intake`, or the requests the API's worker
threads serve at once) can pass a cap by at most their number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessera.errors import SpecError

if TYPE_CHECKING:
    from tessera.live.store import Store


@dataclass(frozen=True, slots=True)
class QueueCaps:
    """One queue's caps (see the module docstring)."""

    stored_jobs: int = 10_000
    queued_jobs: int = 1_000
    stored_bytes: int = 256 * 1024 * 1024


class OverCap(SpecError):
    """A submission over one of its queue's caps (answered 429; the message names the cap)."""


def check_totals(store: Store, queue: str, caps: QueueCaps, spec_bytes: int,
                 now_s: float) -> None:
    """Make room for one more job of ``spec_bytes`` in ``queue``, or refuse it.

    Deletes the queue's oldest finished jobs when the stored caps need it (never one that is
    not finished).

    Raises:
        OverCap: the queue is at ``max_queued_jobs``, or its unfinished jobs alone leave no
            room under ``max_stored_jobs`` or ``max_stored_bytes``.
    """
    queued = store.count_unfinished(queue, most=caps.queued_jobs)
    if queued >= caps.queued_jobs:
        raise OverCap(f"queue {queue!r} is at its cap of {caps.queued_jobs} unfinished jobs "
                      "(max_queued_jobs); submit again when some have finished")
    if spec_bytes > caps.stored_bytes:
        raise OverCap(f"this job's spec takes {spec_bytes} bytes, more than queue {queue!r} "
                      f"may store in all (max_stored_bytes: {caps.stored_bytes})")
    count, size = store.queue_totals(queue)
    need_jobs = count + 1 - caps.stored_jobs
    need_bytes = size + spec_bytes - caps.stored_bytes
    if need_jobs <= 0 and need_bytes <= 0:
        return
    # Beyond what this job needs, 1 % of the cap more, so that a queue at its cap prunes once
    # per hundred submissions rather than at every one.
    # Nothing is deleted unless deleting makes room for this job.
    store.prune_finished(queue, need_jobs + caps.stored_jobs // 100 if need_jobs > 0 else 0,
                         need_bytes + caps.stored_bytes // 100 if need_bytes > 0 else 0, now_s,
                         needed=(max(need_jobs, 0), max(need_bytes, 0)))
    count, size = store.queue_totals(queue)
    if count + 1 > caps.stored_jobs:
        raise OverCap(f"queue {queue!r} is at its cap of {caps.stored_jobs} stored jobs "
                      "(max_stored_jobs) and none of them has finished; submit again when "
                      "some have")
    if size + spec_bytes > caps.stored_bytes:
        raise OverCap(f"queue {queue!r} is at its cap of {caps.stored_bytes} stored bytes "
                      f"(max_stored_bytes; {size} held by unfinished jobs, this job needs "
                      f"{spec_bytes}); submit again when some have finished")
