"""Simulation settings, validated once; ``compat="gavel"`` reproduces Gavel's assumptions.

The scheduler's own behaviour is a :class:`~tessera.sched.core.settings.SchedulerSettings` shared
with the live service; this module adds what only a simulation has (failures, validation, quotas,
Gavel compatibility, the seed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, InstanceOf

from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import QueueQuota
from tessera.sched.core.tenancy import Tenancy
from tessera.workload.carbon import CarbonTrace

if TYPE_CHECKING:
    from tessera.model.jobs import Workload


class FailureConfig(BaseModel):
    """Job failures (the Philly study: ~30 % of jobs fail or are killed, often late).

    A share ``job_failure_rate`` of jobs is *flaky*. Each run of a flaky job fails with
    probability ``repeat_probability`` (the first run always does) at a uniformly random point
    of its remaining work, losing the progress since its last checkpoint. A failed job retries
    after ``retry_delay_s`` while its retry budget lasts.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    job_failure_rate: float = Field(0.0, ge=0, le=1)
    repeat_probability: float = Field(0.5, ge=0, le=1)
    checkpoint_interval_s: float = Field(1800.0, gt=0)
    retry_delay_s: float = Field(60.0, ge=0)
    default_max_retries: int = Field(3, ge=0)
    time_model: Literal["uniform", "early-late"] = "uniform"
    """``uniform``: a failing run fails at a uniform point of its remaining work (drawn from
    one shared stream, the original model). ``early-late``: the study's shape
    (:mod:`tessera.sim.failures`): a share ``early_share`` of failing runs fail within
    ``early_window_s`` of starting (bugs, bad inputs), the rest at a uniform point of their
    remaining work; each (job, attempt) draws from its own seeded stream, so two runs that
    differ only in scheduling see the same failures."""
    early_share: float = Field(0.6, ge=0, le=1)
    early_window_s: float = Field(600.0, gt=0)


class ValidationConfig(BaseModel):
    """Pre-run validation (the study's "catch failures early" guideline).

    Before each attempt of a gang of at least ``min_gpus`` GPUs starts, the simulator runs it
    for ``validation_s`` on one GPU of an allowed flavor. A failure that would strike within
    that time strikes there, on one GPU, instead of on the whole gang; a job that passes
    returns to the queue for its real gang. ``min_gpus = 0`` turns validation off.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    min_gpus: int = Field(0, ge=0)
    validation_s: float = Field(300.0, gt=0)


class QueueQuotaConfig(BaseModel):
    """One tenant queue's quota (Kueue ClusterQueue, GPUs of any flavor)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    nominal_gpus: int = Field(..., ge=0)
    borrowing_limit_gpus: int | None = Field(None, ge=0)


class QuotaConfig(BaseModel):
    """Tenant quotas, so fair-share (quota) delay can occur.

    ``queues`` names quotas explicitly. ``split`` instead divides the cluster among the
    trace's queues (Philly's virtual clusters): ``equal`` parts, or ``demand`` (in proportion
    to each queue's GPU-time in the workload, as Philly sized its VCs). Each split quota is at
    least the queue's largest gang, so no job is held forever. ``borrowing_limit_gpus``
    applies to split quotas: ``None`` = unlimited borrowing (quota never binds), ``0`` = none.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    queues: dict[str, QueueQuotaConfig] = Field(default_factory=dict)
    split: Literal["none", "equal", "demand"] = "none"
    borrowing_limit_gpus: int | None = Field(0, ge=0)

    @property
    def enabled(self) -> bool:
        return bool(self.queues) or self.split != "none"

    def resolve(self, workload: Workload, total_gpus: int) -> dict[str, QueueQuota]:
        """The quotas of ``workload``'s queues on a cluster of ``total_gpus`` GPUs."""
        out = {name: QueueQuota(name, q.nominal_gpus, q.borrowing_limit_gpus)
               for name, q in self.queues.items()}
        if self.split == "none":
            return out
        demand: dict[str, float] = {}
        largest: dict[str, int] = {}
        for j in workload.jobs:
            if j.queue in out:
                continue
            w = 1.0 if self.split == "equal" else j.num_gpus * (j.duration_hint_s or 1.0)
            demand[j.queue] = w if self.split == "equal" else demand.get(j.queue, 0.0) + w
            largest[j.queue] = max(largest.get(j.queue, 0), j.num_gpus)
        total = sum(demand.values())
        for name in sorted(demand):
            share = int(total_gpus * demand[name] / total) if total > 0 else 0
            out[name] = QueueQuota(name, max(share, largest[name]), self.borrowing_limit_gpus)
        return out


class SimConfig(BaseModel):
    """How the simulator runs: the scheduler's settings plus what only a simulation has.

    Attributes:
        scheduler: the scheduler's behaviour (cadence, round length, costs, locality wait,
            mixed gangs, fill), the same object the live service runs with
            (:class:`~tessera.sched.core.settings.SchedulerSettings`).
        failures / validation / quotas: failure model, pre-run validation of big gangs, and
            tenant quotas (all off by default).
        compat: ``gavel`` reproduces Gavel's simulator (``docs/gavel-compat.md``) with its own
            driver (:mod:`tessera.sim.drivers.gavel`): no cost Gavel does not model
            (preemption, restore, failures, placement), 360 s rounds timed and advanced as
            Gavel does (``int(rate·360)`` steps, a round ends at its latest finish, arrivals
            join at boundaries), and ``fifo``, ``max_min_fairness`` and
            ``finish_time_fairness`` (and their ``-agnostic`` twins) replaced by Gavel's own
            mechanism and policy math.
        compat_solver: the optimiser of Gavel's policies under ``compat``: ``ecos`` (Gavel's
            own, needs the ``gavel-compat`` extra), ``highs-ipm`` (interior point, no
            crossover), ``highs`` (simplex vertex), or ``auto`` (``ecos`` when installed).
        seed: the only source of randomness.
        speeds: ``table`` (policies read the throughput table) or ``learned`` (they read
            estimates learned from the job's runs, :mod:`tessera.sched.core.learned`).
        bootstrap_s: with ``speeds="learned"``, Sia's bootstrap: each new job first runs a
            profile of this many seconds on one GPU of each flavor it can use
            (:mod:`tessera.sim.bootstrap`); ``None``: no profiles.
        bootstrap_mode: how the profiles run (:mod:`tessera.sim.bootstrap`): ``serial``
            (Sia's paper: one flavor after another, each waiting for an idle GPU, its steps
            thrown away), ``lean`` (one idle GPU of each flavor at once, never waiting; a
            1-GPU job's profile trains it), ``free`` (the bound: every profile's
            observation at the job's arrival, at no cost) or ``oracle`` (the job's own gang
            observed on every flavor at its arrival: the view is the truth).
        measurement_noise: with ``speeds="learned"``, each observed rate is the true one
            times ``exp(noise · z)``, ``z`` standard normal (seeded); 0: exact observations.
        goodput: ``table`` (Sia and Pollux read an elastic job's statistical efficiency and
            step times from the bundled profiles), ``gns`` (its efficiency from the gradient
            noise scale its simulated agent reports, Pollux's closed form) or ``reported``
            (that, and its step times from the throughput model fitted to the step times it
            observed on each flavor it ran on): :mod:`tessera.sim.gns_agent`.
        max_sim_time_s: stop the simulation at this virtual time (jobs left count unfinished).
        sample_every_s: period of the utilisation and queue-length samples.
        power_budget_kw: keep the cluster's power under this many kW at every instant
            (per-job power limits, then waiting: :mod:`tessera.sched.core.power_budget`);
            ``None``: no budget, nothing changes.
        power_capping: how the budget is kept: ``flow`` (ours), ``exact`` (ours solved
            exactly) or ``uniform`` (the baseline: one limit for every GPU).
        power_wait_fast: with a budget, a start on a far slower board waits for a fast
            board a running job frees soon (:mod:`tessera.sched.core.power_displace`).
        zeus_eta: per-job Zeus: every job at the power limit minimising Zeus's cost with this
            η on its flavor (:mod:`tessera.sched.core.energy_choice`); ``None``: off.
        energy_types: with ``zeus_eta``, the policy also offers each job its flavors cheapest
            first by that cost, and only those within ``1 + energy_slack`` of its cheapest.
        carbon_shift: carbon-aware shifting of jobs with slack before the policy decides
            (:mod:`tessera.sched.core.carbon_stage`): ``carbon-time``, ``wait-awhile`` or
            ``ours``; needs ``carbon_trace``. ``None``: off.
        carbon_price_g_per_gpu_h: ``ours``: grams of CO2 one GPU-hour of delay is worth.
        carbon_trace: the carbon intensity the shifting stage forecasts from (the run's
            ``--carbon`` trace; GAIA's oracle forecast).
        suspend_after_s: power saving (Slurm's ``SuspendTime``): a server idle this long is
            suspended, drawing ``off_power_w`` per GPU, and a job started on it waits
            ``resume_s`` (:mod:`tessera.sim.server_sleep`); ``None``: servers never sleep.
        resume_s: seconds a suspended server takes to resume before a job on it progresses.
        off_power_w: watts per GPU of a suspended server (its share of the powered-off
            server's standby draw: BMC, fans, power supplies; estimated).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    scheduler: SchedulerSettings = SchedulerSettings()
    failures: FailureConfig = FailureConfig()
    validation: ValidationConfig = ValidationConfig()
    quotas: QuotaConfig = QuotaConfig()
    tenancy: InstanceOf[Tenancy] | None = Field(None, exclude=True)
    """The whole tenancy (per-flavor quotas, cohort trees, fair sharing) that ``--tenancy
    PATH`` loads (read and checked by :mod:`tessera.live.tenancy_file`), handed to every
    snapshot (:attr:`Snapshot.tenancy`); when set, its queues are
    the quotas and ``quotas`` is not read by the core."""
    compat: Literal["gavel"] | None = None
    compat_solver: Literal["auto", "ecos", "highs", "highs-ipm"] = "auto"
    seed: int = 0
    speeds: Literal["table", "learned"] = "table"
    bootstrap_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    bootstrap_mode: Literal["serial", "lean", "free", "oracle"] = "serial"
    measurement_noise: float = Field(0.0, ge=0, allow_inf_nan=False)
    goodput: Literal["table", "gns", "reported"] = "table"
    max_sim_time_s: float | None = Field(None, gt=0)
    sample_every_s: float = Field(600.0, gt=0)
    power_budget_kw: float | None = Field(None, gt=0)
    power_capping: Literal["flow", "exact", "uniform"] = "flow"
    power_wait_fast: bool = False
    zeus_eta: float | None = None
    energy_types: bool = False
    energy_slack: float = 0.5
    carbon_shift: Literal["carbon-time", "wait-awhile", "ours"] | None = None
    carbon_price_g_per_gpu_h: float = Field(0.0, ge=0)
    carbon_trace: InstanceOf[CarbonTrace] | None = Field(None, exclude=True)
    suspend_after_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    resume_s: float = Field(300.0, ge=0, allow_inf_nan=False)
    off_power_w: float = Field(5.0, ge=0, allow_inf_nan=False)

    def compat_overrides(self) -> tuple[str, ...]:
        """What ``compat`` changed of these settings, as one note for the run's notes (empty
        without ``compat`` or when nothing changed), e.g. ``--compat gavel overrides --round-s
        60 → 360, --checkpoint-s 30 → 0, --restore-s 30 → 0``."""
        eff = self.effective()
        if eff is self:
            return ()
        changed = [
            f"--{name.replace('_', '-')} {_shown(old)} → {_shown(new)}"
            for name, old in self.scheduler
            if (new := getattr(eff.scheduler, name)) != old
        ]
        changed += [f"{name} off" for name in ("failures", "validation", "quotas")
                    if getattr(self, name) != getattr(eff, name)]
        if not changed:
            return ()
        return (f"--compat {self.compat} overrides " + ", ".join(changed),)

    def effective(self) -> SimConfig:
        """Apply ``compat``: returns the settings actually used."""
        if self.compat == "gavel":
            return self.model_copy(
                update={
                    "scheduler": self.scheduler.model_copy(update={
                        "mode": "rounds",
                        "round_s": 360.0,
                        "checkpoint_s": 0.0,
                        "restore_s": 0.0,
                        "mixed_gangs": False,
                        "fill_between_rounds": False,
                    }),
                    "failures": FailureConfig(),
                    "validation": ValidationConfig(),
                    "quotas": QuotaConfig(),
                }
            )
        return self


def _shown(value: object) -> str:
    """A setting's value as a flag would take it (``60`` for 60.0, ``on``/``off``)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
