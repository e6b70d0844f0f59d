"""Each run's energy, as NVML measured it, kept in the state database.

:mod:`tessera.live.run_power` measures a run's energy (the GPUs' total-energy counters at the
run's end minus at its start, :class:`~tessera.live.nvml_power.GpuPower`) and stores it here, in
the same transaction that records the run's end. A run whose energy is unknown (no NVML, a
board without a counter, GPUs shared with other runs) has no row: an unknown energy is never
stored as zero. ``tessera job`` shows a job's rows (``GET /api/jobs/{id}``, ``energy``) and
``/metrics`` sums them per job (``tessera_job_energy_joules_total``, admin only).

The table is created with the store's schema (:mod:`tessera.live.storedb`); rows go with their
job when the stored-job caps delete it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily

__all__ = ["SCHEMA", "energy_json", "energy_metric", "job_energy", "record"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS run_energy (
    job_id TEXT NOT NULL, run INTEGER NOT NULL, energy_j REAL NOT NULL,
    PRIMARY KEY (job_id, run));
"""

#: How the store's readers look: ``read(sql, args)`` -> rows (``Store._read``).
Reader = Callable[..., Sequence[Sequence[Any]]]


def record(db: sqlite3.Connection, job_id: str, run: int, energy_j: float) -> None:
    """Store run ``(job_id, run)``'s energy in joules (inside the caller's transaction)."""
    db.execute("INSERT OR REPLACE INTO run_energy (job_id, run, energy_j) VALUES (?, ?, ?)",
               (job_id, run, float(energy_j)))


def job_energy(read: Reader, job_id: str) -> list[tuple[int, float]]:
    """``[(run, joules)]`` of the job's runs whose energy was measured, by run."""
    return [(int(r), float(e)) for r, e in
            read("SELECT run, energy_j FROM run_energy WHERE job_id=? ORDER BY run", (job_id,))]


def energy_json(read: Reader, job_id: str) -> dict[str, Any] | None:
    """The ``energy`` of a job's API answer: its measured runs and their sum (``None``: no
    run of the job was measured)."""
    runs = job_energy(read, job_id)
    if not runs:
        return None
    return {"total_j": sum(e for _, e in runs),
            "runs": [{"run": r, "energy_j": e} for r, e in runs]}


def energy_metric(read: Reader) -> CounterMetricFamily:
    """``tessera_job_energy_joules_total{job_id,queue}``: each stored job's measured energy."""
    out = CounterMetricFamily(
        "tessera_job_energy_joules", "GPU energy of each job's measured runs (NVML's "
        "total-energy counters over the GPUs the run held alone), in joules; runs whose "
        "energy is unknown do not count.", labels=["job_id", "queue"])
    for job_id, queue, total in read(
            "SELECT e.job_id, j.queue, SUM(e.energy_j) FROM run_energy e "
            "JOIN jobs j ON j.job_id = e.job_id GROUP BY e.job_id ORDER BY e.job_id"):
        out.add_metric([str(job_id), str(queue)], float(total))
    return out
