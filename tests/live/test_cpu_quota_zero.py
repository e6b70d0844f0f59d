"""A queue with a ``memory: 0`` (or ``cpus: 0``) quota for CPU-only jobs runs none, and says
so in one step (review4, item 5): a CPU-only job that asked no memory was told to ask for
memory, and once it did, refused for asking more than 0 GiB."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.live.service import Rejected
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service

A = Principal("a", "team-a")
JOB = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 1}\n"


@pytest.mark.parametrize(("quota", "said"), [({"memory": 0}, "memory quota for them is 0 GiB"),
                                             ({"cpus": 0}, "cpus quota for them is 0 CPUs"),
                                             ({"cpus": 0, "memory": "4Gi"}, "0 CPUs")])
@pytest.mark.parametrize("host", ["{cpus: 1}", "{cpus: 1, memory: 1Gi}"])
def test_a_zero_cpu_or_memory_quota_refuses_every_cpu_only_job_in_one_step(
        tmp_path: Path, quota: dict[str, object], said: str, host: str) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       start=False, queues=[{"name": "team-a", "nominal_gpus": 4, **quota},
                                            {"name": "team-b", "nominal_gpus": 4}])
    with pytest.raises(Rejected, match=r"^rejected: queue 'team-a' runs no CPU-only jobs "
                                       r"\(its .*\)$") as e:
        svc.submit(parse_request(JOB.replace("{cpus: 1}", host)), A)
    assert said in str(e.value)
