"""The world's book of job views: each snapshot rebuilds only the views of jobs that changed.

The decision core reads frozen :class:`~tessera.sched.snapshot.JobView` values. Building one per
active job at every event (a few hundred on the full Philly table, 75,000 events) was a sixth of
an event-driven run, although between two events only the jobs that arrived, started, stopped
or finished change. A :class:`ViewBook` keeps the active jobs' views in the world's order and is
told which jobs changed:

* a job's view is dropped (``job.view = None``, wherever that happens) -- the job notes its
  index in the book's ``stale`` table (:attr:`tessera.sim.state.SimJob.stale`);
* the world notes every job that joins or leaves the active set (:meth:`ViewBook.touch`).

At the next snapshot only those jobs are looked at. A check of the book's order against the
active jobs' order (done in C) catches anything that changed the active set without telling
the book; the book then rebuilds its order from the active jobs, so a snapshot is always
exactly the views of ``world.active``, in its order -- the same value as building every view
anew.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tessera.sched.snapshot import JobSplit, JobView
from tessera.sim.state import SimJob


class ViewBook:
    """The active jobs' views between snapshots (see the module docstring).

    Args:
        jobs: every job of the run, by index (each is told to report to this book).
    """

    __slots__ = ("_jobs", "_split", "_views", "stale")

    def __init__(self, jobs: Sequence[SimJob]) -> None:
        self._jobs = jobs
        self._views: dict[int, JobView] = {}
        self._split: JobSplit | None = None
        self.stale: dict[int, None] = {}
        """Jobs whose view changed or who joined or left the active set, in the order noted."""
        for j in jobs:
            j.stale = self.stale

    def touch(self, idx: int) -> None:
        """Note that job ``idx`` joined or left the active set."""
        self.stale[idx] = None

    def split(self, active: Mapping[int, SimJob]) -> JobSplit:
        """The views of ``active`` (in its order), split by state, bringing the book up to date."""
        stale = self.stale
        views = self._views
        jobs = self._jobs
        stale_seen = bool(stale)
        for idx in stale:
            if idx in active:
                views[idx] = jobs[idx].to_view()
            else:
                views.pop(idx, None)
        stale.clear()
        if len(views) != len(active) or list(views) != list(active):
            # The active set changed behind the book's back, or a job rejoined out of order
            # (a retry): take the active jobs' order, reusing every view still valid.
            self._views = views = {idx: jobs[idx].to_view() for idx in active}
        elif self._split is not None and not stale_seen:
            return self._split
        self._split = JobSplit.of(tuple(views.values()))
        return self._split
