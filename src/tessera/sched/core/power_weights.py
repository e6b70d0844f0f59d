"""How much a watt is worth to each job under a power budget, for the average JCT.

The budget stage (:mod:`tessera.sched.core.power_budget`) caps where the *weighted*
throughput lost per watt saved is least. Its throughput is per GPU, so a gang's step saves
its GPU count times one board's watts; but the gang is one job, and the average JCT counts
its delay once. Per watt, capping a gang of ``g`` GPUs costs the average JCT ``1/g`` of what
capping a one-GPU job costs: every weight below carries that ``1/g``. The rest depends on
whether jobs queue:

* **jobs wait** (the round leaves some pending): the budget is the shared machine and
  average JCT rewards finishing the smallest jobs first (SRPT; Smith's rule when jobs differ
  in size), so a job weighs ``1 / (remaining_s × g)``, one over its remaining GPU-seconds --
  long jobs and wide gangs are capped (and held) before short ones are touched, and the short
  ones finish and hand on their power and GPUs;
* **nobody waits**: a job weighs ``1/g``. A cap lasts only until the stage decides again --
  at the next completion or arrival, which lifts it as soon as power frees -- so it costs
  each capped job about the same time (the burst times its slowdown), not its whole remaining
  time. Weighing by remaining time here (capping the shortest jobs first, the former rule)
  capped the jobs about to finish, which kept the fast boards busy longer and pushed the next
  arrivals onto slower boards (``docs/energy.md``, "Power budget", the diagnosis).

``remaining_s`` is the job's remaining steps over its rate on the flavor it is placed on (a
job on a K80 has ~3-10× the time left that it would on a V100; the former rule read its
fastest flavor), as the policy sees rates (the oracle's knowledge, as SRTF assumes); a mixed
gang reads its fastest flavor. Weights are rounded down to powers of two (jobs within a
factor of two of each other weigh the same), so the stage can still step the jobs of one kind
together: a few weight classes, not one per job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.snapshot import JobView, Placement, Snapshot

__all__ = ["MAX_CLASS", "power_weights", "remaining_by_job", "remaining_s_on",
           "weight_of_remaining"]

MAX_CLASS = 40
"""The lightest weight is ``2 ** -MAX_CLASS`` (about 35,000 years of remaining work); a job
with unknown or infinite remaining time weighs that."""


def weight_of_remaining(remaining_s: float) -> float:
    """``2 ** -floor(log2(remaining_s))``, clipped to ``[2 ** -MAX_CLASS, 1]``: a job with a
    second or less left weighs 1; each doubling of the remaining time halves the weight."""
    if not (math.isfinite(remaining_s) and remaining_s > 1.0):
        return 1.0 if math.isfinite(remaining_s) else 2.0 ** -MAX_CLASS
    return 2.0 ** -min(math.floor(math.log2(remaining_s)), MAX_CLASS)


def remaining_s_on(job: JobView, placement: Placement, oracle: ThroughputOracle,
                   now_s: float) -> float:
    """Seconds ``job`` has left at ``now_s`` on the flavor of ``placement`` at the rate the
    policy sees (a mixed gang: its fastest flavor); ``inf`` if it cannot run there."""
    rate = 0.0
    if not placement.node_flavors:
        flavor = placement.flavors[0]
        rate = next((r.consolidated for r in oracle.rates(job.spec) if r.flavor == flavor),
                    0.0)
    if rate <= 0.0:
        rate = oracle.best_rate(job.spec)
    return job.remaining_at(now_s) / rate if rate > 0 else math.inf


def remaining_by_job(snapshot: Snapshot, placements: Mapping[JobId, Placement],
                     oracle: ThroughputOracle) -> dict[JobId, float]:
    """:func:`remaining_s_on` of every placed job (a round that both weighs its jobs and
    looks for fast boards, :mod:`~tessera.sched.core.power_refill`, reads them once)."""
    by_id = {j.spec.job_id: j for j in snapshot.jobs}
    now_s = snapshot.now_s
    out: dict[JobId, float] = {}
    # (id of a rates tuple, flavor) -> (the tuple, kept alive so its id is not reused; rate)
    on: dict[tuple[int, GpuFlavor], tuple[object, float]] = {}
    for jid, p in placements.items():
        job = by_id[jid]
        if p.node_flavors:
            out[jid] = remaining_s_on(job, p, oracle, now_s)
            continue
        rates = oracle.rates(job.spec)  # (the oracle's cached tuple: shared by its kind)
        key = (id(rates), p.flavors[0])
        hit = on.get(key)
        if hit is None:
            hit = on[key] = (rates, next((r.consolidated for r in rates
                                          if r.flavor == key[1]), 0.0))
        rate = hit[1]
        out[jid] = (remaining_s_on(job, p, oracle, now_s) if rate <= 0.0
                    else job.remaining_at(now_s) / rate)
    return out


def power_weights(snapshot: Snapshot, placements: Mapping[JobId, Placement],
                  oracle: ThroughputOracle, queued: bool,
                  remaining: Mapping[JobId, float] | None = None) -> Mapping[JobId, float]:
    """The weight of each placed job of ``g`` GPUs: :func:`weight_of_remaining` of its
    remaining GPU-seconds on its placement's flavor while jobs are ``queued``; ``1/g`` (as a
    power of two) when none are. ``remaining``: seconds already known for some jobs at
    these placements (:func:`remaining_by_job`)."""
    if not queued:
        return {jid: weight_of_remaining(float(p.num_gpus)) for jid, p in placements.items()}
    left = dict(remaining or {})
    missing = {jid: p for jid, p in placements.items() if jid not in left}
    if missing:
        left.update(remaining_by_job(snapshot, missing, oracle))
    return {jid: weight_of_remaining(left[jid] * p.num_gpus) for jid, p in placements.items()}
