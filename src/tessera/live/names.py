"""Which job ids a caller may read, and answers with the others counted, never named.

A tenant sees only its own queue's jobs: another queue's job is a 404, the same answer as an
id that does not exist, so ids cannot be probed (``docs/security.md``). Some answers about a
tenant's own job still touch other jobs -- ``explain``'s what-if would preempt a job of
another queue; a packing policy puts a job of another sharing queue on the same GPUs, and the
placement says "(shared with <id>)", the job's ``sharing`` events "with job <id>". To a tenant,
such a job is counted or called "a job of another queue"; the admin reads every id.

:class:`JobNames` answers "may this caller read this id?" with one store read per id it has
not seen (an answer's own jobs are given up front, so a listing costs no extra read), and
:meth:`JobNames.scrub` is the last step of every job answer to a tenant: it rewrites any job id
of another queue left in the answer's text. It rewrites an id that names no job at all just the
same, so a tenant who writes a guessed id into its own job's name learns nothing from the
answer (the rewrite is no oracle for which ids exist). Queue names are rewritten the same way:
the decision core's texts name the queue a preemption was for (``quota preemption: to admit
<id> (queue 'team-b')``, ``... gives its CPUs and memory to GPU job <id> (queue 'team-b',
...)``), and another queue's name is not a tenant's to read unless the admin set
``tenants_see_all`` -- ``queue 'team-b'`` reads "another queue", whether or not it exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tessera.live.tenancy import Principal
from tessera.live.where import describe

if TYPE_CHECKING:
    from tessera.live.store import JobRecord, Store
    from tessera.sched.core.snapshot import Placement

#: A job id as the service mints them (``"j-" + secrets.token_hex(5)``).
JOB_ID = re.compile(r"\bj-[0-9a-f]{10}\b")
#: What a tenant reads in place of the id of another queue's job.
OTHER = "a job of another queue"
#: A queue named in the decision core's texts (``queue {name!r}``; names are ``NAME_PATTERN``).
QUEUE = re.compile(r"\bqueue '([a-z0-9][-a-z0-9]*)'")
#: What a tenant reads in place of another queue's name.
OTHER_QUEUE = "another queue"


class JobNames:
    """The job ids one caller may read: the admin every one, a tenant its queue's. An id the
    store does not know (a job since purged) is never named to a tenant.

    Args:
        store: where an id's queue is looked up.
        who: the caller.
        known: jobs whose queues are already known (those of the answer), read no more.
        sees_queues: the caller may read every queue's name (``tenants_see_all``); else a
            tenant's answers name only its own queue.
    """

    def __init__(self, store: Store, who: Principal, known: Iterable[JobRecord] = (), *,
                 sees_queues: bool = False) -> None:
        self._store, self._who = store, who
        self._sees_queues = sees_queues
        self._queues: dict[str, str | None] = {r.job_id: r.queue for r in known}

    def may_name(self, job_id: str) -> bool:
        """Whether the caller may read ``job_id``."""
        if self._who.admin:
            return True
        if job_id not in self._queues:
            rec = self._store.get(job_id)
            self._queues[job_id] = rec.queue if rec is not None else None
        queue = self._queues[job_id]
        return queue is not None and self._who.may_see(queue)

    def visible(self, job_ids: list[str]) -> list[str]:
        """The ids of ``job_ids`` the caller may read, in order."""
        return [j for j in job_ids if self.may_name(j)]

    def names(self, job_ids: list[str]) -> str:
        """``j-1, j-2``, with the ids the caller may not read counted: ``j-1 and 2 jobs of
        other queues``; ``1 job of another queue``."""
        shown = self.visible(job_ids)
        hidden = len(job_ids) - len(shown)
        if not hidden:
            return ", ".join(shown)
        other = (f"{hidden} job of another queue" if hidden == 1 else
                 f"{hidden} jobs of other queues")
        return f"{', '.join(shown)} and {other}" if shown else other

    def describe(self, p: Placement) -> str:
        """:func:`~tessera.live.where.describe`, with the partners sharing the GPUs named as
        :meth:`names` does."""
        mates = [str(j) for j in p.colocated_with]
        if all(self.may_name(j) for j in mates):
            return describe(p)
        return f"{describe(replace(p, colocated_with=()))} (shared with {self.names(mates)})"

    def scrub(self, answer: Any) -> Any:
        """``answer`` (JSON: dicts, lists, strings, numbers) with every job id the caller may
        not read, in any string, replaced by :data:`OTHER`, and every other queue's name by
        :data:`OTHER_QUEUE` (unless ``sees_queues``); the admin's answer as it is."""
        if self._who.admin:
            return answer
        if isinstance(answer, str):
            if "j-" in answer:  # (most strings: no regex run)
                answer = JOB_ID.sub(lambda m: m[0] if self.may_name(m[0]) else OTHER, answer)
            if "queue '" in answer and not self._sees_queues:
                answer = QUEUE.sub(lambda m: m[0] if m[1] == self._who.queue else OTHER_QUEUE,
                                   answer)
            return answer
        if isinstance(answer, dict):
            return {k: self.scrub(v) for k, v in answer.items()}
        if isinstance(answer, list):
            return [self.scrub(v) for v in answer]
        return answer
