"""The simulator's front door: one policy, one workload, one cluster, one driver.

:func:`simulate` builds the run's :class:`~tessera.sim.world.SimWorld` (jobs, free GPUs, books)
and hands it to the driver its settings call for (:mod:`tessera.sim.drivers`): the event driver,
the round driver, or Gavel's loop under ``compat="gavel"``. Every driver asks the same
``decide()`` as the live service, through the world, with a decision context it owns.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobId, JobSpec, Workload
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.learned import LearnedOracle, ObservedOracle
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import Policy
from tessera.sim.bootstrap import BootstrapProfiles
from tessera.sim.config import SimConfig
from tessera.sim.drivers import Driver, driver_for
from tessera.sim.estimate_error import ErrorSeries
from tessera.sim.events import ProgressFn
from tessera.sim.learned_notes import cannot_learn
from tessera.sim.metrics import SimResult
from tessera.sim.sharing import SharingWorld
from tessera.sim.world import SimWorld

__all__ = ["ProgressFn", "RunProgressFn", "Simulator", "simulate"]

RunProgressFn = Callable[[int, int, float], None]
"""``progress(jobs_done, jobs_total, simulated_s)``: how far a run is, in jobs and in simulated
time (seconds since the first submission's clock origin)."""


class Simulator:
    """One run: the world and its driver. Use :func:`simulate` unless you need the world."""

    def __init__(
        self,
        workload: Workload,
        cluster: ClusterSpec,
        policy: Policy,
        config: SimConfig,
        table: ThroughputTable,
        progress: RunProgressFn | None = None,
    ) -> None:
        cfg = config.effective()
        _check_learned(cfg)
        self.driver: Driver = driver_for(cfg, policy)
        learned = cfg.speeds == "learned"
        oracle = (ObservedOracle if learned else ThroughputOracle)(
            table, cluster, split_large_gangs=self.driver.split_large_gangs)
        run_policy = self.driver.policy_for(policy, cfg)
        # Packing outside Gavel's loop (which leases pairs itself) needs shared-GPU books.
        world = SharingWorld if run_policy.packs and cfg.compat != "gavel" else SimWorld
        if world is SharingWorld and cfg.suspend_after_s is not None:
            raise SpecError("--suspend-after-s is not modelled with a packing policy "
                            "(its shared GPUs are booked apart from the servers' idle time)")
        self.world = world(workload, cluster, run_policy, cfg, oracle,
                           self.driver.uses_rounds(), self._with_clock(progress))
        self.world.notes += config.compat_overrides()  # (never silently: the run's notes)
        self.learned = (LearnedOracle(oracle, cfg.measurement_noise, cfg.seed)
                        if isinstance(oracle, ObservedOracle) else None)
        self.errors: ErrorSeries | None = None
        if self.learned is not None:  # policies see estimates; the truth drives progress
            self.world.ctx.oracle = self.learned
            self._learn(cfg, self.learned)

    def _learn(self, cfg: SimConfig, learned: LearnedOracle) -> None:
        """Wire learned speeds' extras into the world: Sia's bootstrap profiles (with
        ``bootstrap_s``), the estimate-error series, and what cannot learn, said."""
        world = self.world
        profiles = None
        if cfg.bootstrap_s is not None:
            profiles = world.profiles = BootstrapProfiles(cfg.bootstrap_s, world.truth,
                                                          learned, world.policy.elastic,
                                                          world.by_id, cfg.bootstrap_mode)

        def real_spec(job_id: str) -> JobSpec | None:
            return None if profiles is None else profiles.real_spec(world.by_id[JobId(job_id)].idx)

        self.errors = ErrorSeries(learned, cfg.scheduler.round_s, real_spec)
        world.on_decide = self.errors.observe
        world.notes += cannot_learn(world.policy, world.workload)

    def _with_clock(self, progress: RunProgressFn | None) -> ProgressFn | None:
        """The world's ``(done, total)`` callback, passing the world's clock on as well."""
        if progress is None:
            return None
        return lambda done, total: progress(done, total, self.world.last_t)

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        self.driver.run(self.world)
        if self.learned is not None:
            self.world.notes += (self.learned.error_note(),)
        if self.errors is not None:
            self.world.notes += (self.errors.note(),)
        if self.world.profiles is not None:
            self.world.notes += (f"--bootstrap-s {self.world.profiles.profile_s:g}: "
                                 f"{self.world.profiles.profiles_run} profiles run "
                                 "(GPU time in bootstrap_gpu_h; JCTs include them)",)
        result = self.world.finish(wall0)
        if self.errors is not None:
            result = dataclasses.replace(result, estimate_error=tuple(self.errors.points))
        return result


def simulate(
    workload: Workload,
    cluster: ClusterSpec,
    policy: str | Policy,
    config: SimConfig | None = None,
    table: ThroughputTable | None = None,
    progress: RunProgressFn | None = None,
) -> SimResult:
    """Simulate ``policy`` on ``workload`` over ``cluster``; same inputs, same result.

    Args:
        workload: jobs in submission order.
        cluster: the inventory.
        policy: a registry name (``las``, ``max_min_fairness-agnostic`` ...) or an instance.
        config: simulation settings (defaults: costs on, policy's preferred mode, seed 0).
        table: throughput profiles (default: the bundled Gavel table).
        progress: called as ``progress(jobs_done, jobs_total, simulated_s)`` as the run
            advances.
    """
    pol = make_policy(policy) if isinstance(policy, str) else policy
    with _collector_skips_long_lived() as long_lived:
        sim = Simulator(
            workload, cluster, pol, config or SimConfig(), table or default_throughputs(),
            progress
        )
        long_lived()  # (the world's records of every job live as long as the run)
        return sim.run()


@contextmanager
def _collector_skips_long_lived() -> Iterator[Callable[[], None]]:
    """Keep Python's cycle collector off the objects that outlive a run's events.

    A run allocates as it goes (views, placements, samples, one record per job), and every
    so often the collector's oldest generation walks every tracked object in the process --
    the workload's specs (82,247 on the full Philly table), the world's record of each job,
    the oracle's tables, whatever the caller holds -- none of which the run frees.
    ``gc.freeze`` moves what exists out of its reach: at the start, and again through the
    callable this yields (once the world is built); the objects the run makes as it goes are
    still collected, and ``gc.unfreeze`` hands the frozen ones back at the end. Nothing
    about the result depends on when the collector runs. If the caller has frozen objects
    itself, the collector is left as it is (unfreezing would hand back the caller's too).
    """
    if gc.get_freeze_count():
        yield _leave_alone
        return
    gc.freeze()
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()


def _check_learned(cfg: SimConfig) -> None:
    """Refuse learned-speed settings that cannot apply, with one clear line."""
    if cfg.speeds != "learned":
        if cfg.bootstrap_s is not None:
            raise SpecError("--bootstrap-s needs --speeds learned (with the table's speeds "
                            "there is nothing to profile)")
        if cfg.measurement_noise:
            raise SpecError("--measurement-noise needs --speeds learned")
    if cfg.bootstrap_s is not None and cfg.validation.min_gpus:
        raise SpecError("--bootstrap-s and pre-run validation (--validate-min-gpus) cannot "
                        "both be on: both replace a job's first run")


def _leave_alone() -> None:
    """Freeze nothing (the caller manages the collector)."""
