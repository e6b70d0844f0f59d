"""The live scheduler: the simulator's ``decide()`` on a wall clock, driving real runs.

One background thread owns the executor and runs this loop::

    wait for a poke (submission, cancel) or ``poll_s``
    1. observe   -- ask the executor about every run that holds GPUs; record exits
    2. decide    -- when the scheduler's cadence says so: snapshot → decide()
    3. journal   -- write the decision (allocations, transitions, events) in one transaction
    4. act       -- launch planned runs, signal stopping ones

Step 3 before step 4 is the durability rule: a run is launched only after its allocation row
exists, and the executor names it by ``(job_id, run)``, so after a crash the restarted service
finds the row, asks the executor, and either adopts the run or launches it -- never twice
(see :mod:`tessera.live.reconcile`). API threads only write the store and poke the loop.

The cadence is the simulator's, from the same
:class:`~tessera.sched.core.settings.SchedulerSettings`:

* **events** (event-driven policies, or ``mode="events"``): decide when something changed (a
  submission, a cancel, an exit), when the policy asked to be woken, and every ``period_s``;
* **rounds** (round-based policies such as Gavel's, or ``mode="rounds"``): a full round every
  ``round_s`` while jobs are active; the first round after an idle spell starts at once; with
  ``fill_between_rounds`` a change between rounds lets waiting jobs take idle GPUs (nobody is
  moved), otherwise idle GPUs wait for the next round -- exactly as the round driver simulates.
"""

from __future__ import annotations

import logging
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tessera.errors import SpecError
from tessera.live import launches, lifecycle
from tessera.live.drain_quota import with_draining
from tessera.live.executors.base import Executor, ExpiringExecutor, SharingExecutor
from tessera.live.faults import crash_point
from tessera.live.host_report import host_report
from tessera.live.inference.hook import InferenceHook
from tessera.live.journal import journal
from tessera.live.learned import apply_learned, prior_rate
from tessera.live.options import ServiceOptions
from tessera.live.progress import ProgressBook
from tessera.live.reconcile import reconcile
from tessera.live.run_power import RunPower
from tessera.live.slownodes import SlowNodes
from tessera.live.spec import JobRequest, elastic_choice, to_live_job
from tessera.live.speeds import RunSpeeds
from tessera.live.store import HOLDING, JobRecord, NewJob, Store, StoreDamaged
from tessera.live.tenancy import Principal, Tenancy
from tessera.live.totals import check_totals
from tessera.live.view import build_snapshot
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobState
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import gavel_loop_only, make_policy, simulator_twin_only
from tessera.sched.core.cadence import Cadence, ProgressWatch, Step, progressed_since
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import Decision, decide
from tessera.sched.core.feasibility import infeasibility
from tessera.sched.core.host_quota import host_quota_infeasibility
from tessera.sched.core.oracle import ThroughputOracle

if TYPE_CHECKING:
    from tessera.live.storecheck import MarkerKeeper

log = logging.getLogger("tessera.live")


class Rejected(SpecError):
    """A request that can never run here (no flavor, no node, no quota can hold it)."""


class Forbidden(SpecError):
    """A tenant acting on a queue that is not its own."""


class LiveService:
    """Owns the loop thread; API handlers call :meth:`submit`, :meth:`cancel` and read the store."""

    def __init__(self, store: Store, executor: Executor, cluster: ClusterSpec, tenancy: Tenancy,
                 policy: str, work_dir: Path, options: ServiceOptions | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.executor = executor
        self.cluster = cluster
        self.tenancy = tenancy
        self.policy = make_policy(policy)
        self.opts = options or ServiceOptions()
        refusal = gavel_loop_only(self.policy, isinstance(executor, SharingExecutor)
                                  and executor.shares_gpus,
                                  self.opts.scheduler.uses_rounds(self.policy)) \
            or simulator_twin_only(self.policy)
        if refusal is not None:
            raise SpecError(refusal)
        self.oracle = ThroughputOracle(default_throughputs(), cluster,
                                       agnostic=self.policy.agnostic, unprofiled_uniform=True)
        self.work_dir = work_dir  # runs and default checkpoints; never the state dir
        self.settings = self.opts.scheduler
        self.clock = clock
        self.speeds = RunSpeeds(self.oracle)  # progress alone or sharing GPUs (live.speeds)
        self.ctx = DecisionContext(self.oracle, random.Random(self.opts.seed))
        self.uses_rounds = self.settings.uses_rounds(self.policy)
        self.placement = self.settings.placement()
        self.policy_state: object = store.policy_memory(self.policy.display_name)
        self.idle = True
        self.last_decision: Decision | None = None
        self.decision_watchers: list[Callable[[Decision], None]] = []
        """Called on the loop thread with each decision (:mod:`tessera.live.metrics`)."""
        self.rounds = 0
        s = self.settings
        self.cadence = Cadence(s.round_s, s.fill_between_rounds,
                               ProgressWatch(s.round_s, s.migration_cost_s))
        self.stalled_rounds = 0
        """Rounds in a row in which no job progressed (rounds cadence; ``/healthz``)."""
        self.stalls = 0
        """No-progress stalls reported since the service started (``/healthz``)."""
        self._held: list[tuple[float, float]] = []
        """(progress_from_s, steps/s) of the runs holding GPUs at the last round (its snapshot);
        :func:`~tessera.sched.core.cadence.progressed_since` reads it."""
        self._exits_since_round = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.signalled: set[tuple[str, int]] = set()
        self.launching: set[tuple[str, int]] = set()
        self.backoff: dict[str, tuple[float, float]] = {}  # job → (not before, last delay)
        self.keeper: MarkerKeeper | None = None
        """Keeps the store's marker current (set by ``tessera serve``, :mod:`.storecheck`)."""
        self.store.sync_queues(tenancy.quotas)
        self.progress = ProgressBook(store, self._run_where, self._table_prior,
                                     self._run_gpus)
        """Progress reports and the measured rates (:mod:`.progress`, :mod:`.learned`)."""
        self.slow_nodes = SlowNodes()
        self.known_types = frozenset(self.oracle.table.job_types())
        """Job types some table knows: their prior is a measurement, not a guess."""
        self.applied_rates: dict[str, dict[GpuFlavor, float]] = {}
        self.silent_noted: set[str] = set()
        self.inference: InferenceHook | None = None
        """Inference services on MIG slices (:mod:`tessera.live.inference`), when the service
        has a device layer; their GPUs are taken out of the cluster training sees."""
        self.power = RunPower(work_dir / "power", executor.name, cluster)
        """Runs' power limits and energy through NVML (:mod:`.run_power`); tests swap in
        one over a fake NVML before :meth:`start`."""

    # -- lifecycle of the service itself -----------------------------------------------------

    def start(self) -> None:
        """Restore power limits a crash left, reconcile with the executor, then start the
        loop thread."""
        self.power.recover(self.store, self.clock())
        reconcile(self)
        try:
            info, warnings = host_report(self.executor, self.cluster)
        except Exception as e:  # a report is a hint: never a reason not to start
            info, warnings = [], [f"the machines did not report their CPUs and memory: {e}"]
        for line in info:
            log.info("%s", line)
        for line in warnings:
            log.warning("%s", line)
        self._thread = threading.Thread(target=self._loop, name="tessera-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop; runs keep going (local runners, Ray's detached actors and embedded
        head all outlive the service) and the next start adopts them: never a failure."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            if self.keeper is not None:
                self.keeper.close()
        except StoreDamaged:
            pass  # logged when the store failed; the marker keeps the last good count
        except (sqlite3.Error, OSError) as e:  # a busy or full store: the marker is a hint
            log.warning("the store marker was not updated at stop: %s", e)
        finally:
            self.executor.close()  # whatever the marker did: stop means stopped

    def poke(self) -> None:
        self._wake.set()

    # -- API entry points (any thread) -------------------------------------------------------

    def submit(self, req: JobRequest, who: Principal) -> JobRecord:
        """Validate tenancy and feasibility, store the job PENDING, wake the loop.

        Raises:
            Forbidden: a tenant submitting to another tenant's queue.
            Rejected: unknown queue, or a request no node/flavor/quota can ever satisfy.
        """
        return self.store_jobs([self.admit(req, who)])[0]

    def admit(self, req: JobRequest, who: Principal) -> NewJob:
        """The checks of :meth:`submit`, without storing: the job to store, with its id.

        Raises:
            Forbidden: a tenant submitting to another tenant's queue.
            Rejected: unknown queue, or a request no node/flavor/quota can ever satisfy.
            OverCap: the queue is at one of its caps on stored or unfinished jobs or stored
                bytes (:mod:`tessera.live.totals`; the queue's oldest finished jobs are
                deleted first where that makes room).
        """
        named = req.queue or who.queue or "default"
        queue = self.tenancy.quota_tree.cluster_queue(named) or named  # a LocalQueue's target
        if not who.may_see(queue):
            raise Forbidden(f"token {who.name!r} may submit only to queue {who.queue!r}")
        quota = self.tenancy.quotas.get(queue)
        if quota is None:
            raise Rejected(f"unknown queue {queue!r}; queues: {', '.join(self.tenancy.quotas)}")
        priority = self._priority(req.priority_class)
        now_s = self.clock()
        job = to_live_job(req, "j-" + secrets.token_hex(5), queue, now_s,
                          self.tenancy.shares(queue), priority)
        self.power.check_limit(job.power_limit_w)
        reason = infeasibility(job.spec, self.cluster, self.oracle, self.settings.mixed_gangs)
        borrow = quota.borrowing_limit_gpus
        gpus = job.spec.num_gpus
        if reason is None and borrow is not None and gpus > quota.nominal_gpus + borrow:
            reason = (f"needs {gpus} GPUs; queue {queue!r} may hold at most "
                      f"{quota.nominal_gpus + borrow} ({quota.nominal_gpus} nominal + {borrow} "
                      "borrowable)")
        reason = reason or host_quota_infeasibility(job.spec, quota)  # (its cpus/memory quota)
        if reason is not None:
            raise Rejected(f"rejected: {reason}")
        # The spec's JSON is ASCII (json.dumps escapes the rest): its length is its bytes.
        check_totals(self.store, queue, self.tenancy.caps(queue), len(job.to_json()), now_s)
        return NewJob(job, now_s, elastic_choice(req).note or "")

    def _priority(self, name: str | None) -> int:
        """The value of priority class ``name`` (Kueue's WorkloadPriorityClass; none: 0).

        Raises:
            Rejected: a class the tenancy does not define, naming it and the known ones.
        """
        if name is None:
            return 0
        pc = self.tenancy.quota_tree.priority_classes.get(name)
        if pc is None:
            known = ", ".join(self.tenancy.quota_tree.priority_classes) or "none are defined"
            raise Rejected(f"unknown priority_class {name!r}; priority classes: {known}")
        return pc.value

    def store_jobs(self, new: list[NewJob]) -> list[JobRecord]:
        """Store admitted jobs PENDING in one commit (:meth:`Store.add_jobs`), wake the loop
        once; their records as stored (read before the loop may admit them)."""
        recs = self.store.add_jobs(new)
        self.poke()
        return recs

    def cancel(self, job_id: str, who: Principal) -> JobState:
        """Cancel a job (the caller has checked visibility); raises ValueError if finished."""
        with self.store.tx() as db:
            old = lifecycle.cancel_job(self.store, db, job_id, self.clock(), who.name)
        self.poke()
        return old

    def _run_where(self, job_id: str, run: int
                   ) -> tuple[str, GpuFlavor | None, tuple[str, ...]] | None:
        """A run's status, flavor (``None`` for a mixed gang, and for a CPU-only run: its
        placement's flavor is its server's, for display; its steps say nothing of that GPU's
        speed) and nodes, for progress reports."""
        a = self.store.allocation(job_id, run)
        if a is None:
            return None
        f = a.placement.sole_flavor if a.placement.num_gpus > 0 else None
        return (a.status, f,
                tuple(n for n, _c in a.placement.gpus_by_node))

    def _run_gpus(self, job_id: str, run: int) -> int:
        """A run's gang size (0 for an unknown run), for step-time fits."""
        a = self.store.allocation(job_id, run)
        return 0 if a is None else a.placement.num_gpus

    def _table_prior(self, job_id: str, flavor: GpuFlavor) -> float | None:
        """The job's table speed on ``flavor``; ``None`` when no table knows its type."""
        rec = self.store.get(job_id)
        if rec is None or rec.job.spec.job_type not in self.known_types:
            return None
        return prior_rate(self, rec, flavor) or None

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        next_round: float | None = 0.0
        earliest = 0.0
        observed = 0.0
        last_act = 0.0
        swept = float("-inf")
        dirty = False
        while not self._stop.is_set():
            dirty |= self._wake.wait(self.opts.poll_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            if self.store.fault is not None:
                continue  # decisions stopped: the store failed (logged once, API says 503)
            try:
                now_s = self.clock()
                if now_s - observed >= self.opts.poll_s:
                    dirty |= self.observe(now_s)
                    observed = now_s
                acted = False
                if self.uses_rounds:
                    acted, next_round = self._round_cadence(now_s, dirty, next_round)
                    dirty &= not acted
                elif (dirty and now_s >= earliest and self.could_start_anything()) or \
                        (next_round is not None and now_s >= next_round):
                    acted = True
                    t0 = time.perf_counter()
                    wake = self.round(now_s)
                    dirty = False
                    took_s = time.perf_counter() - t0
                    earliest = now_s + max(self.opts.min_round_gap_s, 2 * took_s)
                    next_round = now_s + self.opts.period_s
                    if wake is not None:
                        next_round = min(next_round, max(wake, now_s + self.opts.poll_s))
                if acted or now_s - last_act >= self.opts.poll_s:
                    self.act(self.clock())
                    last_act = now_s
                if self.inference is not None:
                    self.inference.tick(self.clock())
                if now_s - swept >= self.opts.log_sweep_s:
                    swept = now_s
                    self.remove_expired_runs(now_s)
                if self.keeper is not None:
                    self.keeper.tick(now_s)
            except StoreDamaged:
                continue  # the store logged it once; from now on the loop only waits
            except Exception:  # keep scheduling; the error is in the log
                log.exception("scheduling loop iteration failed")
                time.sleep(self.opts.poll_s)

    def remove_expired_runs(self, now_s: float) -> None:
        """Have the executor remove finished runs' files past their retention (logs and
        records; :mod:`~tessera.live.executors.logs`); on the loop thread, so no launch of this
        service races it."""
        if isinstance(self.executor, ExpiringExecutor):
            removed = self.executor.remove_expired(now_s)
            if removed:
                log.info("removed %d finished run directories past their retention (%g s)",
                         removed, self.tenancy.logs.retention_s)

    def could_start_anything(self) -> bool:
        """Whether a decision now could start or move a job (events cadence only).

        A preemptive policy always could; a non-preemptive one on a cluster whose every GPU is
        held (running, planned or draining runs) cannot -- ``decide()`` would place nothing, as
        in the simulator -- so a burst of submissions onto a full cluster costs no rounds. The
        round comes when GPUs free up (an exit is news) or at the next ``period_s``.
        """
        if self.policy.preemptive:
            return True
        held = sum(a.placement.num_gpus for a in self.store.allocations(HOLDING))
        return held < self.cluster.total_gpus

    def _round_cadence(self, now_s: float, dirty: bool,
                       next_round: float | None) -> tuple[bool, float | None]:
        """Rounds cadence (see the module docstring); returns (acted, next round's time).

        ``next_round`` is ``None`` while idle: the last round found no active job, so the
        next change starts a round at once, as the round driver does in the simulator. The
        rules are the round driver's own object (:class:`~tessera.sched.core.cadence.Cadence`),
        and so is its no-progress watch: a stall is journalled as a ``no-progress`` event and
        counted in :attr:`stalls` (``/healthz``).
        """
        cad = self.cadence
        cad.next_round_s = next_round
        step = cad.step(now_s, dirty)
        if step in (Step.ROUND, Step.START):
            self.round(now_s)
            progressed = progressed_since(self._held, now_s, ended=self._exits_since_round)
            self._exits_since_round = False
            stall = cad.rounded(now_s, not self.idle, progressed)
            self.stalled_rounds = cad.watch.rounds if cad.watch is not None else 0
            if stall is not None:
                self.stalls += 1
                msg = stall.message(round_flag="round_s")
                log.warning("%s", msg)
                with self.store.tx() as db:
                    self.store.event(db, now_s, None, "no-progress", msg)
            return True, cad.next_round_s
        if step is Step.FILL:
            self.round(now_s, fill_only=True)
            return True, next_round
        return False, next_round

    def observe(self, now_s: float) -> bool:
        """1. Record runs that ended; returns whether any of that is news for the policy."""
        changed = False
        self.power.collect(self.store, self.executor, now_s)  # Ray ranks' energy (run_power)
        for a in self.store.allocations(("running", "stopping")):
            st = self.executor.status(a.job_id, a.run)
            if st.state in ("running", "starting"):
                continue
            if st.state == "absent" and a.status == "running":
                st = type(st)("lost", detail="executor has no record of this run")
            crash_point("before-exit-recorded")
            with self.store.tx() as db:
                what = lifecycle.finish_run(self.store, db, a, st, now_s, self.speeds)
                self.power.end(self.store, db, a.job_id, a.run, now_s)
            self.executor.release(a.job_id, a.run)
            self.progress.forget_run(a.job_id, a.run)
            self.signalled.discard((a.job_id, a.run))
            log.info("job %s run %s: %s", a.job_id, a.run, what)
            # A run the scheduler stopped (preempted or moving) is no news: the decision that
            # stopped it already gave its GPUs away; the simulator decides nothing then either.
            changed |= what not in ("preempted", "moved")
            self._exits_since_round |= what not in ("preempted", "moved")
        return changed

    def round(self, now_s: float, fill_only: bool = False) -> float | None:
        """2–3. Decide and journal; returns the policy's wake-up time, if any.

        :attr:`idle` tells afterwards whether there was no active job to decide about.

        ``fill_only``: a step between two rounds -- waiting jobs take idle GPUs in the
        policy's order, running gangs stay put, and the policy's memory is left as the last
        full round set it.
        """
        records = [r for r in self.store.jobs(active_only=True)
                   if self.backoff.get(r.job_id, (0.0, 0.0))[0] <= now_s]
        self.idle = not records
        if self.idle:
            return None
        avoid = apply_learned(self, records, now_s)
        cluster = self.cluster if self.inference is None else self.inference.training_cluster()
        holding = self.store.allocations(HOLDING)
        snap = build_snapshot(now_s, cluster, records, holding,
                              self.tenancy.quotas, self.oracle, self.policy_state,
                              self.settings.round_s if self.uses_rounds else None,
                              self.settings.restore_s, self.tenancy.quota_tree,
                              self.progress.noise_scales(),
                              self.progress.steps.fits_of(r.job_id for r in records))
        snap = with_draining(snap, self.store, holding)  # (stopping runs' quota: drain_quota)
        self.idle = not snap.jobs
        if self.idle:
            return None
        if avoid:  # slow nodes (live.slownodes): no new gang there; running ones stay
            snap = replace(snap, down_nodes=snap.down_nodes | avoid)
        # The runs holding GPUs, for the rounds' no-progress watch (_round_cadence).
        self._held = [(j.progress_from_s, j.progress_rate) for j in snap.jobs if j.running]
        opts = replace(self.placement, fill_only=True) if fill_only else self.placement
        d = decide(snap, self.policy, self.ctx, opts)
        remember = not fill_only and d.policy_state is not self.policy_state
        if not fill_only:
            self.policy_state = d.policy_state
        self.last_decision = d
        self.rounds += 1
        for watch in self.decision_watchers:
            watch(d)
        journal(self, d, now_s, remember)
        crash_point("after-journal")
        return d.wakeup_s

    def act(self, now_s: float) -> None:
        """4. Launch planned runs and signal stopping ones (:func:`.launches.act`)."""
        launches.act(self, now_s)
