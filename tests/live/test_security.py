"""The trust table of docs/security.md, row by row, tried by a hostile tenant.

team-b's token attacks team-a's job and the service's own state; every test would have
passed for the attacker before the rule it checks was written.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import typer
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tessera.cli.live import register
from tessera.errors import SpecError
from tessera.live.api import create_app
from tessera.live.layout import Layout, UnsafeState, default_work_dir
from tessera.live.names import JobNames
from tessera.live.server import ServeConfig, build_service
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import CONFIG_NAME, Principal, add_token, load_tenancy
from tessera.model.jobs import JobId
from tests.live.helpers import (
    ADMIN,
    TEAM_A,
    TEAM_B,
    ServerThread,
    auth,
    make_service,
    wait_for,
)

SECRET = "s3cr3t-value-of-team-a"
NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def victim(api: TestClient) -> str:
    """A running team-a job whose env holds a secret."""
    r = api.post("/api/jobs", json={"name": "victim", "command": "sleep 30", "gpus": 2,
                                    "env": {"API_KEY": SECRET}}, headers=auth(TEAM_A))
    assert r.status_code == 201, r.text
    job_id = str(r.json()["job_id"])
    wait_for(lambda: api.get(f"/api/jobs/{job_id}", headers=auth(ADMIN)).json()["state"]
             == "running", what="the victim to run")
    return job_id


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/jobs/{id}"), ("GET", "/api/jobs/{id}/explain"),
    ("POST", "/api/jobs/{id}/cancel"), ("DELETE", "/api/jobs/{id}")],
    ids=["read-job-and-events", "explain", "cancel", "delete"])
def test_a_tenant_cannot_reach_another_queues_job(api: TestClient, victim: str, method: str,
                                                  path: str) -> None:
    r = api.request(method, path.format(id=victim), headers=auth(TEAM_B))
    assert r.status_code == 404 and r.json() == {"detail": f"no job {victim!r}"}
    assert api.get(f"/api/jobs/{victim}", headers=auth(ADMIN)).json()["state"] == "running"


def test_a_tenant_lists_only_its_own_jobs(api: TestClient, victim: str) -> None:
    for query in ("", "?state=running", "?limit=10000"):
        assert api.get(f"/api/jobs{query}", headers=auth(TEAM_B)).json()["jobs"] == []
    assert [j["job_id"] for j in api.get("/api/jobs", headers=auth(ADMIN)).json()["jobs"]] == [
        victim]


def test_no_answer_ever_carries_env_values(api: TestClient, victim: str) -> None:
    paths = ["/api/jobs", f"/api/jobs/{victim}", f"/api/jobs/{victim}/explain", "/api/queues",
             "/api/cluster"]
    for token in (TEAM_A, TEAM_B, ADMIN):
        for path in paths:
            r = api.get(path, headers=auth(token))
            assert SECRET not in r.text and "API_KEY" not in r.text, (token, path)


def test_a_tenant_sees_only_its_queue_and_the_clusters_capacity(api: TestClient,
                                                               victim: str) -> None:
    queues = api.get("/api/queues", headers=auth(TEAM_B)).json()["queues"]
    assert [q["name"] for q in queues] == ["team-b"] and queues[0]["used_gpus"] == 0
    c = api.get("/api/cluster", headers=auth(TEAM_B)).json()
    assert c["view"] == "queue" and c["queue"] == "team-b" and c["queue_counts"] == {}
    assert "counts" not in c and all("used_gpus" not in n for n in c["nodes"])
    assert [(f["total_gpus"], f["queue_used_gpus"]) for f in c["flavors"]] == [(4, 0), (4, 0)]
    assert "used_gpus" not in str(c["flavors"]).replace("queue_used_gpus", "")
    admin = api.get("/api/cluster", headers=auth(ADMIN)).json()
    assert admin["view"] == "cluster" and sum(f["used_gpus"] for f in admin["flavors"]) == 2
    assert admin["counts"] == {"running": 1}


@pytest.mark.parametrize("queue", ["team-a", "no-such-queue"])
def test_a_tenant_cannot_submit_elsewhere_nor_learn_queue_names(api: TestClient,
                                                                queue: str) -> None:
    r = api.post("/api/jobs", json={"name": "x", "command": "true", "queue": queue},
                 headers=auth(TEAM_B))
    assert r.status_code == 403
    assert r.json() == {"detail": "token 'b' may submit only to queue 'team-b'"}


def test_tenants_see_all_opens_queues_and_use_but_not_jobs(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state")
    path = tmp_path / "state" / CONFIG_NAME
    path.write_text(path.read_text() + "tenants_see_all: true\n")
    svc.tenancy = load_tenancy(tmp_path / "state")
    try:
        with TestClient(create_app(svc)) as api:
            api.post("/api/jobs", json={"name": "a", "command": "sleep 5"}, headers=auth(TEAM_A))
            queues = api.get("/api/queues", headers=auth(TEAM_B)).json()["queues"]
            assert [q["name"] for q in queues] == ["team-a", "team-b"]
            assert api.get("/api/cluster", headers=auth(TEAM_B)).json()["view"] == "cluster"
            assert api.get("/api/jobs", headers=auth(TEAM_B)).json()["jobs"] == []
    finally:
        svc.stop()


def _preempting(tmp_path: Path) -> tuple[LiveService, str, str]:
    """srtf on 2 GPUs: team-b's long job runs; team-a's short job waits, and srtf would start
    it by preempting team-b's (the loop is stopped, so the what-if sees this very moment)."""
    svc = make_service(tmp_path / "state", "v100:2", policy="srtf", gpus_per_server=2)
    admin = svc.tenancy.authenticate(ADMIN)
    assert admin is not None

    def submit(queue: str, name: str, duration_s: int) -> str:
        return svc.submit(parse_request(yaml.safe_dump({
            "queue": queue, "name": name, "command": "sleep 30", "gpus": 2,
            "expected_duration_s": duration_s})), admin).job_id
    other = submit("team-b", "secret-b", 3000)
    wait_for(lambda: (r := svc.store.get(other)) is not None and r.state.value == "running",
             what="team-b's job to run")
    svc.stop()
    return svc, other, submit("team-a", "mine", 5)


def test_explain_counts_the_jobs_of_other_queues_it_would_preempt(tmp_path: Path) -> None:
    """``GET /api/jobs/<b>`` is 404 to team-a, so its explain must not name b either (before
    the fix: ``would_preempt: [b]`` and "preempting <b>"); the admin still sees the id."""
    svc, other, mine = _preempting(tmp_path)
    api = TestClient(create_app(svc))
    assert api.get(f"/api/jobs/{other}", headers=auth(TEAM_A)).status_code == 404
    r = api.get(f"/api/jobs/{mine}/explain", headers=auth(TEAM_A))
    assert other not in r.text
    out = r.json()
    assert out["would_preempt"] == [] and out["would_preempt_other_queues"] == 1
    assert any(ln.endswith(", preempting 1 job of another queue") for ln in out["lines"])
    admin = api.get(f"/api/jobs/{mine}/explain", headers=auth(ADMIN)).json()
    assert admin["would_preempt"] == [other] and admin["would_preempt_other_queues"] == 0
    assert any(ln.endswith(f", preempting {other}") for ln in admin["lines"])


def test_the_cli_explain_names_no_job_of_another_queue(tmp_path: Path) -> None:
    svc, other, mine = _preempting(tmp_path)
    server = ServerThread(svc)
    try:
        app = typer.Typer()
        register(app)
        for extra in ([], ["--json"]):
            out = CliRunner().invoke(app, ["explain", mine, *extra], env={
                "TESSERA_SERVER": server.url, "TESSERA_TOKEN": TEAM_A}).output
            assert "preempt" in out and other not in out, out
    finally:
        server.stop()


def test_explain_counts_a_partner_of_another_queue_sharing_the_gpus(tmp_path: Path) -> None:
    """A placement's "(shared with ...)" names a partner only to who may see its queue."""
    svc, other, mine = _preempting(tmp_path)
    running = svc.store.allocations(("running",), job_id=other)[0]
    with svc.store.tx() as db:  # team-a's job shares team-b's GPUs (as a pairing decision would)
        svc.store.add_allocation(db, mine, 1, replace(running.placement,
                                                      colocated_with=(JobId(other),)), 0.0)
    api = TestClient(create_app(svc))
    r = api.get(f"/api/jobs/{mine}/explain", headers=auth(TEAM_A))
    assert other not in r.text
    assert r.json()["placement"].endswith(" (shared with 1 job of another queue)")
    admin = api.get(f"/api/jobs/{mine}/explain", headers=auth(ADMIN)).json()
    assert admin["placement"].endswith(f" (shared with {other})")


def test_a_jobs_answers_call_a_partner_of_another_queue_so(tmp_path: Path) -> None:
    """The job's own answers (its placement, its ``sharing`` events, the listing) name a
    partner of another queue only to the admin; to the tenant it is "a job of another
    queue" (before the fix: its id, in the placement text and the events)."""
    svc, other, mine = _preempting(tmp_path)
    running = svc.store.allocations(("running",), job_id=other)[0]
    with svc.store.tx() as db:
        svc.store.add_allocation(db, mine, 1, replace(running.placement,
                                                      colocated_with=(JobId(other),)), 0.0)
        svc.store.event(db, 0.0, mine, "sharing", f"run 1: sharing its GPUs with job {other} "
                        "(run 1) by mps")
    api = TestClient(create_app(svc))
    for path in (f"/api/jobs/{mine}", "/api/jobs", f"/api/jobs/{mine}/explain"):
        r = api.get(path, headers=auth(TEAM_A))
        assert r.status_code == 200 and other not in r.text, path
    job = api.get(f"/api/jobs/{mine}", headers=auth(TEAM_A)).json()
    assert job["last_placement"]["text"].endswith("(shared with a job of another queue)")
    assert "with job a job of another queue (run 1)" in job["events"][-1]["detail"]
    assert other in api.get(f"/api/jobs/{mine}", headers=auth(ADMIN)).text
    names = JobNames(svc.store, Principal("a", "team-a"))
    assert names.scrub({"x": [f"{mine} and {other}"]}) == {  # its own jobs stay named
        "x": [f"{mine} and a job of another queue"]}
    # an id that exists in another queue and one that exists nowhere read alike: no oracle
    assert names.scrub([other, "j-0123456789"]) == ["a job of another queue"] * 2


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
def test_schema_pages_are_off_unless_asked_for(service: LiveService, path: str) -> None:
    with TestClient(create_app(service)) as api:
        r = api.get(path)
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    with TestClient(create_app(service, api_docs=True)) as api:
        assert api.get(path).status_code == 200


@pytest.mark.parametrize("route", ["GET /api/jobs", "POST /api/jobs", "GET /api/queues",
                                   "GET /api/cluster", "GET /api/jobs/j-x",
                                   "POST /api/jobs/j-x/cancel"])
@pytest.mark.parametrize("token", [None, "guess", ADMIN[:-1]], ids=["none", "guess", "prefix"])
def test_every_api_route_needs_a_known_token(api: TestClient, route: str,
                                             token: str | None) -> None:
    method, path = route.split()
    r = api.request(method, path, headers=auth(token) if token else {})
    assert r.status_code == 401 and r.json()["detail"] in ("missing bearer token",
                                                          "unknown token")


@pytest.mark.parametrize("where", ["state", "state/tessera-live.yaml", "work",
                                   "work/checkpoints/j-other", "/"],
                         ids=["state-dir", "config", "work-root", "other-job", "root"])
def test_a_checkpoint_dir_cannot_point_at_the_services_files(api: TestClient,
                                                             service: LiveService,
                                                             where: str) -> None:
    roots = {"state": service.store.path.parent, "work": service.work_dir}
    head, _, rest = where.partition("/")
    target = roots[head] / rest if head in roots else Path(where)
    r = api.post("/api/jobs", json={"name": "x", "command": "true",
                                    "checkpoint_dir": str(target)}, headers=auth(TEAM_B))
    assert r.status_code == 422 and "overlaps" in r.json()["detail"], r.text


def test_a_symlink_into_the_state_dir_is_followed(api: TestClient, service: LiveService,
                                                  tmp_path: Path) -> None:
    link = tmp_path / "innocent"
    link.symlink_to(service.store.path.parent)
    r = api.post("/api/jobs", json={"name": "x", "command": "true",
                                    "checkpoint_dir": str(link / "sub")}, headers=auth(TEAM_B))
    assert r.status_code == 422 and "state dir" in r.json()["detail"]


@pytest.mark.parametrize("key", ["TESSERA_CHECKPOINT_DIR", "TESSERA_TEST_NVML_MODULE", "RANK",
                                 "MASTER_ADDR", "A=B", "1X"])
def test_a_job_cannot_set_the_services_variables(api: TestClient, key: str) -> None:
    r = api.post("/api/jobs", json={"name": "x", "command": "true", "env": {key: "/tmp"}},
                 headers=auth(TEAM_B))
    assert r.status_code == 422 and "env" in r.json()["detail"]


# -- the state on disk -------------------------------------------------------------------------


@pytest.fixture
def built(tmp_path: Path) -> Iterator[tuple[LiveService, Layout]]:
    cfg = ServeConfig(tmp_path / "state", "v100:4,t4:4", 4)
    svc, token = build_service(cfg)
    assert token is not None
    yield svc, cfg.layout
    svc.store.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_is_private_after_start(built: tuple[LiveService, Layout]) -> None:
    svc, layout = built
    svc.store.set_meta("touch", "1")  # the WAL exists once something was written
    assert _mode(layout.state_dir) == 0o700
    files = sorted(p.name for p in layout.state_dir.iterdir())
    assert files == ["state.db", "state.db-shm", "state.db-wal", "store.marker",
                     "tessera-live.yaml"]
    assert {p.name: _mode(p) for p in layout.state_dir.iterdir()} == dict.fromkeys(files, 0o600)
    assert layout.work_dir == default_work_dir(layout.state_dir)
    assert _mode(layout.work_dir) == 0o711 and _mode(layout.runs_dir) == 0o700


def test_a_jobs_files_are_outside_the_state_dir(built: tuple[LiveService, Layout],
                                                tmp_path: Path) -> None:
    svc, layout = built
    svc.start()
    try:
        out = tmp_path / "seen"
        req = parse_request(f"name: peek\ncommand: echo $TESSERA_CHECKPOINT_DIR $PWD > {out}\n")
        job_id = svc.submit(req, Principal("admin", None)).job_id
        wait_for(lambda: out.exists() and out.read_text().strip() != "", what="the job's output")
        ckpt = Path(out.read_text().split()[0])
        assert ckpt == layout.checkpoints_dir / job_id
        run_dirs = list(layout.runs_dir.glob(f"{job_id}/*"))
        assert run_dirs and not any(p.is_relative_to(layout.state_dir)
                                    for p in [ckpt, *run_dirs])
        assert not list(layout.state_dir.rglob(job_id))
    finally:
        svc.stop()


def _fresh_state(tmp_path: Path) -> Path:
    svc, _ = build_service(ServeConfig(tmp_path / "state", "v100:4", 4))
    svc.store.close()
    return tmp_path / "state"


@pytest.mark.parametrize(("target", "mode", "fix"), [
    ("", 0o755, "chmod 700"), ("", 0o750, "chmod 700"),
    (CONFIG_NAME, 0o644, "chmod 600"), (CONFIG_NAME, 0o620, "chmod 600"),
    ("state.db", 0o604, "chmod 600")],
    ids=["dir-world-readable", "dir-group-readable", "config-readable", "config-group-writable",
         "db-world-readable"])
def test_start_refuses_state_others_can_use(tmp_path: Path, target: str, mode: int,
                                            fix: str) -> None:
    state = _fresh_state(tmp_path)
    (state / target).chmod(mode)
    with pytest.raises(UnsafeState) as e:
        build_service(ServeConfig(state))
    assert f"run: {fix} {state / target}" in str(e.value)
    assert f"mode {mode:04o}" in str(e.value)


def test_start_refuses_state_owned_by_someone_else(tmp_path: Path) -> None:
    state = _fresh_state(tmp_path)
    os.chown(state / CONFIG_NAME, NOBODY, -1)
    with pytest.raises(UnsafeState, match=f"belongs to uid {NOBODY}.*run: chown"):
        build_service(ServeConfig(state))


def test_start_refuses_a_symlinked_config(tmp_path: Path) -> None:
    state = _fresh_state(tmp_path)
    planted = tmp_path / "planted.yaml"
    (state / CONFIG_NAME).rename(planted)
    (state / CONFIG_NAME).symlink_to(planted)
    with pytest.raises(UnsafeState, match="is not a plain file"):
        build_service(ServeConfig(state))


@pytest.mark.parametrize(("state", "work", "message"), [
    ("s", "s/work", "is inside the state dir"), ("w/s", "w", "is inside the work root"),
    ("s", "s", "is inside the state dir")], ids=["work-in-state", "state-in-work", "same"])
def test_state_and_work_root_must_be_apart(tmp_path: Path, state: str, work: str,
                                           message: str) -> None:
    with pytest.raises(UnsafeState, match=message):
        build_service(ServeConfig(tmp_path / state, work_dir=tmp_path / work))
    assert not (tmp_path / state / "state.db").exists()


@pytest.mark.parametrize("state", ["/", "/tmp/.."])
def test_the_root_cannot_be_the_state_dir(state: str) -> None:
    with pytest.raises(UnsafeState, match="the state dir cannot be /"):
        ServeConfig(Path(state)).layout  # noqa: B018 -- computing it is what refuses


def test_an_old_state_dir_with_runs_inside_says_how_to_move_them(tmp_path: Path) -> None:
    state = _fresh_state(tmp_path)
    (state / "runs").mkdir()
    with pytest.raises(UnsafeState, match=f"run: mv {state / 'runs'} {tmp_path}/state-work/runs"):
        build_service(ServeConfig(state))


def test_a_work_root_others_can_write_is_refused(tmp_path: Path) -> None:
    state = _fresh_state(tmp_path)
    (tmp_path / "state-work" / "runs").chmod(0o777)
    with pytest.raises(UnsafeState, match=r"writable by group or others.*chmod go-w"):
        build_service(ServeConfig(state))


def test_token_add_admin_mints_a_working_admin_token(tmp_path: Path) -> None:
    state = _fresh_state(tmp_path)
    token = add_token(state, "ops", None)
    assert load_tenancy(state).authenticate(token) is not None
    assert load_tenancy(state).authenticate(token).admin  # type: ignore[union-attr]
    assert token not in (state / CONFIG_NAME).read_text()
    assert _mode(state / CONFIG_NAME) == 0o600
    assert yaml.safe_load((state / CONFIG_NAME).read_text())["tokens"][-1]["queue"] is None


def test_token_add_refuses_a_state_dir_others_can_write(tmp_path: Path) -> None:
    state = _fresh_state(tmp_path)
    state.chmod(0o777)
    with pytest.raises(SpecError, match="chmod 700"):
        add_token(state, "ops", None)
