"""The event and round drivers: one heap of timed events, two rules for when to decide.

Events are plain tuples ``(time_s, kind, seq, kind, job, epoch)`` on a ``heapq``: cheaper than
event objects or SimPy processes (3.4× in our design benchmark), deterministic because ``seq``
breaks ties in insertion order, and at equal times completions come before failures, retries,
rounds and wake-ups (the ``kind`` order). A job's ``epoch`` increases whenever it stops or moves,
so completion and failure events of an old run are recognised as stale and dropped instead of
being searched for and removed.

* :class:`EventDriver` decides on every arrival, completion, failure and policy wake-up, and
  again when a gang's locality wait runs out;
* :class:`RoundDriver` decides every ``round_s`` seconds while jobs are active (Gavel's
  time-sharing rounds); jobs that finish mid-round leave their GPUs idle until the next round,
  unless ``fill_between_rounds`` lets waiting jobs take them (nobody is moved).
"""

from __future__ import annotations

import heapq
import math
from abc import abstractmethod

from tessera.errors import SpecError
from tessera.model.jobs import JobState
from tessera.sched.core.cadence import Cadence, ProgressWatch, Step, progressed_since
from tessera.sched.elastic.goodput import RESCALE_S
from tessera.sim.drivers.base import Driver
from tessera.sim.events import COMPLETE, EPS_S, RETRY
from tessera.sim.profile_fill import fill_profiles
from tessera.sim.world import SimWorld

ROUND, WAKEUP = 4, 5


class _HeapDriver(Driver):
    """The shared loop: pop simultaneous events, admit arrivals, then :meth:`react`."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, int, int, int]] = []
        self.seq = 0
        self.done = 0
        """Jobs done for good so far (finished, rejected, out of retries)."""

    def push(self, t_s: float, kind: int, job: int = -1, epoch: int = 0) -> None:
        """Schedule an event (the world's sink for completions, failures and retries)."""
        self.seq += 1
        heapq.heappush(self.heap, (t_s, kind, self.seq, kind, job, epoch))

    def run(self, world: SimWorld) -> None:
        world.schedule = self.push
        jobs = world.jobs
        n = len(jobs)
        ptr = 0
        done = 0
        horizon = world.cfg.max_sim_time_s
        heap = self.heap
        advance = self.uses_rounds()
        while ptr < n or heap:
            t_arr = jobs[ptr].spec.submit_time_s if ptr < n else math.inf
            t_evt = heap[0][0] if heap else math.inf
            t_s = min(t_arr, t_evt)
            if horizon is not None and t_s > horizon:
                break
            world.tick(t_s, advance)
            changed = False
            round_now = False
            while heap and heap[0][0] <= t_s + EPS_S:
                _, _, _, kind, idx, epoch = heapq.heappop(heap)
                world.c.events += 1
                if kind == ROUND:
                    round_now = True
                elif kind == WAKEUP:
                    changed = True
                else:
                    job = jobs[idx]
                    if kind == RETRY:
                        world.retry(job, t_s)
                        changed = True
                    elif job.epoch == epoch and job.state is JobState.RUNNING:
                        if kind == COMPLETE:
                            done += world.complete(job, t_s)
                        else:
                            done += world.fail(job, t_s)
                        changed = True
            while ptr < n and jobs[ptr].spec.submit_time_s <= t_s + EPS_S:
                world.arrive(jobs[ptr], t_s)
                done += jobs[ptr].rejected is not None
                ptr += 1
                world.c.events += 1
                changed = True
            self.done = done
            self.react(world, t_s, round_now, changed)
            if world.profiles is not None:  # bootstrap profiles take idle GPUs only
                fill_profiles(world, t_s)
            if world.progress is not None and changed:
                world.progress(done, n)

    @abstractmethod
    def react(self, world: SimWorld, t_s: float, round_now: bool, changed: bool) -> None:
        """Decide what to do at ``t_s`` after its events (``round_now``: a round is due)."""


class EventDriver(_HeapDriver):
    """Decide when something changed and a decision could matter (see the module docstring)."""

    name = "events"

    def __init__(self) -> None:
        super().__init__()
        self.wakeup_at: float | None = None
        self.locality_wakeups: set[float] = set()

    def uses_rounds(self) -> bool:
        return False

    def react(self, world: SimWorld, t_s: float, round_now: bool, changed: bool) -> None:
        if changed and self._worth_deciding(world):
            self._decide(world, t_s)

    def _worth_deciding(self, world: SimWorld) -> bool:
        """Skip a round that cannot change anything: nobody waits and nobody can be displaced."""
        if len(world.running) < len(world.active):
            return True
        if world.power is not None and world.power.capped():  # a stop frees power to lift caps
            return True
        if world.carbon is not None:  # a slot boundary may suspend a running slack job
            return True
        return world.policy.preemptive and self.wakeup_at is not None

    def _decide(self, world: SimWorld, t_s: float) -> None:
        if not world.active:
            return
        d = world.decide(world.snapshot(t_s))
        fragmented = world.apply(d, t_s)
        wait_s = world.sched.locality_wait_s
        if 0 < wait_s < math.inf:
            for job in fragmented:
                if not job.spec.requires_locality:
                    self._locality_wakeup(job.pending_since_s + wait_s, t_s)
        if d.wakeup_s is not None:
            at = max(d.wakeup_s, t_s + 1e-3)
            if self.wakeup_at is None or at < self.wakeup_at - EPS_S or self.wakeup_at <= t_s:
                self.wakeup_at = at
                self.push(at, WAKEUP)
        else:
            self.wakeup_at = None

    def _locality_wakeup(self, at: float, now_s: float) -> None:
        """Decide again when a gang's locality wait runs out (it may then be split)."""
        if at > now_s + EPS_S and at not in self.locality_wakeups:
            self.locality_wakeups.add(at)
            self.push(at, WAKEUP)


class RoundDriver(_HeapDriver):
    """Decide every ``round_s`` while jobs are active (see the module docstring), on the
    cadence the live service shares (:class:`~tessera.sched.core.cadence.Cadence`)."""

    name = "rounds"

    def __init__(self) -> None:
        super().__init__()
        self.cadence: Cadence | None = None
        self._done_at_round = 0

    def uses_rounds(self) -> bool:
        return True

    def _cadence(self, world: SimWorld) -> Cadence:
        cad = self.cadence
        if cad is None:
            sched = world.sched
            start_s = sched.migration_cost_s
            if world.elastic is not None:  # an elastic model's restart replaces the swap cost
                start_s = max(start_s, max(RESCALE_S.values(), default=0.0))
            watch = ProgressWatch(sched.round_s, sched.migration_cost_s, start_s)
            cad = self.cadence = Cadence(sched.round_s, sched.fill_between_rounds, watch)
        return cad

    def react(self, world: SimWorld, t_s: float, round_now: bool, changed: bool) -> None:
        cad = self._cadence(world)
        step = cad.step(t_s, changed)
        if step is Step.ROUND:
            active = bool(world.active)
            progressed = progressed_since(
                ((j.progress_from_s, j.rate) for j in world.running.values()), t_s,
                ended=self.done != self._done_at_round)
            self._done_at_round = self.done
            if active:
                world.apply(world.decide(world.snapshot(t_s)), t_s)
            stall = cad.rounded(t_s, active, progressed)
            if stall is not None:
                raise SpecError(stall.message())
            if cad.next_round_s is not None:
                self.push(cad.next_round_s, ROUND)
        elif step is Step.START and world.active:
            cad.started(t_s)
            self.push(t_s, ROUND)  # idle until now: the first round starts at once
        elif step is Step.FILL and self._can_fill(world):
            self._fill(world, t_s)

    @staticmethod
    def _can_fill(world: SimWorld) -> bool:
        return len(world.running) < len(world.active) and any(
            v > 0 for v in world.free.values())

    @staticmethod
    def _fill(world: SimWorld, t_s: float) -> None:
        """Between two rounds: place waiting jobs into idle GPUs, in the policy's order,
        without touching running jobs. The policy's memory stays as the last round set it."""
        state = world.policy_state
        d = world.decide(world.snapshot(t_s), world.fill_opts)
        world.policy_state = state
        world.apply(d, t_s)

