"""What the service learns from progress reports, applied before each decision.

Each round (:func:`apply_learned`, called by :meth:`LiveService.round
<tessera.live.service.LiveService.round>` before it builds the snapshot):

1. every active job's measured rates (:class:`~tessera.live.progress.ProgressBook`) are laid
   over its prior in the service's oracle (:meth:`ThroughputOracle.set_measured
   <tessera.sched.core.oracle.ThroughputOracle.set_measured>`), so the snapshot, the policy
   and the service's own step bookkeeping read them. An overlay is changed only when a rate
   moves by more than :data:`MOVE` (10 %) or a flavor is measured for the first time; then the
   job's running run is first settled at the speed it had, and an event says
   ``measured 12.3 steps/s on a100 (prior 8.1)``;
2. a job running for :data:`SILENT_S` (60 s) without one accepted report is told once, in
   its events, that it is scheduled with its prior speed;
3. every active job's new step times are fitted (:meth:`LiveStepFits.refit
   <tessera.live.step_fits.LiveStepFits.refit>`), with an event when a fit is first made or
   moves; the round lays the fits on the views;
4. the slow-node rule (:mod:`tessera.live.slownodes`) marks and clears nodes, with events;
   the marked nodes are what the round adds to the snapshot's ``down_nodes``.
"""

from __future__ import annotations

from typing import Protocol

from tessera.live.progress import ProgressBook, RunRate
from tessera.live.slownodes import SlowNodes
from tessera.live.speeds import RunSpeeds
from tessera.live.store import JobRecord, Store
from tessera.model.gpus import GpuFlavor
from tessera.sched.core.oracle import ThroughputOracle

MOVE = 0.10
SILENT_S = 60.0


class Learner(Protocol):
    """The service as :func:`apply_learned` sees it (:class:`~tessera.live.service.LiveService`):
    its store, oracle and step bookkeeping, the report book, the slow-node rule, the rates laid
    on the oracle (``{job: {flavor short: steps/s}}``), the jobs told they never report and
    the job types a table knows."""

    store: Store
    oracle: ThroughputOracle
    speeds: RunSpeeds
    progress: ProgressBook
    slow_nodes: SlowNodes
    applied_rates: dict[str, dict[GpuFlavor, float]]
    silent_noted: set[str]
    known_types: frozenset[str]


def prior_rate(svc: Learner, rec: JobRecord, flavor: GpuFlavor) -> float:
    """The job's prior steps/s on ``flavor`` (consolidated; 0.0 where it cannot run)."""
    for r in svc.oracle.prior_rates(rec.job.spec):
        if r.flavor is flavor:
            return r.consolidated
    return 0.0


def apply_learned(svc: Learner, records: list[JobRecord], now_s: float) -> frozenset[str]:
    """Steps 1-4 of the module docstring; returns the nodes to avoid."""
    book = svc.progress
    present = frozenset(svc.oracle.cluster_flavors)
    running = {a.job_id: a for a in svc.store.allocations(("running",))}
    events: list[tuple[str | None, str]] = []
    runs: dict[str, list[RunRate]] = {}
    changed = book.take_changed()
    for rec in records:
        jid = rec.job_id
        job_runs = book.runs_view(jid)
        if job_runs:
            runs[jid] = job_runs
        a = running.get(jid)
        events.extend((jid, text) for text in book.steps.refit(jid))
        if (note := book.take_note(jid)) is not None:
            events.append((jid, note))
        if not job_runs and a is not None and a.started_s is not None and \
                now_s - a.started_s >= SILENT_S and jid not in svc.silent_noted:
            svc.silent_noted.add(jid)
            spec = rec.job.spec
            f = a.placement.sole_flavor if spec.num_gpus > 0 else None  # CPU-only: no GPU's
            cpu = f"{spec.cpu_steps_per_s:.3g} steps/s on CPUs" if spec.cpu_steps_per_s else None
            prior = (f"{prior_rate(svc, rec, f):.3g} steps/s on {f.short}" if f
                     else cpu or "its prior")
            events.append((jid, f"no progress reports: scheduling with the prior speed "
                                f"({prior}); a job reports with tessera.progress(steps=...)"))
        if not job_runs or (jid in svc.applied_rates and jid not in changed):
            continue
        measured = {r.flavor: r.steps_per_s for r in job_runs}
        applied = svc.applied_rates.get(jid, {})
        fresh = {f: r for f, r in measured.items() if f in present}
        moved = [s for s, r in fresh.items()
                 if s not in applied or abs(r - applied[s]) > MOVE * applied[s]]
        if not moved:
            continue
        if a is not None:
            with svc.store.tx() as db:  # bank the steps made at the speed it had (and a mate's)
                svc.speeds.settle_all(svc.store, db, now_s, {jid})
        svc.oracle.set_measured(jid, dict(fresh))
        svc.applied_rates[jid] = fresh
        for f in moved:
            events.append((jid, f"measured {fresh[f]:.3g} steps/s on {f.short} "
                                f"(prior {prior_rate(svc, rec, f):.3g})"))
    prior_of = {r.job_id: r for r in records}
    book.retain(set(prior_of))
    for jid in [j for j in svc.applied_rates if j not in prior_of]:  # ended: drop its overlay
        svc.oracle.set_measured(jid, None)
        del svc.applied_rates[jid]

    def table_prior(jid: str, flavor: GpuFlavor) -> float | None:
        rec = prior_of.get(jid)
        if rec is None or rec.job.spec.job_type not in svc.known_types:
            return None
        return prior_rate(svc, rec, flavor) or None

    def queue_of(jid: str) -> str:
        rec = prior_of.get(jid)
        return rec.queue if rec is not None else ""

    evidence = svc.slow_nodes.evidence(runs, now_s, table_prior, queue_of)
    for text in svc.slow_nodes.update(evidence, now_s):
        events.append((None, text))
    if events:
        with svc.store.tx() as db:
            for jid_or_none, text in events:
                svc.store.event(db, now_s, jid_or_none,
                                "slow-node" if jid_or_none is None else "progress", text)
    return frozenset(svc.slow_nodes.marked)


def speeds_json(svc: Learner, rec: JobRecord) -> list[dict[str, object]]:
    """Per flavor the job may use: its predicted speed (the prior, steps/s) and its measured
    one (``None`` until a run there has reported), as ``GET /api/jobs/<id>`` and ``tessera
    job`` show them."""
    measured = svc.progress.measured(rec.job_id)
    return [{"flavor": r.flavor.short, "predicted_steps_per_s": r.consolidated,
             "measured_steps_per_s": measured.get(r.flavor)}
            for r in svc.oracle.prior_rates(rec.job.spec)]
