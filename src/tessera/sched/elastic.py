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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera.errors import SpecError
from tessera.model.jobs import JobId
from tessera.sched.snapshot import JobView, Placement


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
    jobs: list[JobView], sizes: Mapping[JobId, ElasticSize]
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
