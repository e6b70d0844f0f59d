"""What a simulation produces: per-job records, time series and the summary people compare.

Definitions (DESIGN.md vocabulary). Each names the jobs it averages over, because they differ:

* **JCT** = completion − submission, over jobs that succeeded.
* **Queueing delay** (the table's *start wait*) = first start − submission, averaged over jobs
  that started. It is the wait *before the first run* only: a preemptive policy such as ``las``
  starts every job at once (0 s) and makes it wait later, after preemptions.
* **Time pending** = every spell a job spends waiting: before its first start and again after
  each preemption, failure retry or validation run; averaged over *all* jobs. It is split by
  reason, exactly: ``pending = quota + capacity + fragmentation + awaiting decision``.
  *Quota* (fair-share delay: the tenant queue is at its quota), *capacity* (others hold the
  GPUs) and *fragmentation* (GPUs free, but not with the locality needed) are the reasons the
  decision core gives a waiting job; *awaiting decision* is the time before any decision looked
  at it -- in rounds mode, a job that arrives (or retries after a failure) between rounds waits
  for the next round (up to ``round_s``) with no reason yet. (Gavel's own loop,
  ``compat="gavel"``, records neither.)
* **Makespan** = last completion − first submission.
* **GPU utilization** = busy GPU-seconds / (GPUs × makespan), overall and per flavor. A GPU is
  busy while a job holds it (restores included).
* **Finish-time fairness ρ** = JCT / T_id, over jobs that succeeded, where the *ideal time*
  T_id is the job's isolated duration on its fastest flavor, stretched when its fair share
  (GPUs / average number of active jobs during its life) is smaller than its gang:
  ``T_id = iso × max(1, g / (G / N_avg))``. ρ = 1: as fast as alone on the best GPUs;
  ρ = 3: three times as long. Every second of waiting counts, so a job of a few minutes that
  waits for the next round has a large ρ. This is *not* the ρ that ``finish_time_fairness``
  minimises: the policy measures ρ against an equal time share of every flavor among the jobs
  present at each reallocation (Gavel, Themis), which makes slower flavors look fair.
* **GPU-hours lost to failures** = work since the last checkpoint plus restore time of failed
  runs, times the gang size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import JobState, Workload
from tessera.sched.core.decide import PendingKind
from tessera.sched.core.oracle import RateKey, ThroughputOracle, rate_key
from tessera.sim.config import SimConfig
from tessera.sim.energy import EnergySummary
from tessera.sim.estimate_error import ErrorPoint
from tessera.sim.state import SimJob


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one instant: busy GPUs, waiting jobs, running jobs."""

    time_s: float
    busy_gpus: int
    queued_jobs: int
    running_jobs: int


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's outcome."""

    job_id: str
    job_type: str
    num_gpus: int
    queue: str
    outcome: str
    submit_s: float
    first_start_s: float | None
    finish_s: float | None
    jct_s: float | None
    queue_delay_s: float | None
    wait_quota_s: float
    wait_capacity_s: float
    wait_fragmentation_s: float
    wait_decision_s: float
    pending_s: float
    preemptions: int
    migrations: int
    failures: int
    lost_gpu_h: float
    ftf_rho: float | None
    ideal_s: float | None
    gpu_s_by_flavor: str
    reason: str = ""
    resizes: int = 0
    """Times an elastic allocation policy changed the job's GPU count (each one a restart)."""
    energy_kwh: float | None = None
    """Energy its GPUs drew over its runs (:mod:`tessera.sim.energy`)."""


@dataclass(frozen=True, slots=True)
class Summary:
    """Aggregate metrics of one run (seconds unless named otherwise)."""

    jobs: int
    succeeded: int
    failed: int
    rejected: int
    unfinished: int
    avg_jct_s: float
    p50_jct_s: float
    p95_jct_s: float
    p99_jct_s: float
    avg_queue_delay_s: float
    """Mean first start − submission over jobs that started (the table's *start wait*)."""
    makespan_s: float
    utilization: float
    utilization_by_flavor: Mapping[str, float]
    ftf_rho_mean: float
    ftf_rho_p95: float
    ftf_rho_max: float
    share_rho_above_1: float
    preemptions: int
    migrations: int
    gpu_hours_lost_to_failures: float
    wait_quota_h: float
    wait_capacity_h: float
    wait_fragmentation_h: float
    wait_decision_h: float
    pending_h: float
    """Job-hours pending over all spells: the four ``wait_*_h`` add up to it."""
    resizes: int = 0
    """Elastic jobs' GPU-count changes (each charged a restart; moves at the same count are
    ``migrations``)."""


@dataclass(frozen=True, slots=True)
class SimResult:
    """Everything one simulation produced."""

    policy: str
    cluster: str
    workload: str
    config: SimConfig
    summary: Summary
    jobs: tuple[JobRecord, ...]
    samples: tuple[Sample, ...]
    wall_s: float
    events: int
    decisions: int
    decide_s: float
    phase_ms: Mapping[str, float] = field(default_factory=dict)
    extras: Mapping[str, float] = field(default_factory=dict)
    """Counters of optional features: ``validation_gpu_h``, ``validations_passed``,
    ``failures_in_validation`` / ``failures_in_gang`` and their ``failure_gpu_h_in_*``,
    ``split_gpu_h`` (GPU-hours held by gangs split across nodes) and ``split_slowdown_gpu_h``
    (the part of those a consolidated gang would not have needed)."""
    notes: tuple[str, ...] = ()
    """What a reader of the results should know about the run: each solver fallback of the
    policy (a solver that failed and was replaced, a search that found nothing) with how many
    rounds it happened in."""
    energy: EnergySummary | None = None
    """Cluster energy, power over time and (with a carbon trace) emissions."""
    estimate_error: tuple[ErrorPoint, ...] = ()
    """Under learned speeds, the policies' estimate error over time, one point per round
    (:mod:`tessera.sim.estimate_error`); empty otherwise."""

    @property
    def pending_recorded(self) -> bool:
        """Whether this run recorded time pending and its reasons (``pending_h``, the
        ``wait_*`` metrics). Gavel's own loop (``compat="gavel"``) does not: it keeps no
        pending spells, so its zeros would mean "not measured", not "no wait"."""
        return self.config.compat != "gavel"

    def as_dict(self) -> dict[str, object]:
        """The flat metrics for ``--json`` (one entry of ``results``). A metric the run did
        not record is ``None`` (JSON ``null``), never 0, and ``not_recorded`` says why."""
        out = self._metrics()
        if not self.pending_recorded:
            for key in PENDING_KEYS:
                out[key] = None
            out["not_recorded"] = {key: PENDING_NOT_RECORDED for key in PENDING_KEYS}
        return out

    def _metrics(self) -> dict[str, object]:
        s = self.summary
        return {
            "avg_jct_s": s.avg_jct_s, "p50_jct_s": s.p50_jct_s, "p95_jct_s": s.p95_jct_s,
            "p99_jct_s": s.p99_jct_s, "avg_queue_delay_s": s.avg_queue_delay_s,
            "makespan_s": s.makespan_s, "utilization": s.utilization,
            "utilization_by_flavor": dict(s.utilization_by_flavor), "jobs": s.jobs,
            "succeeded": s.succeeded, "failed": s.failed, "rejected": s.rejected,
            "unfinished": s.unfinished, "ftf_rho_mean": s.ftf_rho_mean,
            "ftf_rho_p95": s.ftf_rho_p95, "ftf_rho_max": s.ftf_rho_max,
            "share_rho_above_1": s.share_rho_above_1, "preemptions": s.preemptions,
            "migrations": s.migrations, "resizes": s.resizes,
            "gpu_hours_lost_to_failures": s.gpu_hours_lost_to_failures,
            "wait_quota_h": s.wait_quota_h, "wait_capacity_h": s.wait_capacity_h,
            "wait_fragmentation_h": s.wait_fragmentation_h,
            "wait_decision_h": s.wait_decision_h, "pending_h": s.pending_h,
            "wall_s": self.wall_s,
            "events": self.events, "events_per_s": self.events / max(self.wall_s, 1e-9),
            "decisions": self.decisions,
            "decide_ms_mean": 1e3 * self.decide_s / max(self.decisions, 1),
            "wait_quota_s_mean": s.wait_quota_h * 3600 / max(s.jobs, 1),
            "wait_capacity_s_mean": s.wait_capacity_h * 3600 / max(s.jobs, 1),
            "wait_fragmentation_s_mean": s.wait_fragmentation_h * 3600 / max(s.jobs, 1),
            "wait_decision_s_mean": s.wait_decision_h * 3600 / max(s.jobs, 1),
            "pending_s_mean": s.pending_h * 3600 / max(s.jobs, 1),
            **{k: v for k, v in sorted(self.extras.items())},
            **(self.energy.as_dict() if self.energy is not None else {}),
            **({"estimate_error": [p._asdict() for p in self.estimate_error]}
               if self.estimate_error else {}),
            "notes": list(self.notes),
        }


PENDING_KEYS: tuple[str, ...] = (
    "wait_quota_h", "wait_capacity_h", "wait_fragmentation_h", "wait_decision_h", "pending_h",
    "wait_quota_s_mean", "wait_capacity_s_mean", "wait_fragmentation_s_mean",
    "wait_decision_s_mean", "pending_s_mean",
)
"""The ``as_dict`` metrics of time pending, which :attr:`SimResult.pending_recorded` gates."""

PENDING_NOT_RECORDED = ("not recorded under --compat gavel: Gavel's own loop keeps no pending "
                        "spells (the start wait, avg_queue_delay_s, is recorded)")
"""Why the pending metrics of a ``compat="gavel"`` run are ``null``."""

_ROUNDING_S = 1e-6
"""Differences of summed waits below this are float rounding, not time."""


@dataclass(slots=True)
class Counters:
    """What a run did: events handled, decisions taken and their wall time."""

    events: int = 0
    decisions: int = 0
    decide_s: float = 0.0


def run_gpu_hours(
    job: SimJob, t_s: float, truth: ThroughputOracle, validating: bool
) -> list[tuple[str, float]]:
    """The extra GPU-hour books of ``job``'s run ending at ``t_s``, as ``(metric, GPU-h)``.

    A validation run's GPU time goes to ``validation_gpu_h``, a mixed gang's to
    ``mixed_gpu_h``; a gang split across servers books its time in ``split_gpu_h`` and what
    the split cost against the consolidated speed (``truth``) in ``split_slowdown_gpu_h``.
    A consolidated single-flavor run books nothing extra.
    """
    p = job.placement
    if p is None or (p.consolidated and not p.is_mixed and not validating):
        return []
    held_h = max(t_s - job.run_started_s, 0.0) * p.num_gpus / 3600
    if validating:
        return [("validation_gpu_h", held_h)]
    if p.is_mixed:
        return [("mixed_gpu_h", held_h)]
    out = [("split_gpu_h", held_h)]
    cons = truth.rate(job.spec, p.flavor, True)
    progressed = max(t_s - max(job.progress_from_s, job.run_started_s), 0.0)
    if cons > 0 and job.rate < cons:
        out.append(("split_slowdown_gpu_h", progressed * p.num_gpus * (1 - job.rate / cons) / 3600))
    return out


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def _outcome(j: SimJob) -> str:
    if j.rejected is not None:
        return "rejected"
    if j.state is JobState.SUCCEEDED:
        return "succeeded"
    if j.state is JobState.FAILED and j.finish_s is not None:
        return "failed"
    return "unfinished"


def summarize(
    workload: Workload,
    cluster: ClusterSpec,
    policy: str,
    cfg: SimConfig,
    jobs: Sequence[SimJob],
    iso_s: Sequence[float],
    samples: Sequence[Sample],
    *,
    wall_s: float,
    events: int,
    decisions: int,
    decide_s: float,
    phase_ms: Mapping[str, float],
    extras: Mapping[str, float] | None = None,
    notes: tuple[str, ...] = (),
) -> SimResult:
    """Turn the simulator's job states into records and a :class:`Summary`."""
    total_gpus = cluster.total_gpus
    records = []
    for j, iso in zip(jobs, iso_s, strict=True):
        out = _outcome(j)
        jct = j.finish_s - j.spec.submit_time_s if out == "succeeded" and j.finish_s else None
        rho = t_id = None
        if jct is not None and jct > 0 and math.isfinite(iso):
            n_avg = max(j.contention_s / jct, 1.0)
            t_id = iso * max(1.0, j.spec.num_gpus / (total_gpus / n_avg))
            rho = jct / t_id
        waits = j.wait_by_kind
        quota = waits.get(PendingKind.QUOTA, 0.0)
        capacity = waits.get(PendingKind.CAPACITY, 0.0)
        fragmentation = waits.get(PendingKind.FRAGMENTATION, 0.0)
        explained = quota + capacity + fragmentation
        pending = max(j.pending_s, explained)
        undecided = pending - explained
        records.append(
            JobRecord(
                job_id=j.spec.job_id, job_type=j.spec.job_type, num_gpus=j.spec.num_gpus,
                queue=j.spec.queue, outcome=out, submit_s=j.spec.submit_time_s,
                first_start_s=j.first_start_s, finish_s=j.finish_s, jct_s=jct,
                queue_delay_s=max(j.first_start_s - j.spec.submit_time_s, 0.0)
                if j.first_start_s is not None else None,
                wait_quota_s=quota, wait_capacity_s=capacity,
                wait_fragmentation_s=fragmentation,
                wait_decision_s=undecided if undecided > _ROUNDING_S else 0.0,
                pending_s=pending,
                preemptions=j.preemptions, migrations=j.migrations, failures=j.attempts,
                lost_gpu_h=j.lost_gpu_s / 3600.0, ftf_rho=rho, ideal_s=t_id,
                gpu_s_by_flavor=";".join([f"{f}={s:.0f}" for f, s in j.busy_gpu_s.items()]),
                reason=j.rejected or "", resizes=j.resizes,
            )
        )
    return SimResult(
        policy=policy, cluster=cluster.name, workload=workload.name, config=cfg,
        summary=_summary(records, jobs, cluster, workload),
        jobs=tuple(records), samples=tuple(samples), wall_s=wall_s, events=events,
        decisions=decisions, decide_s=decide_s, phase_ms=dict(phase_ms),
        extras=dict(extras or {}),
        notes=notes,
    )


def _summary(
    records: list[JobRecord], jobs: Sequence[SimJob], cluster: ClusterSpec, workload: Workload
) -> Summary:
    ok = [r for r in records if r.outcome == "succeeded"]
    jct = np.array([r.jct_s for r in ok], dtype=float)
    qd = np.array([r.queue_delay_s for r in records if r.queue_delay_s is not None], dtype=float)
    rho = np.array([r.ftf_rho for r in ok if r.ftf_rho is not None], dtype=float)
    finishes = [r.finish_s for r in records if r.finish_s is not None]
    start = workload.jobs[0].submit_time_s
    makespan = (max(finishes) - start) if finishes else 0.0
    busy: dict[GpuFlavor, float] = {}
    for j in jobs:
        for f, s in j.busy_gpu_s.items():
            busy[f] = busy.get(f, 0.0) + s
    util = sum(busy.values()) / (cluster.total_gpus * makespan) if makespan > 0 else 0.0
    by_flavor = {f.short: busy.get(f, 0.0) / (n * makespan) if makespan > 0 else 0.0
                 for f, n in cluster.gpus_by_flavor().items()}

    def count(o: str) -> int:
        return sum(r.outcome == o for r in records)

    return Summary(
        jobs=len(records), succeeded=len(ok), failed=count("failed"),
        rejected=count("rejected"), unfinished=count("unfinished"),
        avg_jct_s=float(jct.mean()) if len(jct) else math.nan,
        p50_jct_s=_pct(jct, 50), p95_jct_s=_pct(jct, 95), p99_jct_s=_pct(jct, 99),
        avg_queue_delay_s=float(qd.mean()) if len(qd) else math.nan,
        makespan_s=makespan, utilization=util, utilization_by_flavor=by_flavor,
        ftf_rho_mean=float(rho.mean()) if len(rho) else math.nan,
        ftf_rho_p95=_pct(rho, 95), ftf_rho_max=float(rho.max()) if len(rho) else math.nan,
        share_rho_above_1=float((rho > 1.0 + 1e-9).mean()) if len(rho) else math.nan,
        preemptions=sum(r.preemptions for r in records),
        migrations=sum(r.migrations for r in records),
        gpu_hours_lost_to_failures=sum(r.lost_gpu_h for r in records),
        wait_quota_h=sum(r.wait_quota_s for r in records) / 3600,
        wait_capacity_h=sum(r.wait_capacity_s for r in records) / 3600,
        wait_fragmentation_h=sum(r.wait_fragmentation_s for r in records) / 3600,
        wait_decision_h=sum(r.wait_decision_s for r in records) / 3600,
        pending_h=sum(r.pending_s for r in records) / 3600,
        resizes=sum(r.resizes for r in records),
    )


def isolated_times_s(jobs: Sequence[SimJob], truth: ThroughputOracle) -> list[float]:
    """Each job's time alone on its fastest flavor (true consolidated rate; ``inf`` where it
    cannot run), the ideal of finish-time fairness. The best rate is looked up once per
    rate key."""
    best: dict[RateKey, float] = {}
    iso = []
    for j in jobs:
        key = rate_key(j.spec)
        r = best.get(key)
        if r is None:
            r = best[key] = max((x.consolidated for x in truth.real_rates(j.spec)),
                                default=0.0)
        iso.append(j.spec.total_steps / r if r > 0 else math.inf)
    return iso
