"""How much a watt is worth to each job under a power budget, for the average JCT.

The budget stage (:mod:`tessera.sched.core.power_budget`) caps where the *weighted*
throughput lost per watt saved is least. The weight depends on whether jobs queue:

* **jobs wait** (the round leaves some pending): the budget is the shared machine and
  average JCT rewards finishing short jobs first (SRPT is optimal on one machine), so a
  job's throughput counts ``1 / remaining_s`` -- long jobs are capped (and held) before
  short ones are touched, and the short ones finish and hand on their power and GPUs;
* **nobody waits**: a cap delays only its own job, by its remaining time times the
  slowdown, so a job's throughput counts ``remaining_s`` -- short jobs are capped first.

``remaining_s`` is the job's remaining steps over its rate on its fastest flavor (the
oracle's knowledge, as SRTF assumes). Weights are rounded down to powers of two (jobs
within a factor of two of each other weigh the same), so the stage can still step the jobs
of one kind together: a few weight classes, not one per job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from tessera.model.jobs import JobId
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import Snapshot

__all__ = ["MAX_CLASS", "power_weights", "weight_of_remaining"]

MAX_CLASS = 40
"""The lightest weight is ``2 ** -MAX_CLASS`` (about 35,000 years of remaining work); a job
with unknown or infinite remaining time weighs that."""


def weight_of_remaining(remaining_s: float) -> float:
    """``2 ** -floor(log2(remaining_s))``, clipped to ``[2 ** -MAX_CLASS, 1]``: a job with a
    second or less left weighs 1; each doubling of the remaining time halves the weight."""
    if not (math.isfinite(remaining_s) and remaining_s > 1.0):
        return 1.0 if math.isfinite(remaining_s) else 2.0 ** -MAX_CLASS
    return 2.0 ** -min(math.floor(math.log2(remaining_s)), MAX_CLASS)


def power_weights(snapshot: Snapshot, jobs: Iterable[JobId], oracle: ThroughputOracle,
                  queued: bool) -> Mapping[JobId, float]:
    """The weight of each of ``jobs`` from its remaining time on its fastest flavor:
    :func:`weight_of_remaining` while jobs are ``queued``, its inverse when none are."""
    by_id = {j.spec.job_id: j for j in snapshot.jobs}
    out: dict[JobId, float] = {}
    for jid in jobs:
        job = by_id[jid]
        rate = oracle.best_rate(job.spec)
        rem_s = job.remaining_at(snapshot.now_s) / rate if rate > 0 else math.inf
        w = weight_of_remaining(rem_s)
        out[jid] = w if queued else 1.0 / w
    return out
