"""The settings a run used, in words: what the terminal prints before a run and the HTML
report lists at its top.

Everything comes from the :class:`~tessera.sim.config.SimConfig` the simulator ran with (after
``compat`` is applied, :meth:`~tessera.sim.config.SimConfig.effective`) and its
:class:`~tessera.sched.core.settings.SchedulerSettings`; ``config.json`` beside the report holds the
same values as fields.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import SpecError
from tessera.sched.catalog import make_policy
from tessera.sim.config import SimConfig


@dataclass(frozen=True, slots=True)
class Setting:
    """One line of a run's settings: ``name: value``."""

    name: str
    value: str


def _seconds(value_s: float) -> str:
    if not math.isfinite(value_s):
        return "never"
    return f"{value_s:g} s"


def decides_in_rounds(config: SimConfig, policy: str) -> bool:
    """Whether ``policy`` (a registry name) runs in rounds under ``config``; a name the
    registry does not know runs in rounds only when ``config`` says so for every policy."""
    sched = config.effective().scheduler
    try:
        return sched.uses_rounds(make_policy(policy))
    except SpecError:
        return sched.mode == "rounds"


def _cadence(config: SimConfig, policies: Sequence[str]) -> str:
    """Which policies decide in rounds and which on events, under ``config``."""
    sched = config.scheduler
    rounds = [p for p in policies if decides_in_rounds(config, p)]
    events = [p for p in policies if p not in rounds]
    parts = []
    if rounds:
        fill = ", idle GPUs filled between rounds" if sched.fill_between_rounds else ""
        parts.append(f"in rounds of {sched.round_s:g} s: {', '.join(rounds)}{fill}")
    if events:
        parts.append(f"on events (arrivals, completions, wake-ups): {', '.join(events)}")
    return f"{sched.mode}; decide " + "; ".join(parts)


def _failures(config: SimConfig) -> str:
    f = config.failures
    if f.job_failure_rate <= 0:
        return "off"
    shape = (f"{100 * f.early_share:g} % within {f.early_window_s:g} s of a start, the rest late"
             if f.time_model == "early-late" else "at a uniform point of the remaining work")
    return (f"{100 * f.job_failure_rate:g} % of jobs flaky (a retry fails again with chance "
            f"{f.repeat_probability:g}), failing {shape}; checkpoint every "
            f"{f.checkpoint_interval_s:g} s; up to {f.default_max_retries} retries after "
            f"{f.retry_delay_s:g} s")


def _quotas(config: SimConfig) -> str:
    q = config.quotas
    if not q.enabled and config.tenancy is None:
        return "none"
    parts = [f"{name} {c.nominal_gpus} GPUs" for name, c in sorted(q.queues.items())]
    if config.tenancy is not None:
        parts.append(f"--tenancy: {len(config.tenancy.queues)} queues, "
                     f"{len(config.tenancy.cohorts)} cohorts")
    if q.split != "none":
        borrow = ("unlimited" if q.borrowing_limit_gpus is None
                  else f"{q.borrowing_limit_gpus} GPUs")
        parts.append(f"cluster split among the trace's queues by {q.split}, borrowing "
                     f"{borrow}")
    return "; ".join(parts)


def _elastic_restarts(policies: Sequence[str]) -> str:
    """The restart rule of the elastic policies among ``policies`` ('' when there are none)."""
    elastic = [p for p in policies if make_policy(p).elastic]
    if not elastic:
        return ""
    return (f"; {', '.join(elastic)}: an elastic job pays its model's measured restart "
            "(25-250 s, Sia's figures) at every start, resize or migration instead")


def run_settings(
    config: SimConfig,
    policies: Sequence[str],
    *,
    trace: str,
    jobs: int,
    cluster: str,
    throughputs: str,
) -> tuple[Setting, ...]:
    """The settings of a comparison of ``policies`` on ``trace`` (``jobs`` jobs) and
    ``cluster`` (its description), with the throughput table named ``throughputs``."""
    cfg = config.effective()
    s = cfg.scheduler
    out = [
        Setting("trace", f"{trace} ({jobs:,} jobs)"),
        Setting("cluster", cluster),
        Setting("policies", ", ".join(policies)),
        Setting("throughput table", throughputs),
        Setting("cadence", _cadence(cfg, policies)),
        Setting("preemption cost", f"checkpoint {s.checkpoint_s:g} s + restore "
                f"{s.restore_s:g} s per preemption or migration (restore only after a failure)"
                + _elastic_restarts(policies)),
        Setting("locality wait", f"{_seconds(s.locality_wait_s)} before a gang may be split "
                "across servers"),
        Setting("migration", f"to a faster free flavor when the job then finishes at least "
                f"{100 * s.upgrade_min_gain:g} % sooner (preemptive event-driven policies)"),
        Setting("mixed gangs", f"on, at ≥ {100 * s.mixed_min_speed:g} % of the best speed"
                if s.mixed_gangs else "off"),
        Setting("failures", _failures(cfg)),
        Setting("pre-run validation", f"gangs of ≥ {cfg.validation.min_gpus} GPUs run "
                f"{cfg.validation.validation_s:g} s on one GPU first"
                if cfg.validation.min_gpus else "off"),
        Setting("tenant quotas", _quotas(cfg)),
    ]
    if cfg.compat:
        out.append(Setting("compatibility", f"{cfg.compat}: its own loop and costs "
                           f"(solver {cfg.compat_solver})"))
    if cfg.max_sim_time_s is not None:
        out.append(Setting("horizon", f"stop at {cfg.max_sim_time_s:g} s"))
    if cfg.carbon_shift is not None:
        price = (f", price {cfg.carbon_price_g_per_gpu_h:g} g CO2 per GPU-hour of delay"
                 if cfg.carbon_shift == "ours" else "")
        out.append(Setting("carbon shifting", f"{cfg.carbon_shift}: jobs with slack start or "
                           f"run in cleaner 30-min slots{price}"))
    out.append(Setting("seed", str(cfg.seed)))
    return tuple(out)
