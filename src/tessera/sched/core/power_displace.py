"""Displacement under a power budget: a start on a far slower board may wait for a fast one.

Under a binding budget the stage caps running jobs, so each holds its fast board a little
longer -- and an arrival that FIFO or LAS would have put on that board lands on a free slow
one (a K80 is 7-12× slower than a V100 for most of Gavel's jobs) for its whole run. That is
what misses the goal in ``docs/energy.md`` ("Power budget", the diagnosis): displacement, not
the caps themselves.

The rule, pure over the snapshot and the round's placements: a job this round would start on
a board ``SLOW_RATIO`` or more times slower (for it) than some flavor that a *running* job of
at least its GPU count holds waits instead, when that running job's remaining time (at its
uncapped rate, as the policy sees rates) is at most ``WAIT_SHARE`` of what waiting saves:

    wait_s  <=  WAIT_SHARE × (slow_run_s − fast_run_s)

Only the earliest-freeing fast board (not yet promised, with enough GPUs) counts; it is
promised to the start, each board to one start at most, starts in the policy's order. A
held job waits with the power reason; holding it only lowers the cluster's power. Its slow
GPUs do not stay idle behind it: the round is then refilled without the held jobs and the
budget stage run again with the rule off (:mod:`~tessera.sched.core.power_refill`), so the
jobs queued behind take them, and that stage keeps the budget too: it holds at every event
as before. The budget
stage applies the rule only while the budget binds.
"""

from __future__ import annotations

from collections.abc import Mapping

from tessera.model.jobs import JobId
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.power_weights import remaining_s_on
from tessera.sched.core.snapshot import JobView, Placement, Snapshot

__all__ = ["SLOW_RATIO", "WAIT_SHARE", "displaced"]

SLOW_RATIO = 3.0
"""A start is displaced when a running job holds a flavor at least this many times faster."""

WAIT_SHARE = 0.5
"""The longest wait, as a share of the run time that waiting saves."""


def displaced(snapshot: Snapshot, placements: Mapping[JobId, Placement],
              started: tuple[JobId, ...], oracle: ThroughputOracle,
              slow_ratio: float = SLOW_RATIO, wait_share: float = WAIT_SHARE,
              by_id: Mapping[JobId, JobView] | None = None,
              remaining: Mapping[JobId, float] | None = None) -> tuple[JobId, ...]:
    """The jobs of ``started`` (in the policy's order) that should wait for a faster board a
    running job will free soon (see the module docstring); ``by_id``: the snapshot's jobs
    by id, ``remaining``: running jobs' seconds left at these placements
    (:func:`~tessera.sched.core.power_weights.remaining_by_job`), if the caller has them."""
    by_id = by_id if by_id is not None else {j.spec.job_id: j for j in snapshot.jobs}
    wanted = []  # (job, its placement, its rate per flavor): starts that a fast board could win
    for jid in started:
        job, at = by_id[jid], placements.get(jid)
        if at is None or job.running or at.node_flavors:
            continue
        rate = {r.flavor.name: r.consolidated for r in oracle.rates(job.spec)}
        here = rate.get(at.flavors[0].name, 0.0)
        if here > 0.0 and max(rate.values()) >= slow_ratio * here:
            wanted.append((jid, at, rate, here))
    if not wanted:
        return ()
    fast = {f for _j, _at, rate, here in wanted for f, r in rate.items() if r >= slow_ratio * here}
    boards: dict[str, list[tuple[float, int, JobId]]] = {}  # per fast flavor, earliest first
    for jid, p in placements.items():
        job = by_id[jid]
        if job.running and not p.node_flavors and p.flavors[0].name in fast:
            known = remaining.get(jid) if remaining is not None else None
            left_s = known if known is not None else remaining_s_on(job, p, oracle,
                                                                    snapshot.now_s)
            boards.setdefault(p.flavors[0].name, []).append((left_s, p.num_gpus, jid))
    for row in boards.values():
        row.sort()
    promised: set[JobId] = set()
    out: list[JobId] = []
    for jid, at, rate, here in wanted:
        steps = by_id[jid].remaining_at(snapshot.now_s)
        first: tuple[float, JobId, float] | None = None  # the earliest fast board to free
        for flavor, there in rate.items():
            if there < slow_ratio * here:
                continue
            for left_s, gpus, holder in boards.get(flavor, ()):
                if holder in promised or gpus < at.num_gpus:
                    continue
                if first is None or left_s < first[0]:
                    first = (left_s, holder, there)
                break  # per flavor, its earliest-freeing board
        if first is not None and first[0] <= wait_share * (steps / here - steps / first[2]):
            promised.add(first[1])
            out.append(jid)
    return tuple(out)
