"""The world's running jobs, with the GPUs they ask for counted as they start and stop.

Every ``sample_every_s`` the world records how many GPUs the running jobs hold
(:class:`~tessera.sim.metrics.Sample`). Summing them at each sample walked every running job
-- a few hundred on the full Philly table, at every sample of a year-long trace -- although
between two samples only the jobs that started or stopped change the sum. A
:class:`RunningJobs` mapping keeps the sum as jobs join and leave it, whoever changes it (the
world's transitions, or a driver that clears it at a round's end).
"""

from __future__ import annotations

from tessera.sim.state import SimJob


class RunningJobs(dict[int, SimJob]):
    """Running jobs by index; :attr:`gpus` is ``sum(j.spec.num_gpus for j in self.values())``,
    kept up to date by every change (the integer sum is exact, so it equals a fresh one).

    Only the changes below are supported (others raise ``TypeError``, so none is missed).
    """

    __slots__ = ("gpus",)

    def __init__(self) -> None:
        super().__init__()
        self.gpus = 0
        """GPUs the running jobs ask for (``spec.num_gpus``; an elastic gang may hold others)."""

    def __setitem__(self, idx: int, job: SimJob) -> None:
        old = self.get(idx)
        if old is not None:
            self.gpus -= old.spec.num_gpus
        super().__setitem__(idx, job)
        self.gpus += job.spec.num_gpus

    def __delitem__(self, idx: int) -> None:
        self.gpus -= self[idx].spec.num_gpus
        super().__delitem__(idx)

    def pop(self, idx: int, *default: SimJob | None) -> SimJob | None:  # type: ignore[override]
        if idx in self:
            self.gpus -= self[idx].spec.num_gpus
        return super().pop(idx, *default)

    def clear(self) -> None:
        super().clear()
        self.gpus = 0

    def _refuse(self, *_args: object, **_kwargs: object) -> None:
        raise TypeError("RunningJobs supports item assignment, del, pop and clear only")

    popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]
