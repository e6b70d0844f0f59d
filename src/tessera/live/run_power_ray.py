"""The service's side of power limits and energy for runs on Ray (issue 34, part 5).

Under Ray the service never touches a GPU: each rank's host, on the rank's node, sets the
limit on the GPUs Ray gave that rank, restores it when the rank ends and measures its energy
(:mod:`tessera.live.executors.ray.rank_power`). The service does the two ends around that:

* **at launch** (:func:`ask`) it decides whether the run may have a limit and an energy
  figure at all: only a run that holds its GPUs alone -- no co-located partner now
  (``share_with``, ``Placement.colocated_with``) and none later (the job is ``exclusive``, or the
  policy never packs). A Ray bundle's GPUs are booked to that bundle alone, so such a run's
  limit caps no other tenant's board and its counters count no other run's work. Any other run
  that asks for a limit runs unchanged, and a ``power`` event says why;
* **after the run's end** (:func:`collect`, each pass of the service's loop) it takes the
  reports the executor built from the ranks' exit records when it released the run
  (:class:`RunPowerReport`): the ranks' notes become ``power`` events (``run 1 rank 0: power
  limit 200 W set on GPU 0 (node 5f3e…)``, ``… restored …``), and the run's energy -- the sum
  of its ranks', only when every rank's is known, never a partial sum -- goes into
  ``run_energy`` (``GET /api/jobs/{id}``'s ``energy``, ``/metrics``).

The energy therefore appears a moment after the run's end is recorded (the release that
gathers the exit records runs in the background), not in the same transaction as under the
local executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tessera.live import run_energy
from tessera.live.store import Allocation, Store

__all__ = ["PowerReportingExecutor", "RankPowerReport", "RunPowerReport", "ask", "collect"]


@dataclass(frozen=True, slots=True)
class RankPowerReport:
    """What one rank's host said of its power: its energy (J, ``None``: unknown) and notes."""

    rank: int
    energy_j: float | None
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunPowerReport:
    """The power reports of a run's ranks, gathered when the executor released the run.

    ``world``: the run's number of ranks (a rank missing from ``ranks`` -- its host died
    before it could report -- makes the run's energy unknown)."""

    job_id: str
    run: int
    world: int
    ranks: tuple[RankPowerReport, ...]

    @property
    def energy_j(self) -> float | None:
        """The run's energy: every rank's summed, ``None`` when any rank's is unknown."""
        known = [r.energy_j for r in self.ranks if r.energy_j is not None]
        if self.world < 1 or len(known) != self.world or len(self.ranks) != self.world:
            return None
        return float(sum(known))


@runtime_checkable
class PowerReportingExecutor(Protocol):
    """An executor whose ranks measure their own power (Ray): it hands the service the
    reports of the runs it released since the last call."""

    def power_reports(self) -> list[RunPowerReport]: ...


def ask(a: Allocation, limit_w: float | None, exclusive: bool,
        host: tuple[str, int] | None, packs: bool) -> tuple[bool, float | None, str | None]:
    """``(measure, limit_w, note)``: whether the ranks of run ``a`` measure their energy, the
    limit they set (``None``: none), and the event line when a limit asked is not passed on."""
    if host is not None or a.placement.colocated_with:
        why = "the run shares its GPUs with another run"
    elif packs and not exclusive:
        why = ("the policy may place another run on its GPUs while it runs (the job is not "
               "exclusive)")
    else:
        return True, limit_w, None
    note = (f"power limit {limit_w:g} W not set: {why}, so a limit would cap another run's "
            "boards; the run runs unchanged") if limit_w is not None else None
    return False, None, note


def collect(store: Store, executor: object, now_s: float) -> list[RunPowerReport]:
    """Write the reports ``executor`` has (events, and each run's energy where known); returns
    them. An executor that does not report power is a no-op."""
    if not isinstance(executor, PowerReportingExecutor):
        return []
    reports = executor.power_reports()
    if not reports:
        return reports
    with store.tx() as db:
        for rep in reports:
            known = store.get(rep.job_id) is not None
            for line in _lines(rep):
                store.event(db, now_s, rep.job_id if known else None, "power",
                            line if known else f"{rep.job_id}: {line}")
            energy = rep.energy_j
            if known and energy is not None:
                run_energy.record(db, rep.job_id, rep.run, energy)
    return reports


def _lines(rep: RunPowerReport) -> Sequence[str]:
    """The event lines of a run's report: each rank's notes, then its energy or why none."""
    out = [f"run {rep.run} rank {r.rank}: {note}" for r in rep.ranks for note in r.notes]
    energy = rep.energy_j
    if energy is not None:
        out.append(f"run {rep.run}: energy {energy:.1f} J ({rep.world} rank(s))")
    elif any(r.energy_j is not None for r in rep.ranks):
        missing = sorted(set(range(rep.world)) - {r.rank for r in rep.ranks
                                                  if r.energy_j is not None})
        out.append(f"run {rep.run}: energy unknown: rank(s) {', '.join(map(str, missing))} "
                   "were not measured")
    return out
