"""The live service with CPU and memory demands (issue 33 parts 1, 4 and 6)."""

from __future__ import annotations

import pytest

from tessera.live.service import LiveService, Rejected
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal

TEAM_A = Principal("a", "team-a")

JOB = "name: hungry\ncommand: 'true'\ngpus: 1\n"


def test_a_job_no_server_can_feed_is_rejected_at_submission(service: LiveService) -> None:
    # the test service's servers: 4 GPUs, 32 CPUs, 256 GiB each
    with pytest.raises(Rejected, match="rejected: needs 48 CPUs per node for 1 GPUs"):
        service.submit(parse_request(JOB + "host: {cpus: 48}\n"), TEAM_A)
    with pytest.raises(Rejected, match="needs 300 GiB of host memory per node"):
        service.submit(parse_request(JOB + "host: {memory: 300Gi}\n"), TEAM_A)


def test_a_job_that_fits_is_stored_with_its_demand(service: LiveService) -> None:
    rec = service.submit(parse_request(JOB + "host: {cpus: 1500m, memory: 2Gi}\n"), TEAM_A)
    stored = service.store.get(rec.job.spec.job_id)
    assert stored is not None
    spec = stored.job.spec
    assert spec.host is not None and (spec.host.cpus, spec.host.mem_gib) == (1.5, 2.0)
