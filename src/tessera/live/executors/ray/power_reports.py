"""A released Ray run's power report, gathered from its ranks' exit records (issue 34, part 5).

Each rank's host writes its energy and power notes into the rank's exit record, and a host that
restored a limit a dead host left writes the notes under ``powerleft:<job>:<run>:<rank>``
(:mod:`~tessera.live.executors.ray.rank_power`). When the executor releases a run it calls
:func:`gather` with the exit records it collected; the report goes to the service
(:func:`tessera.live.run_power_ray.collect`), which writes the events and the run's energy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tessera.live.executors.ray.rank_power import leftover_key
from tessera.live.executors.ray.records import delete, exit_key, get
from tessera.live.run_power_ray import RankPowerReport, RunPowerReport

__all__ = ["NOTE_CHARS", "gather"]

#: The longest power note kept for an event (the hosts write a line of ~100 characters).
NOTE_CHARS = 500


def gather(job_id: str, run: int, world: int, records: Mapping[int, dict[str, Any]],
           into: list[RunPowerReport]) -> None:
    """Append to ``into`` the run's report from ``records`` (rank -> exit record, else the
    KV's) and the KV's leftover notes, which it deletes; nothing when no rank says anything of
    power (none was asked)."""
    ranks: list[RankPowerReport] = []
    for rank in range(world):
        rec = records.get(rank) or get(exit_key(job_id, run, rank))
        try:  # restored by a dead host's successor
            left = get(leftover_key(job_id, run, rank))
        except (TypeError, ValueError):  # not a JSON object: forged, or torn
            left = {"power": ["power notes of a dead rank host unreadable"]}
        if left is not None:
            delete(leftover_key(job_id, run, rank))
        if (rec is None or "power" not in rec) and left is None:
            continue
        ranks.append(RankPowerReport(rank, _energy_of(rec), (*_notes_of(rec),
                                                             *_notes_of(left))))
    if ranks:
        into.append(RunPowerReport(job_id, run, world, tuple(ranks)))


def _energy_of(rec: Mapping[str, Any] | None) -> float | None:
    """A record's ``energy_j``: joules, or ``None`` unless a finite number >= 0 (anyone with
    the cluster's token can write the KV: a forged value must not stop the release)."""
    energy = None if rec is None else rec.get("energy_j")
    if isinstance(energy, bool) or not isinstance(energy, int | float):
        return None
    return float(energy) if math.isfinite(energy) and energy >= 0 else None


def _notes_of(rec: Mapping[str, Any] | None) -> tuple[str, ...]:
    """A record's ``power`` notes as strings, each cut to :data:`NOTE_CHARS` (a value that is
    not a list gives one line saying so)."""
    if rec is None:
        return ()
    notes = rec.get("power", [])
    if not isinstance(notes, list):
        return ("power notes unreadable: not a list",)
    return tuple(str(n)[:NOTE_CHARS] for n in notes)
