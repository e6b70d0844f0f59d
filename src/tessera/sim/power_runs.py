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
* measures cluster power right after the decision is applied -- power rises only there (a
  completion only lowers it) -- and keeps the peak and the budget for the run's extras
  (``power_peak_kw``, ``power_budget_kw``) and for tests (:attr:`PowerRuns.trace`).

:func:`budget_power_model` is the one place the simulator picks its power model.
"""

from __future__ import annotations

from collections.abc import Mapping

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import JobId
from tessera.perf.power import PowerModel
from tessera.perf.power_tdp import TdpPowerModel
from tessera.sched.core.policy import Policy
from tessera.sched.core.power_options import PowerBudget
from tessera.sched.core.snapshot import Placement
from tessera.sim.config import SimConfig
from tessera.sim.events import COMPLETE, FAIL, EventSink
from tessera.sim.state import SimJob


def power_runs_for(config: SimConfig, cluster: ClusterSpec, policy: Policy,
                   model: PowerModel | None = None) -> PowerRuns | None:
    """The run's :class:`PowerRuns` (``None`` without ``config.power_budget_kw``).

    Raises:
        SpecError: a budget with ``--compat gavel`` or an elastic policy (their drivers set
            speeds themselves and would undo the limits).
    """
    if config.power_budget_kw is None:
        return None
    if config.compat == "gavel":
        raise SpecError("--power-budget-kw does not work with --compat gavel (Gavel's driver "
                        "models no power)")
    if policy.elastic:
        raise SpecError(f"--power-budget-kw does not work with the elastic policy "
                        f"{policy.display_name!r} (it sets job speeds itself)")
    budget = PowerBudget(config.power_budget_kw * 1e3, model or budget_power_model(),
                         config.power_capping)
    return PowerRuns(budget, cluster)


def budget_power_model() -> PowerModel:
    """The power model the simulator's budget runs on: the estimated TDP model
    (:mod:`tessera.perf.power_tdp`) until a profile-backed default is wired in here."""
    return TdpPowerModel()


class PowerRuns:
    """Per-job power limits and the cluster's power over one simulation.

    Args:
        budget: the budget the decision core keeps (its model is read here too).
        cluster: the inventory (idle GPUs draw idle power).
    """

    def __init__(self, budget: PowerBudget, cluster: ClusterSpec) -> None:
        self.budget = budget
        self.model = budget.model
        self._idle_w = sum(n.gpus * self.model.idle_power_w(n.flavor) for n in cluster.nodes)
        self._limits: Mapping[JobId, float] = {}
        self._base: dict[int, float] = {}
        """Each running job's uncapped speed (steps/s)."""
        self._factor: dict[int, float] = {}
        """Step-time factor each running job runs at now (absent: 1.0)."""
        self._limit: dict[int, float | None] = {}
        self.peak_w = 0.0
        self.trace: list[tuple[float, float]] = []
        """``(time_s, cluster power W)`` after every applied decision."""

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
        return rate / factor

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
        out = 0.0
        flavors = p.node_flavors or (p.flavors[0],) * len(p.gpus_by_node)
        for fl, (_node, k) in zip(flavors, p.gpus_by_node, strict=True):
            use = None if p.node_flavors else lim
            draw = self.model.estimate(job.spec.job_type, job.spec.model, fl, use).avg_power_w
            out += k * (draw - self.model.idle_power_w(fl))
        return out

    def _rerate(self, job: SimJob, p: Placement, lim: float | None, t_s: float,
                schedule: EventSink) -> None:
        job.advance(t_s)
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

    def extras(self) -> dict[str, float]:
        """The run's power figures for its result."""
        return {"power_peak_kw": self.peak_w / 1e3,
                "power_budget_kw": self.budget.budget_w / 1e3}
