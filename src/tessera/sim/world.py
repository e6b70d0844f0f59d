"""The simulated cluster: jobs, free GPUs and the books, changed only through job transitions.

A :class:`SimWorld` is what every simulation driver shares (:mod:`tessera.sim.drivers`). It
holds the jobs' mutable records, the free GPUs per node, the samples and counters, and offers
the transitions a driver may apply -- a job arrives, starts, is preempted, moves, completes,
fails, retries, is validated. Every state change goes through the lifecycle table
(:func:`tessera.model.jobs.transition`), so a simulated job walks the same states as a live one:

* a placed job is first admitted, then runs (PENDING → ADMITTED → RUNNING);
* a preempted job is checkpointed and requeued (RUNNING → PREEMPTED → PENDING), and so is a
  job whose pre-run validation passed (the validation run is stopped by the scheduler) and a
  job whose Gavel lease ends with the round;
* a moved (migrated) job stays RUNNING: only its placement changes.

A driver owns the clock and decides *when* to ask the decision core; the world owns *what*
happens to a job when it does. Drivers never reach into each other, and the decision core
never learns which driver called it.

Costs: a preempted or migrated job holds its next GPUs ``checkpoint_s + restore_s`` before it
progresses again (an elastic job under an elastic policy: its model's restart time, and it runs
at goodput, :mod:`tessera.sim.elastic`); a failure loses the work since the last checkpoint.

Philly's lessons (all off by default, ``docs/lessons.md``): tenant quotas go into every
snapshot (fair-share delay); failing runs fail when :class:`~tessera.sim.failures.FailureTimes`
says; and with pre-run validation (:mod:`tessera.sim.validation`) a big gang's attempt first
runs as a 1-GPU job for ``validation_s``, so early failures strike the single GPU.

Sia's bootstrap (``bootstrap_s``, with learned speeds: :mod:`tessera.sim.bootstrap`) turns a
new job's first runs into short 1-GPU profiles, one per flavor, through the same decision core.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobId, JobState, Workload
from tessera.sched.core.carbon_stage import decide_shifted
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, PendingKind, PlacementOptions, decide
from tessera.sched.core.feasibility import Feasibility
from tessera.sched.core.free_book import FreeBook
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import Policy
from tessera.sched.core.snapshot import JobSplit, Placement, Snapshot
from tessera.sched.resources.speed import host_speedup
from tessera.sim.bootstrap import BootstrapProfiles
from tessera.sim.carbon_runs import shift_for
from tessera.sim.catchup import catch_up
from tessera.sim.config import SimConfig
from tessera.sim.elastic import ElasticRuns, book_move
from tessera.sim.energy import EnergyBook
from tessera.sim.energy_result import with_energy
from tessera.sim.events import COMPLETE, FAIL, RETRY, EventSink, ProgressFn, no_events
from tessera.sim.failures import FailureTimes
from tessera.sim.gns_agent import GoodputAgent
from tessera.sim.host_book import HostBook
from tessera.sim.host_retune import retune
from tessera.sim.metrics import (
    Counters,
    Sample,
    SimResult,
    isolated_times_s,
    run_gpu_hours,
    summarize,
)
from tessera.sim.power_runs import energy_policy, power_runs_for
from tessera.sim.running import RunningJobs
from tessera.sim.server_sleep import ServerSleep
from tessera.sim.state import SimJob, move
from tessera.sim.validation import PreRunValidation
from tessera.sim.views import ViewBook


class SimWorld:
    """The simulated cluster of one run (see the module docstring).

    Args:
        workload: jobs in submission order.
        cluster: the inventory.
        policy: the policy the decision core runs (already swapped for its Gavel twin by the
            Gavel driver, when that driver runs).
        config: the run's effective settings (``SimConfig.effective()``).
        oracle: true speeds; also the decision context's oracle.
        rounds: whether the driver decides in rounds (a round's snapshot carries its length).
        progress: called as ``progress(jobs_done, jobs_total)`` as the run advances.
    """

    def __init__(
        self,
        workload: Workload,
        cluster: ClusterSpec,
        policy: Policy,
        config: SimConfig,
        oracle: ThroughputOracle,
        rounds: bool,
        progress: ProgressFn | None = None,
    ) -> None:
        self.cfg = config
        self.agent = (None if config.goodput == "table"
                      else GoodputAgent(fit_steps=config.goodput == "reported"))
        self.sched = config.scheduler
        self.workload = workload
        self.cluster = cluster
        self.policy = policy
        self.truth = oracle
        self.ctx = DecisionContext(oracle, random.Random(config.seed))
        self.rounds = rounds
        self.failure_times = FailureTimes(config.failures, config.seed)
        self.opts = self.sched.placement()
        self.power = power_runs_for(config, cluster, policy)  # (a power budget: sim/power_runs)
        if self.power is not None:
            self.opts = replace(self.opts, power_budget=self.power.budget, zeus=self.power.zeus)
            self.policy = policy = energy_policy(config, policy, self.power)
        self.fill_opts = replace(self.opts, fill_only=True)
        self.carbon = shift_for(config, cluster)  # (carbon shifting: sim/carbon_runs)
        self.progress = progress
        self.schedule: EventSink = no_events
        fcfg = config.failures
        self.jobs = [
            SimJob(s, i, s.max_retries if s.max_retries else fcfg.default_max_retries)
            for i, s in enumerate(workload.jobs)
        ]
        flaky_rng = random.Random(config.seed + 104729)
        for j in self.jobs:
            j.flaky = flaky_rng.random() < fcfg.job_failure_rate
        self.views = ViewBook(self.jobs)  # (snapshots rebuild only the changed jobs' views)
        # The active jobs, in index order; every job joining or leaving is noted in the book.
        self.active: dict[int, SimJob] = self.views.active_jobs()
        self.running = RunningJobs()  # (keeps the GPUs they ask for: every sample reads it)
        self.policy_state: object = None
        self.samples: list[Sample] = []
        self.next_sample_s = 0.0
        self.active_integral = 0.0
        self.active_cum: dict[int, float] = {}
        self.last_t = 0.0
        self.c = Counters()
        self.phase_ms: dict[str, float] = {}
        # Free GPUs per node, with the per-flavor buckets a round's placement starts from.
        self.free = FreeBook(self.ctx.layout(cluster))
        self.host = HostBook.of(cluster, workload)  # (CPUs and memory: sim/host_book.py)
        self.free.gpus_only = self.host is None
        self.quotas = (dict(config.tenancy.queues) if config.tenancy is not None
                       else config.quotas.resolve(workload, cluster.total_gpus)
                       if config.quotas.enabled else {})
        self.validation = PreRunValidation(config.validation, oracle)
        self.profiles: BootstrapProfiles | None = None
        """Sia's bootstrap profiles (set by the simulator under learned speeds)."""
        self.on_decide: Callable[[Snapshot], None] | None = None
        """Called with every snapshot the decision core is asked about (the estimate-error
        series of learned speeds)."""
        self.infeasibility = Feasibility(cluster, oracle, self.sched.mixed_gangs)
        self.extras: dict[str, float] = {}
        self.fallbacks: dict[str, int] = {}
        self.notes: tuple[str, ...] = ()
        """Notes for the run's result besides the solver fallbacks (settings a compat mode
        overrode)."""
        self.by_id: dict[JobId, SimJob] = {j.spec.job_id: j for j in self.jobs}
        # Event times the running jobs have not been advanced through yet (rounds): a job
        # catches up when it is next looked at, bit for bit as if advanced at each.
        self._ticks: list[float] = []
        self.elastic = ElasticRuns() if policy.elastic else None  # (sim/elastic.py)
        self.energy = EnergyBook(cluster, None if self.power is None else self.power.model)
        if self.power is not None:  # (capped stretches are booked at the capped draw)
            self.power.attach(self.energy)
        self.sleep = (None if config.suspend_after_s is None else ServerSleep(
            cluster, self.energy, config.suspend_after_s, config.resume_s, config.off_power_w,
            workload.jobs[0].submit_time_s if workload.jobs else 0.0))
        """Idle servers powered down (:mod:`tessera.sim.server_sleep`); ``None``: never."""

    # -- the books ---------------------------------------------------------------------------

    def tick(self, t_s: float, advance_running: bool) -> None:
        """Record samples and the active-job integral up to ``t_s``.

        With ``advance_running`` (rounds: every round reconsiders running jobs) running jobs
        are also brought up to date at ``t_s`` -- lazily: the time is noted, and each running
        job catches up through every noted time when it is next looked at (a snapshot, a stop,
        the end), with the same arithmetic as advancing it at each event. Without it they are
        not: a running job's view extrapolates its progress (``JobView.remaining_at``), and its
        books are settled when it stops, so an event costs nothing per running job.
        """
        if t_s > self.last_t:
            self.active_integral += len(self.active) * (t_s - self.last_t)
            if advance_running and self.running:
                self._ticks.append(t_s)
        busy = self.running.gpus
        while t_s >= self.next_sample_s and t_s > self.last_t:
            self.samples.append(
                Sample(self.next_sample_s, busy, len(self.active) - len(self.running),
                       len(self.running))
            )
            self.next_sample_s += self.cfg.sample_every_s
        self.last_t = max(self.last_t, t_s)

    def _catch_up(self) -> None:
        """Advance every running job through the noted event times (see :meth:`tick`)."""
        ticks = self._ticks
        if ticks:
            catch_up(self.running.values(), ticks)
            ticks.clear()

    def add(self, key: str, value: float) -> None:
        """Add ``value`` to the run's extra metric ``key``."""
        self.extras[key] = self.extras.get(key, 0.0) + value

    def close_ftf(self, job: SimJob) -> None:
        """Settle ``job``'s contention (active jobs while active), for finish-time fairness."""
        start = self.active_cum.pop(job.idx, self.active_integral)
        job.contention_s += self.active_integral - start

    # -- decisions -----------------------------------------------------------------------------

    def snapshot(self, t_s: float, free_gpus: bool = True, profiles: bool = False
                 ) -> Snapshot:
        """What ``decide()`` sees at ``t_s``: the active jobs' views, and the free GPUs per node
        when the world books them (``free_gpus``; otherwise the core derives them from the
        running gangs). When the world books the free GPUs, jobs in a bootstrap profile are
        left out unless ``profiles`` (their fill-only decision, :mod:`tessera.sim.profile_fill`;
        Gavel's loop, which re-leases every GPU each round, decides about them as jobs)."""
        self._catch_up()
        split = self.views.split(self.active, self.ctx.stay_put)
        hint: JobSplit | None
        jobs, hint = split.jobs, split
        if self.agent is not None:  # Pollux's agent: noise scale and step-time fits
            jobs, hint = self.agent.views(jobs, t_s), None
        if free_gpus and not profiles and self.profiles is not None and \
                self.profiles.profiling():
            # (bootstrap profiles are placed fill-only, never seen by a full decision:
            # sim/profile_fill.py)
            jobs, hint = self.profiles.without_profiles(jobs), None
        return Snapshot(
            now_s=t_s, cluster=self.cluster, jobs=jobs, policy_state=self.policy_state,
            round_s=self.sched.round_s if self.rounds else None,
            free_gpus=self.free.counts() if free_gpus else None, quotas=self.quotas,
            split_hint=hint, tenancy=self.cfg.tenancy,
        )

    def decide(self, snap: Snapshot, opts: PlacementOptions | None = None) -> Decision:
        """Call the decision core, keep its memory, and account its time and phases."""
        if self.on_decide is not None:
            self.on_decide(snap)
        t0 = time.perf_counter()
        d = (decide(snap, self.policy, self.ctx, opts or self.opts) if self.carbon is None
             else decide_shifted(snap, self.policy, self.ctx, opts or self.opts, self.carbon))
        self.c.decide_s += time.perf_counter() - t0
        self.c.decisions += 1
        for name, ms in d.phase_ms:
            self.phase_ms[name] = self.phase_ms.get(name, 0.0) + ms
        self.policy_state = d.policy_state
        for why in d.fallbacks:
            self.fallbacks[why] = self.fallbacks.get(why, 0) + 1
        return d

    def apply(self, d: Decision, t_s: float) -> list[SimJob]:
        """Carry out a decision at ``t_s``: stop the preempted, start or move the started, and
        record why the rest wait. Returns the jobs left waiting for locality-fragmented GPUs
        (a driver may want to decide again when their locality wait runs out)."""
        by_id, penalty = self.by_id, self.sched.migration_cost_s
        if self.power is not None:
            self.power.decided(d.power_limits_w)
            self.power.at(t_s)
        for job in map(by_id.__getitem__, d.preempted):
            self.stop(job, t_s)
            move(job, JobState.PREEMPTED)
            move(job, JobState.PENDING)
            job.preemptions, job.pending_since_s = job.preemptions + 1, t_s
            job.startup_s = self.elastic.restart_s(job, penalty) if self.elastic else penalty
        started = [by_id[jid] for jid in d.started]
        for job in started:  # movers leave first, so no node is held twice even for a moment
            if job.state is JobState.RUNNING:
                book_move(self.elastic, job, d.placements[job.spec.job_id], penalty)
                self.stop(job, t_s)
        if self.policy.host_mode in ("tune", "opt") or self.policy.host_repack == "round":
            self._catch_up()  # running gangs' CPUs changed (re-timed after the movers left)
            retune(self.running.values(), d.placements, t_s, self.truth, self.cluster,
                   self.schedule, COMPLETE, FAIL, self.host)
        for job in started:
            self.start(job, d.placements[job.spec.job_id], t_s)
            job.set_wait(None, t_s)
        if self.elastic is not None:
            self._catch_up()
            self.elastic.refresh(t_s, self.schedule, COMPLETE, FAIL)
        if self.power is not None:
            self._catch_up()
            self.power.settle(self.running, t_s, self.schedule)
        fragmented: list[SimJob] = []
        for jid, reason in d.pending.items():
            job = by_id[jid]
            if job.wait_kind is not reason.kind:
                job.set_wait(reason.kind, t_s)
            if reason.kind is PendingKind.FRAGMENTATION:
                fragmented.append(job)
        return fragmented

    # -- job transitions ------------------------------------------------------------------------

    def arrive(self, job: SimJob, t_s: float) -> None:
        """``job`` is submitted at ``t_s``: rejected if it can never run here, else active."""
        reason = self.infeasibility(job.spec)
        if reason is not None:
            job.rejected = reason
            move(job, JobState.CANCELLED)
            job.finish_s = t_s
            return
        if not self.active:
            self.next_sample_s = max(self.next_sample_s, t_s - t_s % self.cfg.sample_every_s)
        self.active[job.idx] = job
        self.active_cum[job.idx] = self.active_integral
        job.last_update_s = t_s
        job.pending_since_s = t_s
        self.validation.begin(job)
        if self.profiles is not None:
            self.profiles.begin(job)

    def complete(self, job: SimJob, t_s: float) -> int:
        """``job``'s run finished its work at ``t_s``; returns 1 if the job is done for good."""
        if job.idx in self.validation:
            return self._validated(job, t_s)
        if self.profiles is not None and job.idx in self.profiles:
            return self._profiled(job, t_s)
        job.remaining = 0.0
        self.stop(job, t_s)
        return self._succeeded(job, t_s)

    def _succeeded(self, job: SimJob, t_s: float) -> int:
        """``job`` (stopped) has done all its work at ``t_s``: it leaves for good."""
        move(job, JobState.SUCCEEDED)
        job.finish_s = t_s
        job.set_wait(None, t_s)
        del self.active[job.idx]
        self.close_ftf(job)
        return 1

    def fail(self, job: SimJob, t_s: float) -> int:
        """``job``'s run crashed at ``t_s``; returns 1 if it has no retries left."""
        fcfg = self.cfg.failures
        job.advance_each(self._ticks)  # (its progress is settled only when looked at: first)
        job.advance(t_s)
        progressed_s = max(t_s - job.progress_from_s, 0.0)
        lost_s = progressed_s % fcfg.checkpoint_interval_s
        startup_s = max(min(t_s, job.progress_from_s) - job.run_started_s, 0.0)
        job.remaining = min(job.remaining + lost_s * job.rate, job.spec.total_steps)
        job.lost_gpu_s += (lost_s + startup_s) * job.spec.num_gpus
        self.stop(job, t_s)
        if self.cfg.validation.min_gpus:
            key = "validation" if job.idx in self.validation else "gang"
            self.add(f"failures_in_{key}", 1.0)
            self.add(f"failure_gpu_h_in_{key}", (lost_s + startup_s) * job.spec.num_gpus / 3600)
            self.validation.end(job)
        if self.profiles is not None:  # (a failed profile ends the profiling)
            self.profiles.end(job)
        move(job, JobState.FAILED)
        job.attempts += 1
        del self.active[job.idx]
        self.close_ftf(job)
        job.set_wait(None, t_s)
        if job.attempts <= job.max_retries:
            self.schedule(t_s + fcfg.retry_delay_s, RETRY, job.idx, job.epoch)
            return 0
        job.finish_s = t_s
        return 1

    def retry(self, job: SimJob, t_s: float) -> None:
        """A failed job with retries left rejoins the queue at ``t_s``."""
        move(job, JobState.PENDING)
        job.pending_since_s = t_s
        job.last_update_s = t_s
        job.startup_s = self.sched.restore_s
        job.view = None
        self.active[job.idx] = job  # (sorted in among the later jobs: see ActiveJobs)
        self.active_cum[job.idx] = self.active_integral
        self.validation.begin(job)

    def stop(self, job: SimJob, t_s: float) -> None:
        """Settle ``job``'s run up to ``t_s`` and give its GPUs back (its state is the caller's)."""
        if self._ticks:  # (events mode notes none)
            job.advance_each(self._ticks)
        job.advance(t_s)
        if job.state is JobState.RUNNING:
            self._account_run(job, t_s)
        placement = job.placement
        if self.power is not None:
            self.power.stopped(job, t_s)
        job.epoch += 1
        job.placement = None
        job.rate = 0.0
        job.last_run_end_s = t_s
        job.view = None
        if self.running.pop(job.idx, None) is not None and placement is not None:
            self.energy.run_ended(job, placement, job.run_started_s, t_s)
            for node_id, k in placement.gpus_by_node:
                self.free[node_id] += k
                if (self.sleep is not None
                        and self.free[node_id] >= self.free.layout.capacity[node_id]):
                    self.sleep.idle(node_id, t_s)
            if self.host is not None:
                self.host.stop(job.spec)

    def start(self, job: SimJob, p: Placement, t_s: float) -> None:
        """Run ``job`` on ``p`` from ``t_s``: admit and start it (or move it, if it runs), book
        its GPUs, and schedule its completion and any failure."""
        if self.profiles is not None and p.sole_flavor is not None:  # (a bootstrap profile:
            self.profiles.started(job, p.flavor)  # pinned to the flavor it got)
        rate = (self.elastic.begin(job, p) if self.elastic is not None and p.global_batch_samples
                else self.truth.placement_rate(job.spec, p))
        if job.spec.sensitivity is not None:  # CPUs and memory it holds (Synergy's profiles)
            rate *= host_speedup(job.spec, p, self.cluster)
        if self.power is not None:
            rate = self.power.start_rate(job, p, rate)
        if job.state is JobState.PENDING:
            job.pending_s += t_s - job.pending_since_s
            move(job, JobState.ADMITTED)
        if job.state is not JobState.RUNNING:
            move(job, JobState.RUNNING)
        job.placement = p
        job.rate = rate
        job.run_started_s = t_s
        job.progress_from_s = t_s + job.startup_s
        if self.sleep is not None:  # (a suspended server resumes first)
            job.progress_from_s += self.sleep.woken([n for n, _ in p.gpus_by_node], t_s)
        job.startup_s = 0.0
        job.last_update_s = t_s
        job.epoch += 1
        job.view = None
        if job.first_start_s is None:
            job.first_start_s = t_s
        if self.host is not None:
            if job.idx in self.running:  # (a move: give the old gang's host back first)
                self.host.stop(job.spec)
            self.host.start(job.spec, p)
        self.running[job.idx] = job
        for node_id, k in p.gpus_by_node:
            self.free[node_id] -= k
        job.fail_at_s = None
        if rate <= 0:
            return
        finish = job.progress_from_s + job.remaining / rate
        self.schedule(finish, COMPLETE, job.idx, job.epoch)
        if job.flaky:
            fail_s = self.failure_times.fail_at_s(job.idx, job.attempts, job.progress_from_s,
                                                  finish, self.validation.real_run_s(job.idx))
            job.fail_at_s = fail_s  # (an elastic speed change re-books it with the completion)
            if fail_s is not None:
                self.schedule(fail_s, FAIL, job.idx, job.epoch)

    def _validated(self, job: SimJob, t_s: float) -> int:
        """Pre-run validation passed (:mod:`tessera.sim.validation`): the scheduler stops the
        1-GPU run and requeues the real gang."""
        self.stop(job, t_s)
        self.validation.end(job)
        self.add("validations_passed", 1.0)
        move(job, JobState.PREEMPTED)
        move(job, JobState.PENDING)
        job.pending_since_s = t_s
        job.set_wait(None, t_s)
        return 0

    def _profiled(self, job: SimJob, t_s: float) -> int:
        """A bootstrap profile finished (:mod:`tessera.sim.bootstrap`): the scheduler stops
        it and requeues the job, pinned to its next flavor or as its real gang."""
        self.stop(job, t_s)
        if self.profiles is not None and not self.profiles.next(job) and job.remaining <= 0:
            return self._succeeded(job, t_s)  # (its profiles did all its work: lean mode)
        move(job, JobState.PREEMPTED)
        move(job, JobState.PENDING)
        job.pending_since_s = t_s
        job.set_wait(None, t_s)
        return 0

    def _account_run(self, job: SimJob, t_s: float) -> None:
        """Book a run that ends at ``t_s``: validation GPU-time, and split gangs' slowdown."""
        if self.profiles is not None and job.idx in self.profiles:
            self.add("bootstrap_gpu_h",
                     max(t_s - job.run_started_s, 0.0) * job.spec.num_gpus / 3600)
            return
        for key, gpu_h in run_gpu_hours(job, t_s, self.truth, job.idx in self.validation):
            self.add(key, gpu_h)

    # -- the end ---------------------------------------------------------------------------------

    def finish(self, wall0_s: float) -> SimResult:
        """Settle every open book at the last event and summarise the run."""
        self.tick(self.last_t, self.rounds)
        self._catch_up()
        for j in self.running.values():
            j.advance(self.last_t)
            self._account_run(j, self.last_t)
            if j.placement is not None:
                self.energy.run_ended(j, j.placement, j.run_started_s, self.last_t)
        if self.sleep is not None:
            self.sleep.finish(self.last_t)
            self.add("server_resumes", float(self.sleep.suspensions))
        if self.power is not None:
            self.power.finish(self.running, self.last_t)
        for idx in self.validation.validating():
            self.validation.end(self.jobs[idx])
        if self.profiles is not None:
            for idx in self.profiles.profiling():
                self.profiles.end(self.jobs[idx])
        for j in self.active.values():
            j.set_wait(None, self.last_t)
            if j.state is JobState.PENDING:
                j.pending_s += self.last_t - j.pending_since_s
        for j in self.active.values():
            self.close_ftf(j)
        result = summarize(
            self.workload, self.cluster, self.policy.display_name, self.cfg, self.jobs,
            isolated_times_s(self.jobs, self.truth),
            self.samples, wall_s=time.perf_counter() - wall0_s, events=self.c.events,
            decisions=self.c.decisions, decide_s=self.c.decide_s, phase_ms=self.phase_ms,
            extras=self.extras if self.power is None else {**self.extras,
                                                            **self.power.extras()},
            notes=self.notes + tuple(f"solver fallback in {n} round{'s' * (n > 1)}: {why}"
                                     for why, n in self.fallbacks.items()),
        )
        return with_energy(result, self.energy, self.workload, self.last_t)
