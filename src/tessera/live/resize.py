"""Resizing an elastic job in the live service: checkpoint, then restart at the new size.

An elastic job (:class:`~tessera.model.jobs.ElasticRange`, from a request with a ``gpus`` or
``global_batch`` range) may be given, by a decision, a placement with another GPU count or
another global batch (:attr:`Placement.global_batch_samples
<tessera.sched.core.snapshot.Placement.global_batch_samples>`) than the run it has. The service
resizes it with the contract every job already has -- the one preemption uses:

1. the running run is asked to stop (SIGTERM: the job saves its checkpoint and exits), as a
   *move*, so no retry is charged;
2. the next run is planned at once on the new placement, and a ``resized`` event names the old
   and the new size and batch (``run 3: 2 → 4 GPUs, global batch 128 → 256``);
3. when the old run has exited the next one launches with ``WORLD_SIZE`` of the new gang,
   ``TESSERA_GLOBAL_BATCH`` the new global batch and ``TESSERA_LOCAL_BATCH`` per rank planned
   for it (:mod:`tessera.live.batches`); a ``tessera.train`` job resumes its checkpoint at that
   size (:mod:`tessera.train.resize`).

The number of resizes of a job is the number of its ``resized`` events (:func:`resize_count`;
``tessera job`` shows it). A rigid job's placement never changes its batch: a batch in a rigid
job's placement is ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tessera.live.spec import LiveJob
from tessera.sched.core.snapshot import Placement

RESIZED = "resized"
"""The event kind of a resize."""


@dataclass(frozen=True, slots=True)
class SizeChange:
    """An elastic job's next run at another size.

    Attributes:
        old_gpus / new_gpus: GPUs of the current and of the next run.
        old_batch / new_batch: their global batches (``None``: the job has no batch).
    """

    old_gpus: int
    new_gpus: int
    old_batch: int | None
    new_batch: int | None

    def describe(self) -> str:
        """``2 → 4 GPUs, global batch 128 → 256`` (the batch left out when it has none)."""
        text = f"{self.old_gpus} → {self.new_gpus} GPUs"
        if self.old_batch is not None or self.new_batch is not None:
            text += f", global batch {self.old_batch} → {self.new_batch}"
        return text


def run_batch(job: LiveJob, placement: Placement) -> int | None:
    """The global batch a run of ``job`` on ``placement`` trains at.

    An elastic job's placement may name one; otherwise it is the job's own (``None``: no
    batch). Every rank needs a sample, so a named batch below the gang's size is raised to it.
    """
    batch = placement.global_batch_samples
    if job.elastic is None or batch is None:
        return job.global_batch
    return max(batch, placement.num_gpus)


def size_change(job: LiveJob, old: Placement, new: Placement) -> SizeChange | None:
    """How the next run's size differs from the current run's; ``None`` when it does not
    (a plain move to other GPUs) or the job is rigid."""
    if job.elastic is None:
        return None
    old_batch, new_batch = run_batch(job, old), run_batch(job, new)
    if old.num_gpus == new.num_gpus and old_batch == new_batch:
        return None
    return SizeChange(old.num_gpus, new.num_gpus, old_batch, new_batch)


def out_of_range(job: LiveJob, placement: Placement) -> str | None:
    """Why a decision's placement for ``job`` is outside the job's elastic range, or ``None``.

    Rigid jobs keep their count; an elastic job's count and batch must lie in its range.
    """
    e = job.elastic
    n = placement.num_gpus
    if e is None:
        return None if n == job.spec.num_gpus else \
            f"a rigid job of {job.spec.num_gpus} GPU(s) cannot run on {n}"
    if not e.min_gpus <= n <= e.max_gpus:
        return f"{n} GPUs is outside the job's elastic range {e.min_gpus}-{e.max_gpus}"
    b = placement.global_batch_samples
    if b is not None and not e.initial_batch_samples <= b <= e.max_batch_samples:
        return (f"global batch {b} is outside the job's range {e.initial_batch_samples}-"
                f"{e.max_batch_samples}")
    return None


def resize_count(event_kinds: Iterable[str]) -> int:
    """How many times a job was resized, from its events' kinds."""
    return sum(1 for k in event_kinds if k == RESIZED)
