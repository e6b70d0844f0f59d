"""A queue's ``cpus``/``memory`` quota in the live service (issue 33, part 2): the config
reads it, the CPU stage holds a CPU-only job that would go over, ``/api/queues`` shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.live.kueue_read import tenancy_from_kueue
from tessera.live.service import LiveService, Rejected
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.live.visibility import queues_json
from tests.live.helpers import make_service
from tests.live.test_kueue_read import base_docs

TEAM_A = Principal("a", "team-a")
CPU_JOB = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 8, memory: 4Gi}\n"


def _service(tmp_path: Path, cpus: float, memory: str) -> LiveService:
    """Two servers of 2 V100s; team-a has ``cpus`` and ``memory`` for its CPU-only jobs."""
    return make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                        start=False, queues=[
                            {"name": "team-a", "nominal_gpus": 4, "cpus": cpus,
                             "memory": memory},
                            {"name": "team-b", "nominal_gpus": 4}])


def test_the_cpu_quota_holds_a_cpu_only_job_and_api_queues_shows_use_and_quota(
        tmp_path: Path) -> None:
    svc = _service(tmp_path, cpus=12, memory="6Gi")
    first, second = (svc.submit(parse_request(CPU_JOB), TEAM_A).job_id for _ in range(2))
    svc.round(10.0)
    assert svc.store.allocation(first, 1) is not None
    assert svc.store.allocation(second, 1) is None
    rec = svc.store.get(second)
    assert rec is not None and rec.reason == (
        "queue 'team-a' at its CPU quota: its CPU-only jobs hold 8 of 12 CPUs; needs 8")
    qs = {q["name"]: q for q in queues_json(svc, Principal("admin", None))["queues"]}
    a, b = qs["team-a"], qs["team-b"]
    assert (a["nominal_cpus"], a["nominal_memory_gib"]) == (12.0, 6.0)
    assert (a["used_cpus"], a["used_memory_gib"]) == (8.0, 4.0)
    assert (b["nominal_cpus"], b["nominal_memory_gib"], b["used_cpus"]) == (None, None, 0.0)


def test_a_kueue_cluster_queue_carries_the_quota_in_tesseras_annotations() -> None:
    """Kueue's own ``cpu``/``memory`` quota charges every workload, so Tessera's (CPU-only jobs
    alone) travels as annotations; a bad one is refused naming the queue and the key."""
    docs = base_docs()
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    cq["metadata"]["annotations"] = {"tessera.io/cpu-only-cpus": "24",
                                     "tessera.io/cpu-only-memory-gib": "96.5"}
    q = tenancy_from_kueue([("t.yaml", d) for d in docs]).tree.queues[cq["metadata"]["name"]]
    assert (q.nominal_cpus, q.nominal_mem_gib) == (24.0, 96.5)
    cq["metadata"]["annotations"] = {"tessera.io/cpu-only-cpus": "lots"}
    with pytest.raises(SpecError, match=r"tessera\.io/cpu-only-cpus: not a number of CPUs"):
        tenancy_from_kueue([("t.yaml", d) for d in docs])


def test_a_cpu_only_job_larger_than_its_queues_cpu_quota_is_rejected_at_submission(
        tmp_path: Path) -> None:
    """It could never start (it would wait on 'quota' for ever): refused at once, one line."""
    svc = _service(tmp_path, cpus=6, memory="2Gi")
    with pytest.raises(Rejected, match="rejected: CPU-only job needs 8 CPUs; queue 'team-a' may "
                                       "hold at most 6 CPUs in CPU-only jobs"):
        svc.submit(parse_request(CPU_JOB), TEAM_A)
    with pytest.raises(Rejected, match="needs 4 GiB of host memory; queue 'team-a' may hold at "
                                       "most 2 GiB"):
        svc.submit(parse_request(CPU_JOB.replace("cpus: 8", "cpus: 4")), TEAM_A)
    svc.submit(parse_request("name: g\nqueue: team-a\ncommand: 'true'\ngpus: 2\n"), TEAM_A)
