"""Attach a run's energy (:mod:`tessera.sim.energy`) to its :class:`SimResult`."""

from __future__ import annotations

from dataclasses import replace

from tessera.model.jobs import Workload
from tessera.sim.energy import EnergyBook, with_carbon
from tessera.sim.metrics import SimResult
from tessera.workload.carbon import CarbonTrace

__all__ = ["with_energy", "with_result_carbon"]


def with_energy(result: SimResult, book: EnergyBook, workload: Workload,
                end_s: float) -> SimResult:
    """``result`` with the cluster's energy summary and each job's ``energy_kwh``.

    The span runs from the first submission to the last moment a job ran or finished (at most
    ``end_s``, the run's last event: the clock may pass stale completions of stopped runs long
    after the work ended, and idle hours there would only add idle energy)."""
    start_s = workload.jobs[0].submit_time_s if workload.jobs else 0.0
    last = max([book.last_change_s()] + [r.finish_s for r in result.jobs
                                         if r.finish_s is not None], default=start_s)
    end_s = min(max(last, start_s), max(end_s, start_s))
    jobs = tuple(replace(r, energy_kwh=book.job_kwh(i)) for i, r in enumerate(result.jobs))
    return replace(result, jobs=jobs, energy=book.summary(start_s, end_s))


def with_result_carbon(result: SimResult, trace: CarbonTrace) -> SimResult:
    """``result`` with ``carbon_kg`` under ``trace`` (a result without energy is returned as
    it is)."""
    if result.energy is None:
        return result
    return replace(result, energy=with_carbon(result.energy, trace))
