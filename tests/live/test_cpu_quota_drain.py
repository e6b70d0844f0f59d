"""A queue's ``cpus:``/``memory:`` quota counts its CPU-only runs that are still stopping
(inside their grace period): they hold their CPUs until they exit, and ``/api/queues`` counts
them (``used_cpus``: running, planned or draining). The decision core's quota book counted
running ones only, so a tenant at its quota who cancelled a job and submitted another got the
new one launched beside the draining one -- twice its quota for each grace period, and for as
long as it keeps cancelling and resubmitting. And ``/api/queues`` counted the runs of active
jobs only: a cancelled job's draining run was in no queue's ``used_cpus`` (nor ``used_gpus``)."""

from __future__ import annotations

from pathlib import Path

from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.live.visibility import queues_json
from tests.live.draining import DrainingExecutor, launch_then_cancel
from tests.live.helpers import make_service

A = Principal("a", "team-a")
QUEUES: list[dict[str, object]] = [{"name": "team-a", "nominal_gpus": 4, "cpus": 8},
                                   {"name": "team-b", "nominal_gpus": 4}]
CPU_JOB = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 8}\n"


def test_a_cancelled_cpu_only_run_still_draining_counts_against_its_queues_cpu_quota(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       queues=QUEUES, start=False)  # two servers of 16 CPUs
    ex = DrainingExecutor()
    svc.executor = ex  # type: ignore[assignment]
    first = launch_then_cancel(svc, ex, CPU_JOB, A)  # its run drains, holding its 8 CPUs
    second = svc.submit(parse_request(CPU_JOB), A).job_id
    svc.round(12.0)
    svc.act(12.0)
    assert second not in ex.launched  # team-a's 8 CPUs are still held by the draining run
    rec = svc.store.get(second)
    assert rec is not None and rec.state.value == "pending"
    assert "at its CPU quota: its CPU-only jobs hold 8 of 8 CPUs; needs 8" in (rec.reason or "")
    (q,) = [q for q in queues_json(svc, A)["queues"] if q["name"] == "team-a"]
    assert (q["used_cpus"], q["nominal_cpus"]) == (8.0, 8.0)  # what the reason says
    ex.exited.add((first, 1))
    svc.observe(13.0)
    svc.round(13.0)
    svc.act(13.0)
    assert second in ex.launched  # once it exited, the quota is free again


def test_a_cpu_only_run_waits_for_the_cpus_and_memory_a_stopping_gpu_run_with_host_holds(
        tmp_path: Path) -> None:
    """The decision core does not see a stopping run, so it plans a CPU-only job onto the CPUs
    and memory a cancelled GPU run with ``host:`` holds for its grace period; the GPU gate did
    not hold it back (it needs no GPUs) and it launched beside the draining run."""
    svc = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, policy="fifo",
                       start=False)  # one server: 2 GPUs, 16 CPUs
    ex = DrainingExecutor()
    svc.executor = ex  # type: ignore[assignment]
    b = Principal("b", "team-b")
    gpu = svc.submit(parse_request("name: g\nqueue: team-b\ncommand: 'sleep 100'\ngpus: 2\n"
                                   "host: {cpus: 8, memory: 40Gi}\n"), b).job_id
    svc.round(10.0)
    svc.act(10.0)
    svc.act(10.5)
    assert ex.launched == [gpu]
    svc.cancel(gpu, b)
    svc.act(11.0)  # signalled: it drains, holding 16 CPUs and 80 GiB
    cpu = svc.submit(parse_request("name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\n"
                                   "host: {cpus: 16, memory: 80Gi}\n"), A).job_id
    svc.round(12.0)
    assert svc.store.allocation(cpu, 1) is not None  # planned onto the draining CPUs
    svc.act(12.0)
    svc.act(12.5)
    assert cpu not in ex.launched
    ex.exited.add((gpu, 1))
    svc.observe(13.0)
    svc.act(13.0)
    assert cpu in ex.launched  # once the GPU run exited
