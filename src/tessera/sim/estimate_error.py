"""The estimate's error over time under learned speeds: one point per scheduling round.

Under ``--speeds learned`` the policies decide on estimates (:mod:`tessera.sched.core.learned`).
How wrong those were *when* they were used is what explains a learned run's JCT, so the
simulator records, at each decision at least ``every_s`` after the last point (one point per
round: the round length of the run), over the active jobs of the decision's snapshot:

* ``time_s`` -- the decision's simulated time;
* ``mean_error`` and ``p90_error`` -- the mean and 90th percentile over those jobs of each
  job's mean |estimate / true - 1| over the flavors it can run on (0.25 = 25 % off);
* ``jobs`` -- how many jobs that is.

A job in its bootstrap profile (:mod:`tessera.sim.bootstrap`) is counted with its real spec:
what the policies will believe about its real gang. The series goes into the run's
:class:`~tessera.sim.metrics.SimResult` (``estimate_error``), its ``--json`` metrics, a CSV
per policy (``estimate-error-<policy>.csv``) and a plot in ``report.html``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from tessera.model.jobs import JobSpec
from tessera.sched.core.learned import LearnedOracle
from tessera.sched.core.snapshot import Snapshot


class ErrorPoint(NamedTuple):
    """The policies' estimate error over the active jobs at one decision (module docstring)."""

    time_s: float
    mean_error: float
    p90_error: float
    jobs: int


CSV_HEADER = ("time_s", "mean_error", "p90_error", "jobs")
"""Columns of the per-policy CSV, in :class:`ErrorPoint`'s order."""


class ErrorSeries:
    """Records :class:`ErrorPoint` values as decisions are taken.

    Args:
        learned: the policies' view, which answers each job's error now.
        every_s: the least simulated time between two points (the run's round length).
        real_spec: for a job id, its real spec while it profiles (``None`` otherwise).
    """

    def __init__(self, learned: LearnedOracle, every_s: float,
                 real_spec: Callable[[str], JobSpec | None] | None = None) -> None:
        self.learned = learned
        self.every_s = every_s
        self.real_spec = real_spec
        self.points: list[ErrorPoint] = []
        self._next_s = float("-inf")

    def observe(self, snap: Snapshot) -> None:
        """Add a point for ``snap`` if ``every_s`` has passed since the last one."""
        if snap.now_s < self._next_s or not snap.jobs:
            return
        errors = []
        for view in snap.jobs:
            spec = view.spec
            if self.real_spec is not None and spec.job_id in self.learned.profiling:
                spec = self.real_spec(spec.job_id) or spec
            err = self.learned.error_of(spec)
            if err is not None:
                errors.append(err)
        if not errors:
            return
        arr = np.asarray(errors)
        self.points.append(ErrorPoint(snap.now_s, float(arr.mean()),
                                      float(np.percentile(arr, 90)), len(errors)))
        self._next_s = snap.now_s + self.every_s

    def note(self) -> str:
        """One line for the run's notes: the error at the first, middle and last points."""
        if not self.points:
            return "--speeds learned: no estimate-error point was recorded"
        pts = self.points
        shown = [pts[0], pts[len(pts) // 2], pts[-1]]
        return ("--speeds learned: estimate error over time (mean / p90 over active jobs): "
                + ", ".join(f"{p.time_s / 3600:.1f} h {100 * p.mean_error:.1f} % / "
                            f"{100 * p.p90_error:.1f} %" for p in shown)
                + f" ({len(pts)} points; estimate-error CSV and plot with --out)")
