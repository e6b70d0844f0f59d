"""The discrete-event engine: a heap of timed events and the same ``decide()`` as live.

Events are plain tuples ``(time_s, priority, seq, kind, job, epoch)`` on a ``heapq``: cheaper
than event objects or SimPy processes (3.4× in our design benchmark), deterministic because
``seq`` breaks ties in insertion order. A job's ``epoch`` increases whenever it stops or moves,
so completion and failure events of an old run are recognised as stale and dropped instead of
being searched for and removed.

Two modes:

* **events** -- decide on every arrival, completion, failure and policy wake-up;
* **rounds** -- decide every ``round_s`` seconds (Gavel's time-sharing rounds); jobs that finish
  mid-round leave their GPUs idle until the next round, as in Gavel.

Costs: a preempted or migrated job holds its next GPUs ``checkpoint_s + restore_s`` before it
progresses again; a failure loses the work since the last periodic checkpoint.

Philly's lessons (all off by default, ``docs/lessons.md``): tenant quotas go into every
snapshot (fair-share delay); failures may follow the early/late model of
:mod:`tessera.sim.failures`; and with pre-run validation a big gang's attempt first runs as a
1-GPU job for ``validation_s`` -- the driver swaps the job's spec for a 1-GPU copy, the decision
core places it like any job, and when it passes the driver restores the real spec and returns
the job to the queue for its gang. Early failures then strike the single GPU.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobId, JobSpec, JobState, Workload
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.sched.core import Decision, PendingKind, PlacementOptions, decide
from tessera.sched.feasibility import infeasibility
from tessera.sched.oracle import ThroughputOracle
from tessera.sched.policies.gavel_compat import gavel_compat_policy
from tessera.sched.policy import Policy, make_policy
from tessera.sched.snapshot import Placement, Snapshot
from tessera.sim.config import SimConfig
from tessera.sim.failures import FailureModel
from tessera.sim.gavel_loop import run_gavel
from tessera.sim.metrics import Sample, SimResult, summarize
from tessera.sim.state import SimJob

_COMPLETE, _FAIL, _RETRY, _ROUND, _WAKEUP = 0, 1, 2, 4, 5
_EPS = 1e-9

ProgressFn = Callable[[int, int], None]


@dataclass(slots=True)
class _Counters:
    events: int = 0
    decisions: int = 0
    decide_s: float = 0.0


class Simulator:
    """Runs one policy over one workload on one cluster. Use :func:`simulate`."""

    def __init__(
        self,
        workload: Workload,
        cluster: ClusterSpec,
        policy: Policy,
        config: SimConfig,
        table: ThroughputTable,
        progress: ProgressFn | None = None,
    ) -> None:
        self.cfg = config.effective()
        self.workload = workload
        self.cluster = cluster
        if self.cfg.compat == "gavel":
            policy = gavel_compat_policy(policy, self.cfg.seed, self.cfg.compat_solver)
        self.policy = policy
        self.oracle = ThroughputOracle(
            table, cluster, split_large_gangs=self.cfg.compat is None
        )
        self.truth = self.oracle
        self.rounds = self.cfg.mode == "rounds" or (
            self.cfg.mode == "auto" and policy.round_based
        )
        self.rng = random.Random(self.cfg.seed)
        self.fail_rng = random.Random(self.cfg.seed + 7919)
        self.opts = PlacementOptions(
            locality_wait_s=self.cfg.locality_wait_s,
            migration_cost_s=self.cfg.checkpoint_s + self.cfg.restore_s,
            mixed_gangs=self.cfg.mixed_gangs,
            mixed_min_speed=self.cfg.mixed_min_speed,
        )
        self.fill_opts = replace(self.opts, fill_only=True)
        self.progress = progress
        fcfg = self.cfg.failures
        self.jobs = [
            SimJob(s, i, s.max_retries if s.max_retries else fcfg.default_max_retries)
            for i, s in enumerate(workload.jobs)
        ]
        flaky_rng = random.Random(self.cfg.seed + 104729)
        for j in self.jobs:
            j.flaky = flaky_rng.random() < fcfg.job_failure_rate
        self.heap: list[tuple[float, int, int, int, int, int]] = []
        self.seq = 0
        self.active: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self.policy_state: object = None
        self.round_pending = False
        self.wakeup_at: float | None = None
        self.samples: list[Sample] = []
        self.next_sample_s = 0.0
        self.active_integral = 0.0
        self.active_cum: dict[int, float] = {}
        self.last_t = 0.0
        self.c = _Counters()
        self.phase_ms: dict[str, float] = {}
        self.total_gpus = cluster.total_gpus
        self.free: dict[str, int] = {n.node_id: n.gpus for n in cluster.nodes}
        self.quotas = (self.cfg.quotas.resolve(workload, cluster.total_gpus)
                       if self.cfg.quotas.enabled else {})
        self.fmodel = (FailureModel(fcfg, self.cfg.seed)
                       if fcfg.time_model == "early-late" else None)
        # Jobs in their validation phase: idx -> (real spec, real remaining, real startup_s).
        self.validating: dict[int, tuple[JobSpec, float, float]] = {}
        self.extras: dict[str, float] = {}
        self.locality_wakeups: set[float] = set()

    # -- event plumbing ----------------------------------------------------------------------

    def _push(self, t: float, kind: int, job: int = -1, epoch: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, kind, job, epoch))

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        if self.cfg.compat == "gavel":
            run_gavel(self)
        else:
            self._run_events()
        return self._finish(wall0)

    def _run_events(self) -> None:
        jobs = self.jobs
        n = len(jobs)
        ptr = 0
        done = 0
        horizon = self.cfg.max_sim_time_s
        while ptr < n or self.heap:
            t_arr = jobs[ptr].spec.submit_time_s if ptr < n else math.inf
            t_evt = self.heap[0][0] if self.heap else math.inf
            t = min(t_arr, t_evt)
            if horizon is not None and t > horizon:
                break
            self._tick(t)
            changed = False
            round_now = False
            while self.heap and self.heap[0][0] <= t + _EPS:
                _, _, _, kind, idx, epoch = heapq.heappop(self.heap)
                self.c.events += 1
                if kind == _ROUND:
                    round_now = True
                    self.round_pending = False
                elif kind == _WAKEUP:
                    changed = True
                else:
                    job = jobs[idx]
                    if kind == _RETRY:
                        self._requeue(job, t)
                        changed = True
                    elif job.epoch == epoch and job.state is JobState.RUNNING:
                        if kind == _COMPLETE:
                            done += self._complete(job, t)
                        else:
                            done += self._fail(job, t)
                        changed = True
            while ptr < n and jobs[ptr].spec.submit_time_s <= t + _EPS:
                self._arrive(jobs[ptr], t)
                done += jobs[ptr].rejected is not None
                ptr += 1
                self.c.events += 1
                changed = True
            if self.rounds:
                if round_now:
                    self._decide(t)
                    if self.active:
                        self._push(t + self.cfg.round_s, _ROUND)
                        self.round_pending = True
                elif changed and not self.round_pending and self.active:
                    self._push(t, _ROUND)
                    self.round_pending = True
                elif changed and self.cfg.fill_between_rounds and self._can_fill():
                    self._fill(t)
            elif changed and self._worth_deciding():
                self._decide(t)
            if self.progress is not None and changed:
                self.progress(done, n)

    def _finish(self, wall0: float) -> SimResult:
        self._tick(self.last_t)
        for j in self.running.values():
            j.advance(self.last_t)
            self._account_run(j, self.last_t)
        for idx in list(self.validating):
            self._end_validation(self.jobs[idx])
        for j in self.active.values():
            j.set_wait(None, self.last_t)
        for j in self.active.values():
            self._close_ftf(j)
        iso = [
            j.spec.total_steps / r if (r := max(
                (x.consolidated for x in self.truth.real_rates(j.spec)), default=0.0)) > 0
            else math.inf
            for j in self.jobs
        ]
        return summarize(
            self.workload, self.cluster, self.policy.display_name, self.cfg, self.jobs, iso,
            self.samples, wall_s=time.perf_counter() - wall0, events=self.c.events,
            decisions=self.c.decisions, decide_s=self.c.decide_s, phase_ms=self.phase_ms,
            extras=self.extras,
        )

    def _timed_decide(self, snap: Snapshot, opts: PlacementOptions | None = None) -> Decision:
        """Call the decision core, keep its memory, and account its time and phases."""
        t0 = time.perf_counter()
        d = decide(snap, self.policy, self.oracle, self.rng, opts or self.opts)
        self.c.decide_s += time.perf_counter() - t0
        self.c.decisions += 1
        for name, ms in d.phase_ms:
            self.phase_ms[name] = self.phase_ms.get(name, 0.0) + ms
        self.policy_state = d.policy_state
        return d

    def _worth_deciding(self) -> bool:
        """Skip a round that cannot change anything: nobody waits and nobody can be displaced."""
        if len(self.running) < len(self.active):
            return True
        return self.policy.preemptive and self.wakeup_at is not None

    def _tick(self, t: float) -> None:
        """Record samples and the active-job integral up to ``t``.

        In rounds mode running jobs are also brought up to date (every round reconsiders
        them). In events mode they are not: a running job's view extrapolates its progress
        (``JobView.remaining_at``), and its books are settled when it stops, so an event
        costs nothing per running job.
        """
        if t > self.last_t:
            self.active_integral += len(self.active) * (t - self.last_t)
        if self.rounds:
            for j in self.running.values():
                j.advance(t)
        while t >= self.next_sample_s and t > self.last_t:
            busy = sum(j.spec.num_gpus for j in self.running.values())
            self.samples.append(
                Sample(self.next_sample_s, busy, len(self.active) - len(self.running),
                       len(self.running))
            )
            self.next_sample_s += self.cfg.sample_every_s
        self.last_t = max(self.last_t, t)

    # -- job transitions ------------------------------------------------------------------------

    def _arrive(self, job: SimJob, t: float) -> None:
        reason = infeasibility(job.spec, self.cluster, self.truth, self.cfg.mixed_gangs)
        if reason is not None:
            job.rejected = reason
            job.state = JobState.CANCELLED
            job.finish_s = t
            return
        if not self.active:
            self.next_sample_s = max(self.next_sample_s, t - t % self.cfg.sample_every_s)
        self.active[job.idx] = job
        self.active_cum[job.idx] = self.active_integral
        job.last_update_s = t
        job.pending_since_s = t
        self._begin_validation(job)

    def _complete(self, job: SimJob, t: float) -> int:
        if job.idx in self.validating:
            return self._validated(job, t)
        job.remaining = 0.0
        self._stop(job, t)
        job.state = JobState.SUCCEEDED
        job.finish_s = t
        job.set_wait(None, t)
        del self.active[job.idx]
        self._close_ftf(job)
        return 1

    def _fail(self, job: SimJob, t: float) -> int:
        fcfg = self.cfg.failures
        job.advance(t)  # (events mode settles a run's progress only when it stops: do it first)
        progressed_s = max(t - job.progress_from_s, 0.0)
        lost_s = progressed_s % fcfg.checkpoint_interval_s
        startup_s = max(min(t, job.progress_from_s) - job.run_started_s, 0.0)
        job.remaining = min(job.remaining + lost_s * job.rate, job.spec.total_steps)
        job.lost_gpu_s += (lost_s + startup_s) * job.spec.num_gpus
        self._stop(job, t)
        if self.cfg.validation.min_gpus:
            key = "validation" if job.idx in self.validating else "gang"
            self._add(f"failures_in_{key}", 1.0)
            self._add(f"failure_gpu_h_in_{key}", (lost_s + startup_s) * job.spec.num_gpus / 3600)
            self._end_validation(job)
        job.state = JobState.FAILED
        job.attempts += 1
        del self.active[job.idx]
        self._close_ftf(job)
        job.set_wait(None, t)
        if job.attempts <= job.max_retries:
            self._push(t + fcfg.retry_delay_s, _RETRY, job.idx)
            return 0
        job.finish_s = t
        return 1

    def _requeue(self, job: SimJob, t: float) -> None:
        job.state = JobState.PENDING
        job.pending_since_s = t
        job.last_update_s = t
        job.startup_s = self.cfg.restore_s
        job.view = None
        self.active[job.idx] = job
        self.active = dict(sorted(self.active.items()))
        self.active_cum[job.idx] = self.active_integral
        self._begin_validation(job)

    # -- pre-run validation (a driver phase: the decision core sees a 1-GPU job) ---------------

    def _begin_validation(self, job: SimJob) -> None:
        """Turn a big gang's next attempt into a 1-GPU validation run of ``validation_s``."""
        vcfg = self.cfg.validation
        spec = job.spec
        if not vcfg.min_gpus or spec.num_gpus < vcfg.min_gpus or self.cfg.compat is not None:
            return
        vspec = replace(spec, num_gpus=1, requires_locality=False, total_steps=1.0)
        rate = max((r.consolidated for r in self.truth.real_rates(vspec)), default=0.0)
        if rate <= 0:
            return
        steps = rate * vcfg.validation_s
        self.validating[job.idx] = (spec, job.remaining, job.startup_s)
        job.spec = replace(vspec, total_steps=steps)
        job.remaining = steps
        job.startup_s = 0.0
        job.view = None

    def _end_validation(self, job: SimJob) -> None:
        """Give the job back its real spec and work (validation passed, failed or cut short)."""
        saved = self.validating.pop(job.idx, None)
        if saved is None:
            return
        job.spec, job.remaining, job.startup_s = saved
        job.view = None

    def _validated(self, job: SimJob, t: float) -> int:
        """Validation passed: back to the queue, waiting for the real gang."""
        self._stop(job, t)
        self._end_validation(job)
        self._add("validations_passed", 1.0)
        job.state = JobState.PENDING
        job.pending_since_s = t
        job.set_wait(None, t)
        return 0

    def _add(self, key: str, value: float) -> None:
        self.extras[key] = self.extras.get(key, 0.0) + value

    def _account_run(self, job: SimJob, t: float) -> None:
        """Book a run that ends at ``t``: validation GPU-time, and split gangs' slowdown."""
        p = job.placement
        if p is None or self.cfg.compat is not None:
            return
        held = max(t - job.run_started_s, 0.0) * p.num_gpus
        if job.idx in self.validating:
            self._add("validation_gpu_h", held / 3600)
            return
        if p.is_mixed:
            self._add("mixed_gpu_h", held / 3600)
            return
        if not p.consolidated:
            self._add("split_gpu_h", held / 3600)
            cons = self.truth.rate(job.spec, p.flavor, True)
            progressed = max(t - max(job.progress_from_s, job.run_started_s), 0.0)
            if cons > 0 and job.rate < cons:
                self._add("split_slowdown_gpu_h",
                          progressed * p.num_gpus * (1 - job.rate / cons) / 3600)

    def _close_ftf(self, job: SimJob) -> None:
        start = self.active_cum.pop(job.idx, self.active_integral)
        job.contention_s += self.active_integral - start

    def _stop(self, job: SimJob, t: float) -> None:
        job.advance(t)
        if job.state is JobState.RUNNING:
            self._account_run(job, t)
        placement = job.placement
        job.epoch += 1
        job.placement = None
        job.rate = 0.0
        job.last_run_end_s = t
        job.view = None
        started_here = self.cfg.compat is None  # Gavel's loop books GPUs per round itself
        if self.running.pop(job.idx, None) is not None and placement is not None and started_here:
            for node_id, k in placement.gpus_by_node:
                self.free[node_id] += k

    def _start(self, job: SimJob, p: Placement, t: float) -> None:
        rate = self.truth.placement_rate(job.spec, p)
        job.state = JobState.RUNNING
        job.placement = p
        job.rate = rate
        job.run_started_s = t
        job.progress_from_s = t + job.startup_s
        job.startup_s = 0.0
        job.last_update_s = t
        job.epoch += 1
        job.view = None
        if job.first_start_s is None:
            job.first_start_s = t
        self.running[job.idx] = job
        for node_id, k in p.gpus_by_node:
            self.free[node_id] -= k
        if rate <= 0:
            return
        finish = job.progress_from_s + job.remaining / rate
        self._push(finish, _COMPLETE, job.idx, job.epoch)
        fcfg = self.cfg.failures
        if not job.flaky:
            return
        if self.fmodel is not None:
            f = self.fmodel.draw(job.idx, job.attempts)
            if f is None:
                return
            saved = self.validating.get(job.idx)
            if saved is not None:
                # A late failure strikes the real run, not the short validation; an early one
                # strikes here only if the real run would have lasted long enough to meet it.
                best = max((r.consolidated for r in self.truth.real_rates(saved[0])),
                           default=0.0)
                if not f.early or best <= 0 or f.after_s(saved[1] / best) is None:
                    return
            after = f.after_s(finish - job.progress_from_s)
            if after is not None:
                self._push(job.progress_from_s + after, _FAIL, job.idx, job.epoch)
            return
        if job.attempts == 0 or self.fail_rng.random() < fcfg.repeat_probability:
            at = job.progress_from_s + self.fail_rng.random() * (finish - job.progress_from_s)
            self._push(at, _FAIL, job.idx, job.epoch)

    # -- decisions -------------------------------------------------------------------------------

    def _decide(self, t: float) -> None:
        if not self.active:
            return
        d = self._timed_decide(self._snapshot(t))
        self._apply(d, t)
        if d.wakeup_s is not None and not self.rounds:
            at = max(d.wakeup_s, t + 1e-3)
            if self.wakeup_at is None or at < self.wakeup_at - _EPS or self.wakeup_at <= t:
                self.wakeup_at = at
                self._push(at, _WAKEUP)
        elif d.wakeup_s is None:
            self.wakeup_at = None

    def _can_fill(self) -> bool:
        return len(self.running) < len(self.active) and any(v > 0 for v in self.free.values())

    def _fill(self, t: float) -> None:
        """Between two rounds: place waiting jobs into idle GPUs, in the policy's order, without
        touching running jobs. The policy's memory is left as the last round set it."""
        state = self.policy_state
        d = self._timed_decide(self._snapshot(t), self.fill_opts)
        self.policy_state = state
        self._apply(d, t)

    def _snapshot(self, t: float) -> Snapshot:
        """What ``decide()`` sees at ``t``: active jobs' views and the driver's free GPUs."""
        return Snapshot(
            now_s=t,
            cluster=self.cluster,
            jobs=tuple(j.to_view() for j in self.active.values()),
            policy_state=self.policy_state,
            round_s=self.cfg.round_s if self.rounds else None,
            free_gpus=dict(self.free),
            quotas=self.quotas,
        )

    def _apply(self, d: Decision, t: float) -> None:
        by_id: dict[JobId, SimJob] = {j.spec.job_id: j for j in self.active.values()}
        penalty = self.cfg.checkpoint_s + self.cfg.restore_s
        for jid in d.preempted:
            job = by_id[jid]
            self._stop(job, t)
            job.state = JobState.PENDING
            job.preemptions += 1
            job.pending_since_s = t
            job.startup_s = penalty
        for jid in d.started:
            job = by_id[jid]
            if job.state is JobState.RUNNING:
                self._stop(job, t)
                job.migrations += 1
                job.startup_s = penalty
            self._start(job, d.placements[jid], t)
            job.set_wait(None, t)
        lw = self.cfg.locality_wait_s
        for jid, reason in d.pending.items():
            job = by_id[jid]
            if job.wait_kind is not reason.kind:
                job.set_wait(reason.kind, t)
            if (reason.kind is PendingKind.FRAGMENTATION and 0 < lw < math.inf
                    and not job.spec.requires_locality and not self.rounds):
                self._locality_wakeup(job.pending_since_s + lw, t)

    def _locality_wakeup(self, at: float, now: float) -> None:
        """Decide again when a gang's locality wait runs out (it may then be split)."""
        if at > now + _EPS and at not in self.locality_wakeups:
            self.locality_wakeups.add(at)
            self._push(at, _WAKEUP)


def simulate(
    workload: Workload,
    cluster: ClusterSpec,
    policy: str | Policy,
    config: SimConfig | None = None,
    table: ThroughputTable | None = None,
    progress: ProgressFn | None = None,
) -> SimResult:
    """Simulate ``policy`` on ``workload`` over ``cluster``; same inputs, same result.

    Args:
        workload: jobs in submission order.
        cluster: the inventory.
        policy: a registry name (``las``, ``max_min_fairness-agnostic`` ...) or an instance.
        config: simulation settings (defaults: costs on, policy's preferred mode, seed 0).
        table: throughput profiles (default: the bundled Gavel table).
        progress: called as ``progress(jobs_done, jobs_total)`` as the run advances.
    """
    pol = make_policy(policy) if isinstance(policy, str) else policy
    sim = Simulator(
        workload, cluster, pol, config or SimConfig(), table or default_throughputs(), progress
    )
    return sim.run()
