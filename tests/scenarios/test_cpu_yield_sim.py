"""Scenario (issue 33): in the simulator, one queue's CPU-only jobs no longer starve another
queue's in-quota GPU job. Two team-a CPU-only jobs take all 64 CPUs of an 8-GPU server for 10
hours; team-b's 4-GPU job (within its nominal 8) arrives at 1 h. It starts at once: the newer
CPU-only job is preempted, restarts when the GPU job ends, and every job finishes. (On today's
main the GPU job waits the 10 hours.)"""

from __future__ import annotations

from dataclasses import replace

from tessera.model.cluster import ClusterSpec, make_nodes
from tessera.model.gpus import resolve_flavor
from tessera.model.resources import HostDemand
from tessera.perf.profiles import default_throughputs
from tessera.sched.core.settings import SchedulerSettings
from tessera.sim.config import QueueQuotaConfig, QuotaConfig, SimConfig
from tessera.sim.engine import simulate
from tests.builders import RESNET, make_job, make_workload

V100 = resolve_flavor("v100")
RATE = default_throughputs().throughput(RESNET, V100)


def test_a_gpu_job_within_its_quota_starts_when_it_arrives() -> None:
    cluster = ClusterSpec("one", tuple(replace(n, nvlink_domain=None)
                                       for n in make_nodes(V100, 1, 8)))
    hour = 3600.0
    jobs = [make_job(f"cpu{i}", gpus=0, steps=10 * hour, submit_s=float(i), queue="team-a",
                     cpu_steps_per_s=1.0, host=HostDemand(32.0, 8.0, per_gpu=False))
            for i in range(2)]
    jobs.append(make_job("gpu", gpus=4, steps=RATE * 4 * hour, submit_s=hour, queue="team-b"))
    cfg = SimConfig(scheduler=SchedulerSettings(checkpoint_s=0, restore_s=0, mode="events"),
                    quotas=QuotaConfig(queues={
                        "team-a": QueueQuotaConfig(nominal_gpus=8),
                        "team-b": QueueQuotaConfig(nominal_gpus=8)}))
    r = simulate(make_workload(*jobs), cluster, "fifo", cfg)
    rec = {j.job_id: j for j in r.jobs}
    assert r.summary.unfinished == 0
    assert rec["gpu"].first_start_s == hour
    assert (rec["cpu0"].preemptions, rec["cpu1"].preemptions) == (0, 1)  # the newer one
    assert rec["cpu0"].finish_s is not None and rec["cpu1"].finish_s is not None
    assert rec["cpu1"].finish_s > rec["cpu0"].finish_s
