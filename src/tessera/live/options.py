"""The live service's own settings, around the scheduler's.

The scheduler's settings (cadence, round length, locality wait, costs, mixed gangs) are the
simulator's :class:`~tessera.sched.core.settings.SchedulerSettings`, unchanged; what only a service
on a wall clock needs -- how often to look at runs, how long a stopped run may take, which user
jobs run as -- is added here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.sched.core.settings import SchedulerSettings


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    """The live service's settings: the scheduler's own, plus the wall-clock loop's.

    Attributes:
        scheduler: cadence, round length, locality wait, costs, mixed gangs, fill -- the same
            settings object the simulator runs with.
        period_s: in events cadence, a decision round at least this often, even when nothing
            happened.
        poll_s: how often running runs are checked for exits.
        min_round_gap_s: least time between two rounds triggered by pokes; the gap also grows
            to twice the last round's own duration, so a burst of submissions against a long
            queue leaves the API at least two thirds of the time.
        grace_s: how long a stopped run may take to checkpoint before it is killed.
        seed: seed of the random stream handed to ``decide()``.
        run_as: the user jobs run as (``tessera serve --run-as``) unless their queue names one;
            ``None`` = the service's own user.
        log_sweep_s: how often finished runs' files past their retention are looked for and
            removed (the retention itself is ``logs.retention_s`` in ``tessera-live.yaml``).
    """

    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    period_s: float = 1.0
    poll_s: float = 0.05
    min_round_gap_s: float = 0.02
    grace_s: float = 10.0
    seed: int = 0
    run_as: str | None = None
    log_sweep_s: float = 300.0
    progress_url: str | None = None
