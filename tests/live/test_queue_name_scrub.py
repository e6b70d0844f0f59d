"""A tenant's job answers name no other queue (docs/security.md: "Nothing in it names another
queue or job"): a stop reason written by the decision core names the queue that took the
CPUs or GPUs -- ``quota preemption: CPU-only job gives its CPUs and memory to GPU job <id>
(queue 'team-b', within its nominal quota)`` -- and the job id was rewritten for the tenant,
the queue's name was not."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.names import JobNames
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.sched.core.cpu_yield import YIELD_EXEMPT_S
from tests.live.helpers import ADMIN, TEAM_A, auth, make_service

A = Principal("a", "team-a")
B = Principal("b", "team-b")
CPU_JOB = "name: c\nqueue: team-a\ncommand: 'sleep 100'\ngpus: 0\nhost: {cpus: 16}\n"


def test_a_stopped_cpu_only_jobs_answers_do_not_name_the_queue_it_gave_way_to(
        tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:4", gpus_per_server=2, policy="fifo",
                       start=False)  # two servers of 2 GPUs and 16 CPUs each
    hogs = [svc.submit(parse_request(CPU_JOB), A).job_id for _ in range(2)]
    svc.round(10.0)
    gid = svc.submit(parse_request("name: g\nqueue: team-b\ncommand: 'sleep 100'\ngpus: 1\n"),
                     B).job_id
    svc.round(20.0 + YIELD_EXEMPT_S)
    stopped = [h for h in hogs if "quota preemption" in (svc.store.get(h).reason or "")  # type: ignore[union-attr]
               or any("quota preemption" in e.detail for e in svc.store.events(h))]
    assert svc.store.allocation(gid, 1) is not None and len(stopped) == 1
    api = TestClient(create_app(svc))
    for path in (f"/api/jobs/{stopped[0]}", "/api/jobs", f"/api/jobs/{stopped[0]}/explain"):
        r = api.get(path, headers=auth(TEAM_A))
        assert r.status_code == 200, path
        assert "team-b" not in r.text and gid not in r.text, path
    said = [e["detail"] for e in api.get(f"/api/jobs/{stopped[0]}",
                                         headers=auth(TEAM_A)).json()["events"]
            if "quota preemption" in e["detail"]]
    assert said and all("GPU job a job of another queue (another queue, within its nominal "
                        "quota)" in d for d in said)
    admin = api.get(f"/api/jobs/{stopped[0]}", headers=auth(ADMIN)).text
    assert "team-b" in admin and gid in admin  # the admin reads every name


def test_scrub_keeps_the_tenants_own_queue_and_rewrites_every_other_name() -> None:
    """Names that exist and names that do not read alike (no oracle for queue names)."""
    names = JobNames.__new__(JobNames)
    JobNames.__init__(names, None, A)  # type: ignore[arg-type]
    assert names.scrub(["queue 'team-a' at its CPU quota", "to admit x (queue 'team-b')",
                        "queue 'nope-never' full"]) == [
        "queue 'team-a' at its CPU quota", "to admit x (another queue)", "another queue full"]
    seeing = JobNames(None, A, sees_queues=True)  # type: ignore[arg-type]
    assert seeing.scrub("(queue 'team-b')") == "(queue 'team-b')"  # tenants_see_all
