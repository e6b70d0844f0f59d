"""Co-simulation: inference services on MIG slices, training jobs on the rest of the cluster.

The two halves of a shared cluster are simulated separately, joined by one decision, the
*reservation*:

1. **Plan.** The services are planned with :func:`~tessera.share.packing.plan_services` for the
   MIG flavor that the profile table was measured on (the bundled table: A100-80GB). The cluster
   must hold nodes of that flavor. Profiles are *not* rescaled to other MIG GPUs (A100-40GB,
   H100, H200): MIG slices are not performance-proportional across generations, so a cluster
   without the profiled flavor is refused with an error naming its MIG flavors.
2. **Reserve.** The plan's GPUs are taken as whole GPUs of that flavor, packed onto as few nodes
   as possible (largest nodes first; the last partial share goes to the smallest node that still
   fits it, so the rest of the cluster keeps its biggest gangs). Those GPUs are removed from
   their nodes; a node left with no GPUs is dropped. A partly reserved node keeps CPU cores and
   host memory in proportion to the GPUs it keeps.
3. **Train.** The training workload runs on the remaining :class:`ClusterSpec` with the
   unchanged simulator (:func:`tessera.sim.engine.simulate`); optionally also on the full
   cluster, so the reservation's cost shows as the change in average JCT on the same trace.
4. **Serve.** The services' request streams (Poisson, or the shape of the Alibaba GenAI / DLRM
   traces) are replayed against the plan with :func:`tessera.share.serving_sim.simulate`, which
   gives each service's p99 latency against its SLO.

The halves do not interact beyond the reservation: MIG isolates the slices, and the reserved
GPUs are invisible to the training scheduler. Services are static for the whole run (no
re-planning as load changes, no lending idle slices to training).

Everything here is a pure function of its inputs; :func:`cosimulate` returns a
:class:`CosimResult` and :func:`cosim_to_json` its stable JSON form. Steps 1 and 2 live in
:mod:`tessera.sim.reservation` (re-exported here); this module holds steps 3 and 4, the result
and its JSON form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tessera.errors import SpecError
from tessera.model.cluster import ClusterSpec
from tessera.model.gpus import GpuFlavor
from tessera.model.jobs import Workload
from tessera.perf.profiles import default_throughputs
from tessera.share.arrivals import read_trace_times, shaped_streams
from tessera.share.mig import MigGpu
from tessera.share.packing import plan_services
from tessera.share.plan import SharePlan
from tessera.share.profiles import BatchingRule, ProfileTable, Service
from tessera.share.segments import all_options
from tessera.share.serving_sim import RequestStream, poisson_streams
from tessera.share.serving_sim import SimResult as ServingResult
from tessera.share.serving_sim import simulate as simulate_serving
from tessera.sim.engine import simulate as simulate_training
from tessera.sim.reservation import (
    NodeReservation,
    Reservation,
    profiled_mig_gpu,
    reserve_gpus,
)
from tessera.workload.datadir import find_data, missing_data_message

if TYPE_CHECKING:
    from tessera.perf.profiles import ThroughputTable
    from tessera.sim.config import SimConfig
    from tessera.sim.metrics import SimResult as TrainingResult

__all__ = [
    "REQUEST_SOURCES", "CosimResult", "NodeReservation", "Reservation", "TrainingOutcome",
    "cosim_to_json", "cosimulate", "profiled_mig_gpu", "request_streams", "reserve_gpus",
    "run_training", "whole_gpu_gpus",
]

REQUEST_SOURCES = ("poisson", "genai", "dlrm")


@dataclass(frozen=True, slots=True)
class TrainingOutcome:
    """The training summary on one cluster (the figures the co-simulation reports)."""

    cluster: str
    gpus: int
    jobs: int
    succeeded: int
    rejected: int
    unfinished: int
    avg_jct_s: float
    makespan_s: float
    utilization: float


@dataclass(frozen=True, slots=True)
class CosimResult:
    """Everything one co-simulation produced.

    Attributes:
        cluster: the full cluster's one-line description.
        mig_gpu: the MIG flavor the services were planned for.
        plan: the services' MIG/MPS plan.
        reservation: the GPUs the plan holds, per node, and the remaining cluster.
        whole_gpu_baseline: GPUs if every service ran on dedicated whole GPUs (7g, no MIG).
        serving: p50/p99 and SLO attainment per service.
        requests: the request source (``poisson``, ``genai`` or ``dlrm``) and seconds replayed.
        policy: the training scheduling policy.
        training: training with the services' GPUs reserved.
        baseline: the same trace on the full cluster (``None`` when not run).
        notes: caveats a reader needs (e.g. training cannot use the reserved flavor at all).
    """

    cluster: str
    mig_gpu: str
    plan: SharePlan
    reservation: Reservation
    whole_gpu_baseline: int
    serving: ServingResult
    requests: str
    serve_seconds: float
    policy: str
    training: TrainingOutcome
    baseline: TrainingOutcome | None
    notes: tuple[str, ...] = ()

    @property
    def gpus_saved(self) -> int:
        """GPUs the MIG/MPS plan saves against one service per whole GPU."""
        return self.whole_gpu_baseline - self.plan.gpus_used

    @property
    def jct_increase(self) -> float | None:
        """Relative change of average JCT caused by the reservation (0.1 = 10 % slower)."""
        if self.baseline is None or not self.baseline.avg_jct_s > 0:
            return None
        if not math.isfinite(self.training.avg_jct_s):
            return None
        return self.training.avg_jct_s / self.baseline.avg_jct_s - 1.0


# ---------------------------------------------------------------------------------------------
# 3. baselines and streams


def whole_gpu_gpus(
    services: tuple[Service, ...], table: ProfileTable, gpu: MigGpu, rule: BatchingRule
) -> int:
    """GPUs if each service ran alone on whole GPUs (7g, no MIG split): sum of ceil(need/7g)."""
    total = 0
    for so in all_options(services, table, gpu, rule):
        seven = [o for o in so.options if o.kind == "7g"]
        if not seven:
            raise SpecError(f"service {so.service.name!r}: no whole-GPU (7g) configuration")
        total += math.ceil(so.required_rps / seven[0].throughput_rps - 1e-9)
    return total


def request_streams(
    services: tuple[Service, ...],
    source: str,
    duration_s: float,
    seed: int = 0,
    traces_dir: Path | None = None,
) -> tuple[RequestStream, ...]:
    """Request streams: ``poisson``, or the ``genai``/``dlrm`` trace shape at each rate."""
    if duration_s <= 0:
        raise SpecError(f"serving duration must be > 0 s, got {duration_s:g}")
    if source == "poisson":
        return poisson_streams(services, duration_s, seed)
    if source not in REQUEST_SOURCES:
        raise SpecError(f"unknown request source {source!r}: use {', '.join(REQUEST_SOURCES)}")
    if traces_dir is None:
        traces_dir = find_data("traces")
        if traces_dir is None:
            raise SpecError(
                missing_data_message(f"the {source} request trace", "traces/")
                + " or pass --traces-dir"
            )
    return shaped_streams(services, read_trace_times(source, traces_dir), duration_s, seed)


def _training_outcome(result: TrainingResult, gpus: int) -> TrainingOutcome:
    s = result.summary
    return TrainingOutcome(
        cluster=result.cluster,
        gpus=gpus,
        jobs=s.jobs,
        succeeded=s.succeeded,
        rejected=s.rejected,
        unfinished=s.unfinished,
        avg_jct_s=s.avg_jct_s,
        makespan_s=s.makespan_s,
        utilization=s.utilization,
    )


def run_training(
    workload: Workload,
    cluster: ClusterSpec,
    policy: str,
    config: SimConfig | None = None,
    throughputs: ThroughputTable | None = None,
) -> TrainingOutcome:
    """One training simulation (the unchanged engine), summarised."""
    res = simulate_training(workload, cluster, policy, config, throughputs)
    return _training_outcome(res, cluster.total_gpus)


# ---------------------------------------------------------------------------------------------
# 4. the whole co-simulation


def cosimulate(
    services: tuple[Service, ...],
    rule: BatchingRule,
    table: ProfileTable,
    cluster: ClusterSpec,
    workload: Workload,
    *,
    policy: str = "las",
    service_gpu: GpuFlavor | None = None,
    method: str = "auto",
    time_limit_s: float = 60.0,
    requests: str = "poisson",
    serve_seconds: float = 10.0,
    traces_dir: Path | None = None,
    seed: int = 0,
    compare: bool = True,
    config: SimConfig | None = None,
    throughputs: ThroughputTable | None = None,
) -> CosimResult:
    """Plan, reserve, then simulate training on the rest and serving on the plan.

    Args:
        services, rule: what to serve and the batching rule (from the services file).
        table: service profiles; its GPU is the MIG flavor planned for.
        cluster: the full cluster.
        workload: the training jobs.
        policy: the training scheduling policy.
        service_gpu: the services file's ``gpu:`` (checked against ``table``).
        method, time_limit_s: the planner's method and ILP time limit.
        requests, serve_seconds, traces_dir: the request streams replayed against the plan.
        seed: seed of the request streams and the routing.
        compare: also run the trace on the full cluster (the reservation's JCT cost).
        config, throughputs: the training simulator's ``SimConfig`` and throughput table.
    """
    tput = throughputs if throughputs is not None else default_throughputs()
    g = profiled_mig_gpu(cluster, table, service_gpu)
    plan = plan_services(services, table, g, rule, method=method, time_limit_s=time_limit_s)
    res = reserve_gpus(cluster, g.flavor, plan.gpus_used)
    streams = request_streams(services, requests, serve_seconds, seed, traces_dir)
    serving = simulate_serving(plan, streams, table, seed=seed)
    training = run_training(workload, res.remaining, policy, config, tput)
    baseline = run_training(workload, cluster, policy, config, tput) if compare else None
    notes: list[str] = []
    if not tput.covers(g.flavor):
        notes.append(
            f"the training throughput table ({tput.source}) has no {g.gpu} measurements, so "
            f"training jobs never run on {g.gpu}: reserving them costs training nothing by "
            "construction"
        )
    if requests != "poisson":
        notes.append(
            f"{requests} streams borrow the trace's inter-arrival shape rescaled to each rate; "
            "at high rates a short window replays a long stretch of the trace (bursts compressed)"
        )
    return CosimResult(
        cluster=cluster.describe(),
        mig_gpu=g.gpu,
        plan=plan,
        reservation=res,
        whole_gpu_baseline=whole_gpu_gpus(services, table, g, rule),
        serving=serving,
        requests=requests,
        serve_seconds=serve_seconds,
        policy=policy,
        training=training,
        baseline=baseline,
        notes=tuple(notes),
    )


def _num(x: float, nd: int = 3) -> float | None:
    return round(x, nd) if math.isfinite(x) else None


def _training_json(t: TrainingOutcome) -> dict[str, Any]:
    return {
        "cluster": t.cluster,
        "gpus": t.gpus,
        "jobs": t.jobs,
        "succeeded": t.succeeded,
        "rejected": t.rejected,
        "unfinished": t.unfinished,
        "avg_jct_s": _num(t.avg_jct_s, 1),
        "makespan_s": _num(t.makespan_s, 1),
        "utilization": _num(t.utilization, 4),
    }


def cosim_to_json(r: CosimResult) -> dict[str, Any]:
    """The CLI's ``--json`` form."""
    inc = r.jct_increase
    return {
        "cluster": r.cluster,
        "mig_gpu": r.mig_gpu,
        "services": {
            "gpus_used": r.plan.gpus_used,
            "lower_bound": r.plan.lower_bound,
            "optimal": r.plan.optimal,
            "method": r.plan.method,
            "whole_gpu_baseline": r.whole_gpu_baseline,
            "gpus_saved": r.gpus_saved,
        },
        "reservation": {
            "flavor": r.reservation.flavor.short,
            "gpus": r.reservation.gpus,
            "nodes": [
                {"node_id": n.node_id, "node_gpus": n.node_gpus, "reserved": n.reserved}
                for n in r.reservation.nodes
            ],
            "remaining_cluster": r.reservation.remaining.describe(),
            "remaining_gpus": r.reservation.remaining.total_gpus,
        },
        "serving": {
            "requests": r.requests,
            "seconds": r.serve_seconds,
            "attainment": round(r.serving.attainment, 6),
            "slo_violations": r.serving.violations,
            "services": [
                {
                    "name": o.service,
                    "requests": o.requests,
                    "p50_ms": round(o.p50_ms, 3),
                    "p99_ms": round(o.p99_ms, 3),
                    "slo_ms": o.slo_ms,
                    "meets_slo": o.meets_slo,
                    "attainment": round(o.attainment, 6),
                }
                for o in r.serving.services
            ],
        },
        "training": {
            "policy": r.policy,
            "with_services": _training_json(r.training),
            "full_cluster": _training_json(r.baseline) if r.baseline else None,
            "avg_jct_increase": None if inc is None else round(inc, 4),
        },
        "notes": list(r.notes),
    }
