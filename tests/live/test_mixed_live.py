"""The live service places a mixed gang: each rank learns its own flavor, the store keeps it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from fastapi.testclient import TestClient

from tessera.live.api import create_app
from tessera.live.spec import JobRequest, to_live_job
from tessera.live.store import Store
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement
from tests.live.helpers import TEAM_A, auth, make_service, wait_for

QUEUES: list[dict[str, object]] = [{"name": "team-a", "nominal_gpus": 8},
                                   {"name": "team-b", "nominal_gpus": 0}]


def test_a_gang_bigger_than_each_flavor_runs_mixed(tmp_path: Path) -> None:
    out = tmp_path / "ranks.txt"
    svc = make_service(tmp_path / "state", queues=QUEUES, mixed_gangs=True)
    try:
        with TestClient(create_app(svc)) as api:
            job = {"name": "wide", "gpus": 8,
                   "command": f'echo "$RANK $TESSERA_FLAVOR $TESSERA_GANG_FLAVORS" >> {out}'}
            r = api.post("/api/jobs", json=job, headers=auth(TEAM_A))
            assert r.status_code == 201, r.text
            jid = r.json()["job_id"]
            wait_for(lambda: api.get(f"/api/jobs/{jid}", headers=auth(TEAM_A)).json()["state"]
                     == "succeeded", what="the mixed gang to finish")
    finally:
        svc.stop()
    lines = sorted(out.read_text().split("\n")[:-1], key=lambda s: int(s.split()[0]))
    flavors = [line.split()[1] for line in lines]
    assert sorted(flavors) == ["T4"] * 4 + ["V100-16GB"] * 4
    assert {line.split()[2] for line in lines} == {"T4+V100-16GB"}
    alloc = Store(tmp_path / "state" / "state.db").allocations(("done",))[0]
    assert alloc.placement.is_mixed
    counts = alloc.placement.flavor_counts()
    assert [(f.short, n) for f, n in counts] == [("T4", 4), ("V100-16GB", 4)]


def test_without_mixed_gangs_the_same_request_is_rejected(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", queues=QUEUES)
    try:
        with TestClient(create_app(svc)) as api:
            r = api.post("/api/jobs", json={"name": "wide", "gpus": 8, "command": "true"},
                         headers=auth(TEAM_A))
            assert r.status_code == 422 and "of one flavor" in r.json()["detail"]
    finally:
        svc.stop()


def test_store_round_trips_a_mixed_placement(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    p = Placement.mixed((("v-0", resolve_flavor("V100-16GB"), 4),
                         ("t-0", resolve_flavor("T4"), 2)))
    job = to_live_job(JobRequest(name="x", gpus=6, command="true"), "j1", "team-a", 0.0)
    store.add_job(job, 0.0)
    with store.tx() as db:
        store.add_allocation(db, "j1", 1, p, 0.0)
    got = store.allocations(("planned",))[0].placement
    assert got == p and got.flavors == (resolve_flavor("T4"), resolve_flavor("V100-16GB"))
    # The stored row keeps the names it always had: the gang's label and [node, gpus, name].
    with sqlite3.connect(tmp_path / "s.db") as db:
        flavor, gpus_json = db.execute("SELECT flavor, gpus_json FROM allocations").fetchone()
    assert flavor == "T4+V100-16GB"
    assert json.loads(gpus_json) == [["v-0", 4, "V100-16GB"], ["t-0", 2, "T4"]]


def test_rows_stored_by_names_load_as_flavors(tmp_path: Path) -> None:
    """A homogeneous and a mixed allocation row, and a job's run seconds, written as names
    (as every earlier version wrote them), load as catalog flavors."""
    store = Store(tmp_path / "s.db")
    job = to_live_job(JobRequest(name="x", gpus=4, command="true"), "j1", "team-a", 0.0)
    store.add_job(job, 0.0)
    with store.tx() as db:
        db.execute("INSERT INTO allocations (job_id, run, flavor, gpus_json, status, created_s)"
                   " VALUES ('j1', 1, 'V100-16GB', '[[\"n0\", 4]]', 'done', 0.0)")
        db.execute("INSERT INTO allocations (job_id, run, flavor, gpus_json, status, created_s)"
                   " VALUES ('j1', 2, 'K80+V100-16GB', "
                   "'[[\"n0\", 2, \"V100-16GB\"], [\"k0\", 2, \"K80\"]]', 'done', 0.0)")
        db.execute("UPDATE jobs SET run_s_json = '{\"V100-16GB\": 5.0, \"K80\": 2.5}'")
    one, two = sorted(store.allocations(("done",)), key=lambda a: a.run)
    v100, k80 = resolve_flavor("V100-16GB"), resolve_flavor("K80")
    assert one.placement == Placement.of(v100, (("n0", 4),))
    assert two.placement.flavors == (k80, v100) and two.placement.label == "K80+V100-16GB"
    assert store.jobs()[0].run_s_by_flavor == {v100: 5.0, k80: 2.5}
