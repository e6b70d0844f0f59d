"""A released Ray run's power report, gathered from its ranks' exit records (issue 34, part 5).

Each rank's host writes its energy and power notes into the rank's exit record, and a host that
restored a limit a dead host left writes the notes under ``powerleft:<job>:<run>:<rank>``
(:mod:`~tessera.live.executors.ray.rank_power`). When the executor releases a run it calls
:func:`gather` with the exit records it collected; the report goes to the service
(:func:`tessera.live.run_power_ray.collect`), which writes the events and the run's energy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tessera.live.executors.ray.rank_power import leftover_key
from tessera.live.executors.ray.records import delete, exit_key, get
from tessera.live.run_power_ray import RankPowerReport, RunPowerReport

__all__ = ["gather"]


def gather(job_id: str, run: int, world: int, records: Mapping[int, dict[str, Any]],
           into: list[RunPowerReport]) -> None:
    """Append to ``into`` the run's report from ``records`` (rank -> exit record, else the
    KV's) and the KV's leftover notes, which it deletes; nothing when no rank says anything of
    power (none was asked)."""
    ranks: list[RankPowerReport] = []
    for rank in range(world):
        rec = records.get(rank) or get(exit_key(job_id, run, rank))
        left = get(leftover_key(job_id, run, rank))  # restored by a dead host's successor
        if left is not None:
            delete(leftover_key(job_id, run, rank))
        if (rec is None or "power" not in rec) and left is None:
            continue
        energy = rec.get("energy_j") if rec is not None else None
        notes = (*(rec or {}).get("power", ()), *(left or {}).get("power", ()))
        ranks.append(RankPowerReport(rank, None if energy is None else float(energy),
                                     tuple(str(n) for n in notes)))
    if ranks:
        into.append(RunPowerReport(job_id, run, world, tuple(ranks)))
