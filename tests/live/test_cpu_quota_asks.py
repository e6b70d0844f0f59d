"""A queue's ``memory:`` quota binds only what CPU-only jobs ask: a job that asks no memory
(``host: {cpus: 1}``) was charged 0 GiB and ran with no memory limit at all, so any number of
them fit in a quota of 6 GiB -- and each could use the whole server's memory. As a Kubernetes
ResourceQuota on memory requires every pod to request memory, a CPU-only job of a queue with a
memory quota must ask for memory: refused at submission in one line otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.live.service import Rejected
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service

A = Principal("a", "team-a")
NO_MEMORY = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 1}\n"


def test_a_cpu_only_job_without_a_memory_ask_is_refused_by_a_queue_with_a_memory_quota(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       start=False, queues=[{"name": "team-a", "nominal_gpus": 4, "cpus": 12,
                                             "memory": "6Gi"},
                                            {"name": "team-b", "nominal_gpus": 4, "cpus": 12}])
    with pytest.raises(Rejected, match=r"^rejected: CPU-only job asks no host memory; queue "
                                       r"'team-a' has a memory quota for CPU-only jobs \(6 GiB\): "
                                       r"ask for it \(host: \{memory: \.\.\.\}\)$"):
        svc.submit(parse_request(NO_MEMORY), A)
    asked = svc.submit(parse_request(NO_MEMORY.replace("cpus: 1", "cpus: 1, memory: 2Gi")), A)
    assert asked.job_id  # one that asks is charged and accepted
    b = Principal("b", "team-b")  # a queue without a memory quota: no ask needed
    assert svc.submit(parse_request(NO_MEMORY.replace("team-a", "team-b")), b).job_id
