"""What the machines say they have, beside what the service's cluster declares.

The decision core books CPUs and memory against the cluster's nodes (``cpu_cores``,
``mem_gib``); the machines that run the jobs may have less. At start the service asks its
executor (:class:`~tessera.live.executors.base.HostReportingExecutor`) and logs each
machine's CPUs and memory -- the local machine from ``os.sched_getaffinity`` and
``/proc/meminfo``, Ray nodes from ``ray.nodes()`` -- with a warning where the cluster declares
more than the machines report, since jobs would then be given CPUs that do not exist.
"""

from __future__ import annotations

from tessera.live.executors.base import Executor, HostReportingExecutor
from tessera.model.cluster import ClusterSpec


def host_report(executor: Executor, cluster: ClusterSpec) -> tuple[list[str], list[str]]:
    """``(info lines, warnings)`` comparing the machines' report with ``cluster``."""
    if not isinstance(executor, HostReportingExecutor):
        return [], []
    seen = executor.host_capacity()
    info = [f"machine {name} reports {cpus:g} CPUs and {mem:.1f} GiB of memory"
            for name, (cpus, mem) in sorted(seen.items())]
    declared_cpus = sum(n.cpu_cores for n in cluster.nodes)
    declared_mem = sum(n.mem_gib for n in cluster.nodes)
    have_cpus = sum(c for c, _m in seen.values())
    have_mem = sum(m for _c, m in seen.values())
    warnings = []
    if seen and (declared_cpus > have_cpus or declared_mem > have_mem * 1.001):
        warnings.append(
            f"the cluster declares {declared_cpus:g} CPUs and {declared_mem:g} GiB over its "
            f"nodes, the machines report {have_cpus:g} CPUs and {have_mem:.1f} GiB: jobs that "
            "ask for CPUs or memory may be given more than exists (declare cpu_cores/mem_gib "
            "in the cluster file)")
    return info, warnings
