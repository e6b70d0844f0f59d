"""Review of the launch gate for a stopping CPU-only run's CPUs (:mod:`tessera.live.host_drain`):
two runs planned onto one node in the same round were each compared with the node's CPUs less
the launched runs only, so both launched while the stopping run still held its CPUs."""

from __future__ import annotations

from pathlib import Path

from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.draining import DrainingExecutor, launch_then_cancel
from tests.live.helpers import make_service

ADMIN = Principal("admin", None)
CPU_JOB = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 8}\n"
GPU_JOB = "name: g\nqueue: team-b\ncommand: 'sleep 100'\ngpus: 1\nhost: {cpus: 8}\n"


def test_two_runs_planned_onto_a_draining_node_launch_only_as_its_cpus_allow(
        tmp_path: Path) -> None:
    """One server, 2 GPUs and 16 CPUs. A cancelled CPU-only run (8 CPUs) is still stopping;
    the round plans two 1-GPU jobs of 8 CPUs each there (the decision counts the stopping run's
    CPUs free). Only one may launch before that run exits: both together need 16 of the 8 the
    node has left."""
    svc = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, policy="fifo",
                       start=False)
    ex = DrainingExecutor()
    svc.executor = ex  # type: ignore[assignment]
    cpu = launch_then_cancel(svc, ex, CPU_JOB, ADMIN)
    gpu = [svc.submit(parse_request(GPU_JOB), ADMIN).job_id for _ in range(2)]
    svc.round(20.0)
    assert all(svc.store.allocation(g, 1) is not None for g in gpu)  # both planned there
    svc.act(20.0)
    svc.act(21.0)
    assert sum(g in ex.launched for g in gpu) == 1, ex.launched
    ex.exited.add((cpu, 1))
    svc.observe(22.0)
    svc.act(22.0)
    svc.act(22.5)
    assert all(g in ex.launched for g in gpu)
