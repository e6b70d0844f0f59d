"""Per-job CSV/JSON files and the frozen copy of a run's settings."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

from tessera.sim.estimate_error import CSV_HEADER as ERROR_CSV_HEADER
from tessera.sim.metrics import JobRecord, SimResult

PENDING_RECORD_FIELDS = ("wait_quota_s", "wait_capacity_s", "wait_fragmentation_s",
                         "wait_decision_s", "pending_s")
"""The per-job waits that :attr:`SimResult.pending_recorded` gates."""


def safe_name(policy: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in policy)


def write_job_csv(result: SimResult, path: Path) -> None:
    """One row per job: outcome, times, waits by reason, preemptions, failures, ρ. A value
    the run did not record (the waits under ``--compat gavel``) is an empty cell, not 0."""
    fields = [f.name for f in dataclasses.fields(JobRecord)]
    blank = set() if result.pending_recorded else set(PENDING_RECORD_FIELDS)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(fields)
        for rec in result.jobs:
            w.writerow(["" if f in blank or getattr(rec, f) is None else getattr(rec, f)
                        for f in fields])


def write_summary_json(result: SimResult, path: Path) -> None:
    payload = {
        "policy": result.policy,
        "cluster": result.cluster,
        "workload": result.workload,
        "config": result.config.model_dump(),
        "metrics": result.as_dict(),
        "phase_ms_total": dict(result.phase_ms),
    }
    path.write_text(json.dumps(payload, indent=2, default=str))


def write_estimate_error_csv(result: SimResult, path: Path) -> None:
    """The run's estimate error over time (learned speeds), one row per point:
    ``time_s,mean_error,p90_error,jobs`` (errors as fractions: 0.25 = 25 % off)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(ERROR_CSV_HEADER)
        w.writerows(result.estimate_error)


def write_run_files(results: list[SimResult], out: Path) -> list[Path]:
    """Write every policy's jobs CSV and summary JSON under ``out`` (and its estimate-error
    CSV under learned speeds); returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in results:
        stem = safe_name(r.policy)
        p_csv = out / f"jobs-{stem}.csv"
        p_json = out / f"summary-{stem}.json"
        write_job_csv(r, p_csv)
        write_summary_json(r, p_json)
        paths += [p_csv, p_json]
        if r.estimate_error:
            p_err = out / f"estimate-error-{stem}.csv"
            write_estimate_error_csv(r, p_err)
            paths.append(p_err)
    return paths
