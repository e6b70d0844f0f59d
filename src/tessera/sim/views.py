"""The world's book of job views: each snapshot rebuilds only what changed since the last one.

The decision core reads frozen :class:`~tessera.sched.core.snapshot.JobView` values, split into the
running jobs and the waiting ones (:class:`~tessera.sched.core.snapshot.JobSplit`). Building a view
per active job at every event (a few hundred on the full Philly table, 75,000 events) was a
sixth of an event-driven run, and splitting them by state another tenth, although between two
events only the jobs that arrived, started, stopped or finished change. A :class:`ViewBook`
keeps the active jobs' views and the waiting ones among them, and learns which jobs changed:

* a job's view is dropped (``job.view = None``, wherever that happens) -- the job notes its
  index in the book's ``stale`` table (:attr:`tessera.sim.state.SimJob.stale`);
* a job joins or leaves the world's active set, an :class:`ActiveJobs` mapping that notes
  every change of its keys in the same table (a driver that deletes a finished job from it
  directly is followed too).

At the next snapshot only those jobs are looked at. Active jobs are kept in index order (they
arrive in index order; a retried one is sorted back in), so the book's views come out in the
active jobs' order, and the waiting ones sorted by index do too. The running jobs are picked
out of the snapshot's jobs only if a round asks for all of them (an event round that starts a
newcomer does not). Given a plain mapping instead of an :class:`ActiveJobs`, the book checks
its order against the mapping's (in C) and rebuilds on any difference, so a snapshot is always
exactly the views of the active jobs, in their order, split by state -- the same value as
building every view anew.

The book also follows which running gangs the decision core may still want to move to faster
GPUs (those its :class:`~tessera.sched.core.context.StayPut` memory does not hold): the gangs
started since the last snapshot, plus those that were not held then. It hands them to the
memory as a hint (:meth:`~tessera.sched.core.context.StayPut.narrow`), so a round looks at a few
gangs instead of every running one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from tessera.model.jobs import JobState
from tessera.sched.core.context import StayPut
from tessera.sched.core.snapshot import JobSplit, JobView
from tessera.sim.state import SimJob

_RUNNING = JobState.RUNNING


class ActiveJobs(dict[int, SimJob]):
    """The world's active jobs by index, kept in index order, noting every key that joins or
    leaves in ``changes`` (a view book's ``stale`` table).

    Only the changes below are supported (others raise ``TypeError``, so none is missed).
    """

    __slots__ = ("changes",)

    def __init__(self, changes: dict[int, None]) -> None:
        super().__init__()
        self.changes = changes

    def __setitem__(self, idx: int, job: SimJob) -> None:
        if idx not in self:
            self.changes[idx] = None
            if self and idx < next(reversed(self)):  # (a retry rejoins among later jobs)
                items = sorted([*self.items(), (idx, job)])
                super().clear()
                super().update(items)
                return
        super().__setitem__(idx, job)

    def __delitem__(self, idx: int) -> None:
        super().__delitem__(idx)
        self.changes[idx] = None

    def pop(self, idx: int, *default: SimJob | None) -> SimJob | None:  # type: ignore[override]
        if idx in self:
            self.changes[idx] = None
        return super().pop(idx, *default)

    def _refuse(self, *_args: object, **_kwargs: object) -> None:
        raise TypeError("ActiveJobs supports item assignment, del and pop only")

    clear = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]


class ViewBook:
    """The active jobs' views between snapshots (see the module docstring).

    Args:
        jobs: every job of the run, by index (each is told to report to this book).
    """

    __slots__ = ("_jobs", "_memory", "_open", "_split", "_views", "_waiting", "stale")

    def __init__(self, jobs: Sequence[SimJob]) -> None:
        self._jobs = jobs
        self._views: dict[int, JobView] = {}
        self._waiting: dict[int, JobView] = {}
        self._open: dict[int, JobView] = {}
        """Running jobs the move memory may not hold (a superset of those it does not)."""
        self._memory: tuple[StayPut, int] | None = None
        """The move memory (and its generation) the open gangs were last checked against."""
        self._split: JobSplit | None = None
        self.stale: dict[int, None] = {}
        """Jobs whose view changed or who joined or left the active set, in the order noted."""
        for j in jobs:
            j.stale = self.stale

    def active_jobs(self) -> ActiveJobs:
        """An empty active set that reports its changes to this book."""
        return ActiveJobs(self.stale)

    def touch(self, idx: int) -> None:
        """Note that job ``idx`` joined or left the active set."""
        self.stale[idx] = None

    def split(self, active: Mapping[int, SimJob], stay_put: StayPut | None = None) -> JobSplit:
        """The views of ``active`` (in its order), split by state, bringing the book up to date.

        With ``stay_put`` (the decision context's move memory), also hand it the running gangs
        it may not hold (see the module docstring).
        """
        told = isinstance(active, ActiveJobs) and active.changes is self.stale
        changed = self._update(active)
        if len(self._views) != len(active) or (not told and list(self._views) != list(active)):
            # The active set changed behind the book's back: take the active jobs' order,
            # reusing every view still valid.
            self._rebuild(active)
            changed = True
        if changed or self._split is None:
            views = self._views
            waiting = self._waiting
            jobs = tuple(views.values())
            self._split = (JobSplit(jobs, None, tuple(map(waiting.__getitem__, sorted(waiting))))
                           if told else JobSplit.of(jobs))
        if stay_put is not None and told:
            stay_put.narrow(self._split, self)
        return self._split

    def _update(self, active: Mapping[int, SimJob]) -> bool:
        """Rebuild the stale jobs' views; returns whether any job was stale."""
        stale = self.stale
        if not stale:
            return False
        views = self._views
        if 4 * len(stale) > len(views):
            # Most jobs changed (a round advanced every running job): one pass over them all.
            self._rebuild(active)
            return True
        waiting, open_ = self._waiting, self._open
        jobs = self._jobs
        last = next(reversed(views), -1)
        resort = False
        for idx in stale:
            if waiting.pop(idx, None) is None:
                open_.pop(idx, None)
            if idx in active:
                resort = resort or (idx < last and idx not in views)
                v = views[idx] = jobs[idx].to_view()
                if v.state is _RUNNING:
                    open_[idx] = v
                else:
                    waiting[idx] = v
            else:
                views.pop(idx, None)
        stale.clear()
        if resort:  # a job rejoined among later ones (a retry): the active jobs are sorted
            self._views = dict(sorted(views.items()))
        return True

    def _rebuild(self, active: Mapping[int, SimJob]) -> None:
        """Every view, the waiting jobs and the open gangs anew from ``active``."""
        self.stale.clear()
        jobs = self._jobs
        self._views = views = {idx: jobs[idx].to_view() for idx in active}
        self._waiting = {i: v for i, v in views.items() if v.state is not _RUNNING}
        self._open = self._running_views(views.items())

    @staticmethod
    def _running_views(items: Iterable[tuple[int, JobView]]) -> dict[int, JobView]:
        return {i: v for i, v in items if v.state is _RUNNING}

    def unheld(self, split: JobSplit, stay_put: StayPut) -> Sequence[JobView] | None:
        """The running gangs of ``split`` that ``stay_put`` may not hold, in its order;
        ``None`` once the book has moved past ``split`` (see
        :class:`~tessera.sched.core.context.UnheldGangs`)."""
        if split is not self._split:
            return None
        memory = (stay_put, stay_put.generation)
        if self._memory is None or self._memory[0] is not stay_put or self._memory[1] != memory[1]:
            # The memory forgot (or is another): every running gang may be unheld again.
            self._open = self._running_views(self._views.items())
            self._memory = memory
        self._open = open_ = stay_put.unheld_of(self._open)
        return tuple(map(open_.__getitem__, sorted(open_)))
