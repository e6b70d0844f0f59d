"""One cadence for both clocks: when to decide, what a swap must earn, and when nothing moves.

The simulator's round driver (:mod:`tessera.sim.drivers.heap`) and the live service
(:mod:`tessera.live.service`) ask the decision core at the same moments. Both ask one
:class:`Cadence` "now, with this news (``dirty``): act or wait?" and tell it after each round
what happened, so the rules below are written once:

* **rounds** -- a full round every ``round_s`` while jobs are active; the first round after an
  idle spell starts at once (:attr:`Step.START`); with ``fill_between_rounds`` news between two
  rounds lets waiting jobs take idle GPUs (:attr:`Step.FILL`), otherwise idle GPUs wait;
* **leases** (:func:`leased`) -- a swap costs checkpoint + restore, so a running gang keeps its
  GPUs until it has made progress for at least that long. Without this rule a round shorter
  than (or as long as) the swap's cost livelocks round-based policies: a job swapped in spends
  its round restoring, has received its turn without progressing, and is swapped out again --
  for ever (issue 31). With it every run progresses for at least as long as its swap cost, so
  at least half of the time a job holds GPUs is progress;
* **no progress** (:class:`ProgressWatch`) -- rounds in which jobs held GPUs but none
  progressed (none ran past its restore, none finished: :func:`progressed_since`, one rule for
  both clocks) are counted (a round in which nobody holds GPUs is not: Gavel's twins may leave
  a job waiting for their next reallocation);
  past a patience that no legitimate start-up needs, the cadence reports a :class:`Stall`
  naming the settings. The simulator fails with it; the live service records an event and
  counts it in its metrics. With the lease rule this never trips on today's policies: it is
  the net under any future mechanism that thrashes.

Where a swap costs nothing (``checkpoint_s = restore_s = 0``, Gavel's own runs) or the round is
longer than the swap (a job swapped in at a round progresses ``round_s - cost`` before the next
one), the lease never holds anybody and the results are the same as without it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass

from tessera.model.jobs import JobId, JobState
from tessera.sched.core.snapshot import JobView

EPS_S = 1e-9
"""Times closer than this are the same moment (the simulator's event resolution)."""

STALL_ROUNDS = 10
"""Rounds without progress, in a row, before a stall is reported (and at least
:attr:`ProgressWatch.patience_s` of them)."""


def leased(jobs: Iterable[JobView], now_s: float, lease_s: float) -> frozenset[JobId]:
    """The running jobs whose lease has not run out at ``now_s``: they have made progress for
    less than ``lease_s`` (the swap's cost, checkpoint + restore) since their run began
    progressing. A round-based round keeps them where they are (see the module docstring).
    ``lease_s <= 0`` (swaps are free) leases nobody."""
    if lease_s <= 0:
        return frozenset()
    return frozenset(
        j.job_id for j in jobs
        if j.state is JobState.RUNNING and j.placement is not None
        and now_s - j.progress_from_s < lease_s - EPS_S
    )


class Step(enum.Enum):
    """What a driver should do now."""

    WAIT = "wait"
    """Nothing is due."""
    ROUND = "round"
    """A round is due (its time came)."""
    START = "start"
    """News after an idle spell: the first round starts at once (a driver may run it now, or,
    like the simulator's heap, as the next event at this same time)."""
    FILL = "fill"
    """News between two rounds: place waiting jobs into idle GPUs, move nobody."""


@dataclass(frozen=True, slots=True)
class Stall:
    """Rounds in which no job progressed, and the settings that explain it.

    Attributes:
        since_s: the last time some job progressed (or the first round without progress).
        now_s: when the stall was noticed.
        rounds: rounds in a row without progress.
        round_s: the round length.
        swap_s: what a swap costs (checkpoint + restore).
    """

    since_s: float
    now_s: float
    rounds: int
    round_s: float
    swap_s: float

    def message(self, round_flag: str = "--round-s") -> str:
        """One line naming the setting, e.g. for ``tessera simulate``'s error."""
        why = (f"{round_flag} {self.round_s:g} s is not longer than checkpoint + restore "
               f"({self.swap_s:g} s), so a job swapped in spends its round restoring"
               if self.round_s <= self.swap_s else
               f"{round_flag} {self.round_s:g} s, checkpoint + restore {self.swap_s:g} s")
        return (f"no job progressed in {self.rounds} rounds ({self.now_s - self.since_s:g} s "
                f"from t={self.since_s:g} s): {why}; use a longer {round_flag} or cheaper "
                "--checkpoint-s/--restore-s")


class ProgressWatch:
    """Counts rounds without progress and reports a :class:`Stall` past its patience.

    Args:
        round_s: the round length.
        swap_s: what a swap costs (checkpoint + restore).
        longest_start_s: the longest a run may legitimately take before it progresses (its
            restore, or an elastic model's restart); defaults to ``swap_s``.
    """

    def __init__(self, round_s: float, swap_s: float, longest_start_s: float | None = None
                 ) -> None:
        self.round_s = round_s
        self.swap_s = swap_s
        start_s = max(swap_s, longest_start_s or 0.0)
        self.patience_s = 2.0 * (start_s + round_s)
        """A run that is left alone progresses within ``start_s`` of its round; two such
        spells in a row without any progress are not a start-up."""
        self.since_s: float | None = None
        self.rounds = 0
        self.reported = False

    def round(self, now_s: float, progressed: bool) -> Stall | None:
        """Note a round at ``now_s`` (``progressed``: some job progressed since the last one);
        returns the stall the first time its patience runs out, then ``None`` until progress
        resumes."""
        if progressed:
            self.since_s, self.rounds, self.reported = None, 0, False
            return None
        if self.since_s is None:
            self.since_s = now_s
        self.rounds += 1
        if (self.reported or self.rounds < STALL_ROUNDS
                or now_s - self.since_s < self.patience_s):
            return None
        self.reported = True
        return Stall(self.since_s, now_s, self.rounds, self.round_s, self.swap_s)


def progressed_since(held: Iterable[tuple[float, float]], now_s: float,
                     ended: bool = False) -> bool:
    """Whether a round at ``now_s`` counts as progress for the :class:`ProgressWatch`: the one
    rule of both clocks (the round driver and the live service each call it).

    Args:
        held: ``(progress_from_s, steps_per_s)`` of every run that holds GPUs now: when it
            began (or begins) progressing, after its restore, and its speed.
        ended: some job finished (or failed for good) since the last round.

    A round progressed when a job ended, when nobody holds GPUs (a policy may leave GPUs
    idle, and Gavel's twins may leave a job waiting for their next reallocation: that is no
    thrashing), or when some run is past its restore at a positive speed. A run still
    restoring has not progressed, and neither has one at speed 0: a live run launched but not
    yet started, or a pair the simulator re-rated to nothing.
    """
    if ended:
        return True
    nobody = True
    for progress_from_s, steps_per_s in held:
        nobody = False
        if steps_per_s > 0 and progress_from_s < now_s - EPS_S:
            return True
    return nobody


class Cadence:
    """When a round-based driver decides (see the module docstring).

    Args:
        round_s: the round length.
        fill_between_rounds: news between rounds fills idle GPUs.
        watch: the no-progress watch (``None``: none).
        first_round_s: when the first round is due (``None``: at the first news; the live
            service starts with a round at once).
    """

    def __init__(self, round_s: float, fill_between_rounds: bool,
                 watch: ProgressWatch | None = None, first_round_s: float | None = None
                 ) -> None:
        if not round_s > 0 or math.isinf(round_s):
            raise ValueError(f"round length must be positive and finite, got {round_s}")
        self.round_s = round_s
        self.fill = fill_between_rounds
        self.watch = watch
        self.next_round_s = first_round_s
        """When the next round is due; ``None`` while idle (the last round found no job)."""

    def step(self, now_s: float, dirty: bool) -> Step:
        """What to do at ``now_s``, with news (``dirty``) or without."""
        if self.next_round_s is not None and now_s >= self.next_round_s - EPS_S:
            return Step.ROUND
        if dirty and self.next_round_s is None:
            return Step.START
        if dirty and self.fill:
            return Step.FILL
        return Step.WAIT

    def started(self, now_s: float) -> None:
        """A driver that runs a :attr:`Step.START` round as a later event notes it due now."""
        self.next_round_s = now_s

    def rounded(self, now_s: float, active: bool, progressed: bool = True) -> Stall | None:
        """A full round ran at ``now_s`` (``active``: it found jobs to decide about;
        ``progressed``: some job progressed since the last round). Schedules the next round
        and returns a stall when the watch reports one."""
        self.next_round_s = now_s + self.round_s if active else None
        if self.watch is None or not active:
            if self.watch is not None:
                self.watch.round(now_s, True)  # (idle: nothing was asked to progress)
            return None
        return self.watch.round(now_s, progressed)
