"""Pending reasons as the service stores them: no other queue's use unless tenants see all.

The decision core's reasons are written for one reader who sees everything (the simulator, the
admin). One of them says more than a tenant may read: a GPU job short of host CPUs or memory
names what running CPU-only jobs hold, per queue (``HostShort.cpu_only``, set by
:func:`~tessera.sched.core.cpu_stage.place_cpu_jobs`) -- another queue's name and use, which a
tenant may not see unless the admin set ``tenants_see_all`` (``docs/security.md``). Reasons are
stored once and served to every reader (``/api/jobs``, ``explain``), so :func:`scoped_reasons`
writes them for the tenant: the job's own queue keeps its figure, the other queues are said to
hold some, unnamed and uncounted. The admin reads every queue's ``used_cpus`` and
``used_memory_gib`` in ``/api/queues``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from tessera.model.jobs import JobId
from tessera.sched.core.host_reasons import HostShort
from tessera.sched.core.reasons import PendingReason

__all__ = ["scoped_reasons"]

#: Said of other queues' CPU-only jobs in a tenant's reason.
OTHERS = "CPU-only jobs of other queues hold some too"


def scoped_reasons(pending: Mapping[JobId, PendingReason], queue_of: Callable[[JobId], str | None],
                   sees_all: bool) -> dict[str, str]:
    """Each pending job's reason as text; unless ``sees_all``, a host shortage names only the
    job's own queue (``queue_of``: a job's queue, looked up only for such reasons)."""
    out: dict[str, str] = {}
    for jid, r in pending.items():
        d = r.detail
        if sees_all or not isinstance(d, HostShort) or not d.cpu_only:
            out[jid] = str(r)
            continue
        queue = queue_of(jid)
        mine = tuple(h for h in d.cpu_only if h[0] == queue)
        text = str(replace(r, detail=replace(d, cpu_only=mine)))
        out[jid] = text if len(mine) == len(d.cpu_only) else f"{text}; {OTHERS}"
    return out
