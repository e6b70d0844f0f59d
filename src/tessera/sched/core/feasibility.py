"""Can this job *ever* run on this cluster? Checked once, at submission.

Ray or Kubernetes would leave an impossible request pending forever; Tessera rejects it at once
with the reason ("needs 9 GPUs on one node; the largest V100 node has 8").
"""

from __future__ import annotations

from tessera.model.cluster import ClusterSpec
from tessera.model.jobs import ElasticRange, JobSpec
from tessera.model.resources import HostDemand
from tessera.sched.core.cpu_stage import cpu_infeasibility
from tessera.sched.core.host_reasons import host_infeasibility
from tessera.sched.core.oracle import RateKey, ThroughputOracle, rate_key


def infeasibility(job: JobSpec, cluster: ClusterSpec, oracle: ThroughputOracle,
                  mixed_gangs: bool = False) -> str | None:
    """The reason ``job`` can never be placed on ``cluster``, or ``None`` if it can.

    With ``mixed_gangs`` a job that needs no locality may also be held by its flavors together.
    An elastic job whose *smallest* size cannot fit is named as such; until a policy resizes
    jobs, an elastic job is also held to the count it asks for (``num_gpus``).
    """
    if job.cpu_only:  # (no GPUs: only its CPUs and memory must fit one server)
        return cpu_infeasibility(job, cluster.nodes)
    present = {f.short for f in cluster.flavors()}
    if job.flavors:
        wanted = [f.short for f in job.flavors]
        allowed = [f for f in wanted if f in present]
        if not allowed:
            return (
                f"accepts only {', '.join(wanted)}; the cluster has {', '.join(sorted(present))}"
            )
    rates = oracle.real_rates(job)
    if not rates and job.parallelism is not None:
        return oracle.cannot_run_reason(job)
    if not rates:
        return (
            f"no throughput profile for {job.job_type!r} at {job.num_gpus} GPUs on any allowed "
            "flavor of this cluster"
        )
    host_why = host_infeasibility(job, cluster.nodes, tuple(r.flavor for r in rates))
    if host_why is not None:
        return host_why
    best_total = 0
    best_node = 0
    by_flavor = cluster.gpus_by_flavor()
    all_flavors = sum(by_flavor[r.flavor] for r in rates)
    if job.elastic is not None:
        pools = [by_flavor[r.flavor] for r in rates]
        spread = mixed_gangs and not job.requires_locality
        room = all_flavors if spread else max(pools)
        if job.elastic.min_gpus > room:
            where = "its allowed flavors have" if spread else "the largest allowed flavor pool has"
            return (f"its elastic range needs at least {job.elastic.min_gpus} GPUs; {where} "
                    f"{room}")
    if mixed_gangs and not job.requires_locality and job.num_gpus <= all_flavors:
        return None
    for r in rates:
        f = r.flavor
        total = by_flavor[f]
        node = cluster.max_gpus_per_node(f)
        if job.num_gpus <= (node if job.requires_locality else total):
            return None
        best_total = max(best_total, total)
        best_node = max(best_node, node)
    if job.requires_locality:
        return (
            f"needs {job.num_gpus} GPUs on one node (locality required); the largest node of an "
            f"allowed flavor has {best_node}"
        )
    if mixed_gangs:
        return (f"needs {job.num_gpus} GPUs; its allowed flavors have {all_flavors} together")
    return (
        f"needs {job.num_gpus} GPUs of one flavor; the largest allowed flavor pool has {best_total}"
    )


class Feasibility:
    """:func:`infeasibility` on one cluster and oracle, worked out once per kind of job.

    The answer depends on the job only through what its rates depend on (its rate key: type,
    gang size, allowed flavors, parallelism), whether it requires locality and its elastic
    range and its CPU and memory demand; a simulator checks every arrival (82,247 on the
    full Philly table) and most share a handful of keys.
    """

    __slots__ = ("_answers", "cluster", "mixed_gangs", "oracle")

    def __init__(self, cluster: ClusterSpec, oracle: ThroughputOracle,
                 mixed_gangs: bool = False) -> None:
        self.cluster = cluster
        self.oracle = oracle
        self.mixed_gangs = mixed_gangs
        self._answers: dict[tuple[RateKey, bool, ElasticRange | None, HostDemand | None],
                            str | None] = {}

    def __call__(self, job: JobSpec) -> str | None:
        """The reason ``job`` can never be placed, or ``None`` if it can."""
        key = (rate_key(job), job.requires_locality, job.elastic, job.host)
        answers = self._answers
        if key in answers:
            return answers[key]
        reason = answers[key] = infeasibility(job, self.cluster, self.oracle, self.mixed_gangs)
        return reason
