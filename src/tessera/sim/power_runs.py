"""Power limits in the simulator: jobs run slower at their limit, and the cluster's power is
watched at every decision.

With ``SimConfig.power_budget_kw`` the decision core ends each round with the power-budget
stage (:mod:`tessera.sched.core.power_budget`), which returns a limit per capped job. The
world (:class:`~tessera.sim.world.SimWorld`) hands each decision to :class:`PowerRuns`, which

* slows a starting job by its step-time factor at its limit (its true speed divided by the
  factor);
* re-rates a running job whose limit changed: its progress is settled up to now, its speed
  becomes the uncapped speed divided by the new factor, and its completion (and any booked
  failure) is re-booked under a new epoch, as an elastic speed change is;
* tells the run's :class:`~tessera.sim.energy.EnergyBook` (:meth:`PowerRuns.attach`) each
  limit a job runs at and from when, so the result's ``energy_kwh``, power series and
  ``peak_power_kw`` count a capped job at its capped draw -- one energy book for every run;
* measures cluster power right after the decision is applied -- power rises only there (a
  completion only lowers it) -- for tests (:attr:`PowerRuns.trace`, :attr:`PowerRuns.peak_w`).

The run's extras carry only what the energy summary does not: ``power_budget_kw`` and, with
Zeus, ``zeus_cost_mj``. The power model is
:func:`tessera.perf.power_estimate.default_power_model`, the one every energy figure reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobId
from tessera.perf.power import PowerModel
from tessera.perf.power_estimate import default_power_model
from tessera.sched.core.energy_choice import energy_aware
from tessera.sched.core.policy import Policy
from tessera.sched.core.power_options import PowerBudget, ZeusCost
from tessera.sched.core.snapshot import Placement
from tessera.sim.config import SimConfig
from tessera.sim.energy import EnergyBook
from tessera.sim.events import COMPLETE, FAIL, EventSink
from tessera.sim.state import SimJob


def power_runs_for(config: SimConfig, cluster: ClusterSpec, policy: Policy,
                   model: PowerModel | None = None) -> PowerRuns | None:
    """The run's :class:`PowerRuns` (``None`` without ``config.power_budget_kw`` and
    ``config.zeus_eta``).

    Raises:
        SpecError: a budget or Zeus with ``--compat gavel`` or an elastic policy (their
            drivers set speeds themselves and would undo the limits); both at once; η outside
            [0, 1]; a budget not above the cluster's idle draw (no job could ever run).
    """
    if config.energy_types and config.zeus_eta is None:
        raise SpecError("energy-aware type choice needs --zeus-eta (the η of its cost)")
    if config.power_budget_kw is None and config.zeus_eta is None:
        return None
    what = "--power-budget-kw" if config.power_budget_kw is not None else "--zeus-eta"
    if config.power_budget_kw is not None and config.zeus_eta is not None:
        raise SpecError("give --power-budget-kw or --zeus-eta, not both (the budget sets "
                        "every job's limit itself)")
    if config.compat == "gavel":
        raise SpecError(f"{what} does not work with --compat gavel (Gavel's driver models no "
                        "power)")
    if policy.elastic:
        raise SpecError(f"{what} does not work with the elastic policy "
                        f"{policy.display_name!r} (it sets job speeds itself)")
    m = model or default_power_model()
    idle_w = sum(n.gpus * m.idle_power_w(n.flavor) for n in cluster.nodes)
    if config.power_budget_kw is not None and config.power_budget_kw * 1e3 <= idle_w:
        raise SpecError(f"--power-budget-kw {config.power_budget_kw:g} is not above the "
                        f"cluster's idle draw, {idle_w / 1e3:.3g} kW for {cluster.total_gpus} "
                        "GPUs: no job could ever run")
    budget = (PowerBudget(config.power_budget_kw * 1e3, m, config.power_capping,
                          config.power_wait_fast)
              if config.power_budget_kw is not None else None)
    zeus = (ZeusCost(config.zeus_eta, m, max(m.limit_range(f).max_w
                                             for f in cluster.gpus_by_flavor()))
            if config.zeus_eta is not None else None)
    return PowerRuns(m, cluster, budget, zeus)


def energy_policy(config: SimConfig, policy: Policy, runs: PowerRuns) -> Policy:
    """``policy`` with energy-aware type choice when ``config.energy_types`` asks for it."""
    if not config.energy_types:
        return policy
    assert runs.zeus is not None  # (power_runs_for refuses energy_types without zeus_eta)
    return energy_aware(policy, runs.zeus, config.energy_slack)


class PowerRuns:
    """Per-job power limits, the cluster's power and the jobs' energy over one simulation.

    Args:
        model: the power model.
        cluster: the inventory (idle GPUs draw idle power).
        budget: the budget the decision core keeps, if any.
        zeus: Zeus's cost, if the decision core sets per-job Zeus limits (its total over the
            run is reported).
    """

    def __init__(self, model: PowerModel, cluster: ClusterSpec,
                 budget: PowerBudget | None = None, zeus: ZeusCost | None = None) -> None:
        self.budget = budget
        self.zeus = zeus
        self.model = model
        self._idle_w = sum(n.gpus * self.model.idle_power_w(n.flavor) for n in cluster.nodes)
        self._limits: Mapping[JobId, float] = {}
        self._base: dict[int, float] = {}
        """Each running job's uncapped speed (steps/s)."""
        self._factor: dict[int, float] = {}
        """Step-time factor each running job runs at now (absent: 1.0)."""
        self._limit: dict[int, float | None] = {}
        self._since: dict[int, tuple[float, int]] = {}
        """Each running job's ``(since_s, GPUs)`` of its current run."""
        self.book: EnergyBook | None = None
        """The run's energy book, told each job's limits (:meth:`attach`)."""
        self.gpu_s = 0.0
        """GPU-seconds the jobs held."""
        self.peak_w = 0.0
        self.trace: list[tuple[float, float]] = []
        """``(time_s, cluster power W)`` after every applied decision."""
        self._t_now = 0.0

    def attach(self, book: EnergyBook) -> None:
        """Tell ``book`` each job's limit from now on (it books capped stretches capped)."""
        self.book = book

    def capped(self) -> bool:
        """Whether a running job runs below its maximum limit (a decision could lift it)."""
        return bool(self._limits)

    def decided(self, limits_w: Mapping[JobId, float]) -> None:
        """The round's limits, read by :meth:`start_rate` and :meth:`settle`."""
        self._limits = limits_w

    def start_rate(self, job: SimJob, p: Placement, rate: float) -> float:
        """``job``'s speed on ``p`` at its limit, given its uncapped ``rate``."""
        lim = self._limits.get(job.spec.job_id)
        factor = self._factor_at(job, p, lim)
        self._limit[job.idx] = lim
        self._factor[job.idx] = factor
        self._base[job.idx] = rate
        self._since[job.idx] = (self._t_now, p.num_gpus)
        self._mark(job, self._t_now, lim)
        return rate / factor

    def _mark(self, job: SimJob, t_s: float, lim: float | None) -> None:
        if self.book is not None:
            self.book.limit_set(job.idx, t_s, lim)

    def _close(self, job: SimJob, t_s: float) -> None:
        """End ``job``'s run at ``t_s``: book its GPU time."""
        got = self._since.pop(job.idx, None)
        if got is not None:
            since_s, gpus = got
            self.gpu_s += gpus * max(t_s - since_s, 0.0)

    def stopped(self, job: SimJob, t_s: float) -> None:
        """``job`` gives its GPUs back at ``t_s``."""
        self._close(job, t_s)

    def at(self, t_s: float) -> None:
        """The time the next starts happen at (a decision's)."""
        self._t_now = t_s

    def _factor_at(self, job: SimJob, p: Placement, lim: float | None) -> float:
        if lim is None or p.node_flavors:
            return 1.0
        return self.model.estimate(job.spec.job_type, job.spec.model, p.flavors[0],
                                   lim).step_time_factor

    def settle(self, running: Mapping[int, SimJob], t_s: float, schedule: EventSink) -> None:
        """After a decision at ``t_s``: re-rate running jobs whose limit changed, forget the
        stopped, and record cluster power."""
        for idx in [i for i in self._factor if i not in running]:
            del self._factor[idx]
            self._limit.pop(idx, None)
            self._base.pop(idx, None)
        power = self._idle_w
        for job in running.values():
            p = job.placement
            if p is None:
                continue
            lim = self._limits.get(job.spec.job_id)
            if lim != self._limit.get(job.idx):
                self._rerate(job, p, lim, t_s, schedule)
            power += self._draw_w(job, p, lim)
        self.peak_w = max(self.peak_w, power)
        self.trace.append((t_s, power))

    def _draw_w(self, job: SimJob, p: Placement, lim: float | None) -> float:
        """What ``job``'s gang draws above idle."""
        return self._gang_w(job, p, lim, above_idle=True)

    def _gang_w(self, job: SimJob, p: Placement, lim: float | None,
                above_idle: bool = False) -> float:
        """What ``job``'s gang draws at ``lim`` (a mixed gang: uncapped)."""
        out = 0.0
        flavors = p.node_flavors or (p.flavors[0],) * len(p.gpus_by_node)
        for fl, (_node, k) in zip(flavors, p.gpus_by_node, strict=True):
            use = None if p.node_flavors else lim
            draw = self.model.estimate(job.spec.job_type, job.spec.model, fl, use).avg_power_w
            out += k * (draw - (self.model.idle_power_w(fl) if above_idle else 0.0))
        return out

    def _rerate(self, job: SimJob, p: Placement, lim: float | None, t_s: float,
                schedule: EventSink) -> None:
        job.advance(t_s)
        self._mark(job, t_s, lim)
        old = self._factor.get(job.idx, 1.0)
        new = self._factor_at(job, p, lim)
        self._limit[job.idx] = lim
        self._factor[job.idx] = new
        if new == old or job.rate <= 0:
            return
        job.rate = self._base.get(job.idx, job.rate * old) / new
        job.epoch += 1
        job.view = None
        schedule(max(job.progress_from_s, t_s) + job.remaining / job.rate, COMPLETE,
                 job.idx, job.epoch)
        if job.fail_at_s is not None:
            schedule(max(job.fail_at_s, t_s), FAIL, job.idx, job.epoch)

    def finish(self, running: Mapping[int, SimJob], t_s: float) -> None:
        """Close the stretches of jobs still running at the end (``t_s``)."""
        for job in running.values():
            self._close(job, t_s)

    def extras(self) -> dict[str, float]:
        """What the run's energy summary does not already say: the budget
        (``power_budget_kw``) and, with Zeus, the total of Zeus's cost over the jobs
        (``zeus_cost_mj``: η·energy + (1 − η)·MAXPOWER·GPU-time, in MJ, the energy being the
        jobs' energy in the attached book). Peak power and energy are the summary's
        ``peak_power_kw`` and ``energy_kwh`` (one name per quantity)."""
        out: dict[str, float] = {}
        if self.budget is not None:
            out["power_budget_kw"] = self.budget.budget_w / 1e3
        if self.zeus is not None:
            z = self.zeus
            energy_j = self.book.jobs_j() if self.book is not None else 0.0
            out["zeus_cost_mj"] = (z.eta * energy_j
                                   + (1 - z.eta) * z.max_power_w * self.gpu_s) / 1e6
        return out
