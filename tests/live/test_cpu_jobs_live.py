"""CPU-only jobs in the live service (issue 33, part 5): ``gpus: 0`` with CPUs.

Submitted through the request parser (the API's and ``tessera submit``'s), a CPU-only job is
checked at the edge, placed by the core's CPU stage and run by the local executor with no GPUs
(``CUDA_VISIBLE_DEVICES`` empty) and its CPUs pinned, as a GPU run's are.
"""

from __future__ import annotations

import ast
import json
import os
import sys

import pytest
from fastapi.testclient import TestClient

from tessera.errors import SpecError
from tessera.live.service import LiveService, Rejected
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.live.where import describe
from tests.live.helpers import ADMIN, auth, wait_for, wait_for_job

TEAM_A = Principal("a", "team-a")

READ_OWN = ("import os; print('gpus', repr(os.environ.get('CUDA_VISIBLE_DEVICES')), "
            "'affinity', sorted(os.sched_getaffinity(0)))")


def test_a_cpu_only_request_is_checked_at_the_edge() -> None:
    with pytest.raises(SpecError, match="needs host cpus > 0"):
        parse_request("name: x\ncommand: 'true'\ngpus: 0\n")
    with pytest.raises(SpecError, match="needs cpu_steps_per_s"):
        parse_request("name: x\ncommand: 'true'\ngpus: 0\nhost: {cpus: 2}\ntotal_steps: 9\n")
    with pytest.raises(SpecError, match="cannot set flavors"):
        parse_request("name: x\ncommand: 'true'\ngpus: 0\nhost: {cpus: 2}\nflavors: [V100]\n")
    with pytest.raises(SpecError, match="cpu_steps_per_s is for CPU-only jobs"):
        parse_request("name: x\ncommand: 'true'\ngpus: 2\ncpu_steps_per_s: 3\n")
    with pytest.raises(SpecError, match="gpus"):
        parse_request("name: x\ncommand: 'true'\ngpus: -1\n")


def test_a_cpu_job_no_server_can_hold_is_rejected(service: LiveService) -> None:
    # the test service's servers: 4 GPUs, 32 CPUs, 256 GiB each
    with pytest.raises(Rejected, match="CPU-only job needs 48 CPUs on one node; the largest "
                                       "server has 32 CPUs"):
        service.submit(parse_request("name: x\ncommand: 'true'\ngpus: 0\nhost: {cpus: 48}\n"),
                       TEAM_A)


def test_a_cpu_only_run_gets_no_gpus_and_pinned_cpus(service: LiveService) -> None:
    rec = service.submit(parse_request(json.dumps({
        "name": "etl", "command": [sys.executable, "-S", "-c", READ_OWN], "gpus": 0,
        "host": {"cpus": 1, "memory": "1Gi"}, "expected_duration_s": 5}), "json"), TEAM_A)
    spec = rec.job.spec
    assert spec.cpu_only and spec.cpu_steps_per_s == 1.0 and spec.total_steps == 5
    jid = spec.job_id
    wait_for_job(service, jid)
    (run,) = [a for a in service.store.allocations(("done",)) if a.job_id == jid]
    assert run.placement.num_gpus == 0
    assert [(c, m) for _n, c, m in run.placement.host_by_node] == [(1.0, 1.0)]
    notes = [e.detail for e in service.store.events(jid) if e.kind == "host"]
    assert len(notes) == 1 and notes[0].startswith("run 1: host: 1 CPUs on CPU ids"), notes
    chunk = service.executor.read_log(jid, 1, 0, 0, 10_000)
    assert chunk is not None
    line = next(ln for ln in chunk.text.splitlines() if ln.startswith("gpus"))
    assert line.startswith("gpus ''"), line
    got = ast.literal_eval(line.split("affinity", 1)[1].strip())
    assert len(got) == 1 and got[0] in sorted(os.sched_getaffinity(0)), line
    node = run.placement.gpus_by_node[0][0]
    assert describe(run.placement) == f"CPU-only: 1 CPUs, 1 GiB on node {node}"


def test_a_cpu_only_runs_log_is_rank_0(api: TestClient, service: LiveService) -> None:
    rec = service.submit(parse_request(json.dumps({
        "name": "etl", "command": "echo hello", "gpus": 0, "host": {"cpus": 1}}), "json"),
        TEAM_A)
    jid = rec.job.spec.job_id
    wait_for_job(service, jid)
    r = api.get(f"/api/jobs/{jid}/logs", headers=auth(ADMIN), params={"rank": 0})
    assert r.status_code == 200, r.text
    assert r.json()["ranks"] == 1 and "hello" in r.json()["text"]


def test_explain_says_a_cpu_only_job_waits_for_cpus(api: TestClient, service: LiveService
                                                    ) -> None:
    """Two 30-CPU jobs hold the two 32-CPU servers; a third waits, and ``explain`` says for
    what."""
    def submit(name: str) -> str:
        return str(service.submit(parse_request(json.dumps({
            "name": name, "command": "sleep 30", "gpus": 0, "host": {"cpus": 30}}), "json"),
            TEAM_A).job.spec.job_id)

    first = [submit(f"etl{i}") for i in range(2)]
    for jid in first:
        wait_for_job(service, jid, "running")
    third = submit("etl2")
    wait_for(lambda: bool(getattr(service.store.get(third), "reason", None)), 10.0,
             "a reason for the third job")  # (a job no round has seen yet has reason '')
    r = api.get(f"/api/jobs/{third}/explain", headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    lines = r.json()["lines"]
    assert lines[0] == ("waiting: CPU-only job needs 30 CPUs on one node; the most free on any "
                        "node is 2 CPUs"), lines
    for jid in [*first, third]:
        api.post(f"/api/jobs/{jid}/cancel", headers=auth(ADMIN))
