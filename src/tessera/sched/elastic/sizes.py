"""Elastic allocations in the decision core: a policy sizes jobs, the core places them.

An *ordering* policy returns ``(job, flavor)`` candidates and every job is placed at its own
``spec.num_gpus``. An *elastic allocation* policy (Pollux, Sia, ``goodput_srpt``) also chooses
each elastic job's GPU count and global batch: it lists the job's candidate flavor as usual and
adds an :class:`ElasticSize` in ``Ranking.sizes``. The core then

1. swaps each sized job's view for one whose ``spec.num_gpus`` is the chosen count
   (:func:`sized_views`), so gang placement, locality, preemption and pending reasons work
   unchanged on the resized job;
2. places the ranking as for any round-based policy (a running gang whose flavor and count are
   unchanged keeps its GPUs -- and its current batch: a batch change alone is the job's own
   business, as in AdaptDL, never a restart);
3. writes the chosen batch into every *new* placement of a sized job
   (:func:`with_batches`), ``Placement.global_batch_samples``.

Rigid jobs never appear in ``sizes`` and are placed exactly as before; a ranking with empty
``sizes`` takes none of these steps.

**Quotas cap growth.** Admission counts a queue's running jobs at the GPUs they hold and its
pending jobs at their own size. An elastic policy may then ask for more; before placing,
:func:`within_quotas` grants each job's growth (above its own size) in ranking order only
while its queue stays within nominal quota plus borrowing limit; a job whose growth does not
fit runs at its own size, with a note saying why. Growth is granted whole or not at all: a
smaller count than the policy chose would need another batch, which only the policy knows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tessera.errors import SpecError
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobId
from tessera.sched.core.snapshot import JobView, Placement, QueueQuota


@dataclass(frozen=True, slots=True)
class ElasticSize:
    """What an elastic allocation policy chose for one job this round.

    Attributes:
        num_gpus: GPUs of its gang (within its ``ElasticRange``).
        global_batch_samples: the global batch it should run at on that gang.
    """

    num_gpus: int
    global_batch_samples: int

    def __post_init__(self) -> None:
        if self.num_gpus < 1 or self.global_batch_samples < 1:
            raise SpecError(
                f"elastic size needs >= 1 GPU and a batch >= 1, got {self.num_gpus} GPUs at "
                f"batch {self.global_batch_samples}"
            )


def even_batch(batch: float, num_gpus: int, low: int, high: int) -> int | None:
    """The global batch nearest ``batch`` that splits evenly over ``num_gpus`` ranks within
    ``[low, high]``, or ``None`` when no multiple of ``num_gpus`` lies in that range.

    Data parallelism gives every rank ``batch / num_gpus`` samples; a batch such as 513 over 4
    ranks would give one rank a sample more than the others (and a different gradient weight).
    Ties round down (the smaller batch is the statistically more efficient one).

    >>> even_batch(513, 4, 128, 1024), even_batch(130, 8, 129, 135)
    (512, None)
    """
    if num_gpus < 1:
        raise SpecError(f"a batch is split over at least 1 rank, got {num_gpus}")
    down = int(batch // num_gpus) * num_gpus
    options = [b for b in (down, down + num_gpus) if low <= b <= high]
    if not options:
        first = -(-low // num_gpus) * num_gpus
        return first if first <= high else None
    return min(options, key=lambda b: (abs(b - batch), b))


def sized_views(
    jobs: Sequence[JobView], sizes: Mapping[JobId, ElasticSize]
) -> list[JobView]:
    """``jobs`` with each sized job's ``spec.num_gpus`` set to its chosen count.

    Raises:
        SpecError: a size outside the job's elastic range, or a size for a rigid job.
    """
    out: list[JobView] = []
    for j in jobs:
        size = sizes.get(j.spec.job_id)
        if size is None or size.num_gpus == j.spec.num_gpus:
            out.append(j)
            continue
        e = j.spec.elastic
        if e is None:
            raise SpecError(f"job {j.spec.job_id} is rigid: a policy may not resize it")
        if not e.min_gpus <= size.num_gpus <= e.max_gpus:
            raise SpecError(
                f"job {j.spec.job_id}: {size.num_gpus} GPUs is outside its elastic range "
                f"{e.min_gpus}-{e.max_gpus}"
            )
        out.append(replace(j, spec=replace(j.spec, num_gpus=size.num_gpus)))
    return out


def with_batches(
    run: dict[JobId, Placement], before: Mapping[JobId, JobView],
    sizes: Mapping[JobId, ElasticSize],
) -> dict[JobId, Placement]:
    """``run`` with the chosen batch on every new placement of a sized job (kept gangs keep
    theirs)."""
    for jid, p in run.items():
        size = sizes.get(jid)
        if size is None or before[jid].placement is p:
            continue
        if p.global_batch_samples != size.global_batch_samples:
            run[jid] = replace(p, global_batch_samples=size.global_batch_samples)
    return run


@dataclass(frozen=True, slots=True)
class QuotaCapped:
    """The sizes a round may place within the queues' quotas, and a note per capped job."""

    sizes: Mapping[JobId, ElasticSize]
    notes: Mapping[JobId, str]


def within_quotas(
    candidates: tuple[tuple[JobId, GpuFlavor], ...], jobs: Mapping[JobId, JobView],
    sizes: Mapping[JobId, ElasticSize], quotas: Mapping[str, QueueQuota],
    draining: Mapping[str, int] | None = None,
) -> QuotaCapped:
    """``sizes`` with every growth that would take a queue past its quota taken back.

    Each listed job first counts at its *base*: its own ``spec.num_gpus``, or the chosen
    count when that is smaller (a shrink always fits). Then, in ranking order, a job chosen
    above its base gets the extra GPUs only if its queue's total stays within
    ``nominal_gpus + borrowing_limit_gpus``; otherwise its size is dropped (it runs at its own
    size and batch) and the note says so. Queues without a quota are not touched; candidates
    that admission held (not in ``jobs``) are skipped. ``draining`` (``{queue: GPUs}``, from
    ``Snapshot.gpu_draining``): GPUs the queue's stopping runs still hold, counted first -- a
    job may not grow into quota a cancelled or preempted run has not given back yet.
    """
    if not quotas or not sizes:
        return QuotaCapped(sizes, {})
    used: dict[str, int] = dict(draining or {})
    listed = list(dict.fromkeys(jid for jid, _ in candidates if jid in jobs))
    for jid in listed:
        spec = jobs[jid].spec
        size = sizes.get(jid)
        base = spec.num_gpus if size is None else min(spec.num_gpus, size.num_gpus)
        used[spec.queue] = used.get(spec.queue, 0) + base
    kept = dict(sizes)
    notes: dict[JobId, str] = {}
    for jid in listed:
        spec = jobs[jid].spec
        size = sizes.get(jid)
        q = quotas.get(spec.queue)
        if size is None or q is None or size.num_gpus <= spec.num_gpus:
            continue
        borrow = q.borrowing_limit_gpus
        limit = q.nominal_gpus + (borrow if borrow is not None else 1 << 30)
        extra = size.num_gpus - spec.num_gpus
        if used[spec.queue] + extra <= limit:
            used[spec.queue] += extra
            continue
        del kept[jid]
        notes[jid] = (f"growth to {size.num_gpus} GPUs refused: queue {q.name} would hold "
                      f"{used[spec.queue] + extra} GPUs, over its limit of {limit}; runs at "
                      f"its own {spec.num_gpus}")
    return QuotaCapped(kept, notes)
