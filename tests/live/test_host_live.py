"""The live service with CPU and memory demands (issue 33 parts 1, 4 and 6)."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from tessera.live.executors import host_limits
from tessera.live.executors.base import LaunchSpec
from tessera.live.executors.local.executor import LocalExecutor
from tessera.live.host_report import host_report
from tessera.live.service import LiveService, Rejected
from tessera.live.spec import JobRequest, parse_request, to_live_job
from tessera.live.store import Store
from tessera.live.tenancy import Principal
from tessera.model.cluster import load_cluster
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.snapshot import Placement
from tests.builders import make_cluster
from tests.live.helpers import wait_for, wait_for_job

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


# -- enforcement on the local executor -----------------------------------------------------

READ_OWN = ("import os, resource, sys; print('affinity', sorted(os.sched_getaffinity(0)), "
            "'as', resource.getrlimit(resource.RLIMIT_AS)[1])")


def _launch(ex: LocalExecutor, job_id: str, tmp_path: Path,
            host: tuple[tuple[str, float, float], ...]) -> str:
    spec = LaunchSpec(job_id, 1, (sys.executable, "-S", "-c", READ_OWN), (),
                      Placement.of(resolve_flavor("V100"), (("n0", 1),)),
                      str(tmp_path / "ckpt" / job_id), grace_s=1.0, host_by_node=host)
    ex.launch(spec)
    wait_for(lambda: ex.status(job_id, 1).state == "exited", 30.0, "the run to exit")
    assert ex.status(job_id, 1).exit_code == 0
    chunk = ex.read_log(job_id, 1, 0, 0, 10_000)
    assert chunk is not None
    return chunk.text


def test_a_local_run_is_pinned_and_limited_and_says_how(tmp_path: Path) -> None:
    """The rank reads its own affinity and address-space limit: one CPU id (of the
    service's), and 512 MiB; the events line names the mechanism."""
    ex = LocalExecutor(tmp_path / "runs", grace_s=1.0)
    out = _launch(ex, "pinned", tmp_path, (("n0", 1.0, 0.5),))
    ids = sorted(os.sched_getaffinity(0))
    line = next(ln for ln in out.splitlines() if ln.startswith("affinity"))
    got = ast.literal_eval(line.split("affinity", 1)[1].split("as")[0].strip())
    assert len(got) == 1 and got[0] in ids, out
    if host_limits.mechanism() == "affinity":
        assert line.endswith(f"as {512 << 20}"), out
    note = ex.host_enforcement("pinned", 1)
    assert note is not None and "1 CPUs on CPU ids" in note and "0.5 GiB" in note
    assert ("enforced by a cgroup v2" in note) == (host_limits.mechanism() == "cgroup")


def test_a_run_without_host_amounts_is_left_alone(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path / "runs", grace_s=1.0)
    out = _launch(ex, "free", tmp_path, ())
    assert f"affinity {sorted(os.sched_getaffinity(0))} as -1" in out
    assert ex.host_enforcement("free", 1) is None


def test_cpu_ids_are_the_executors_choice_and_avoid_busy_ones() -> None:
    assert host_limits.choose_cpus(2.5, [0, 1, 2, 3, 4], {0, 1}) == [2, 3, 4]
    assert host_limits.choose_cpus(8, [0, 1], set()) == [0, 1]  # never more than exist
    assert host_limits.choose_cpus(1, [0, 1], {0, 1}) == [0]    # shared when none is free


def test_the_service_records_the_enforcement_in_the_jobs_events(service: LiveService) -> None:
    rec = service.submit(parse_request(json.dumps({
        "name": "pinned", "command": [sys.executable, "-S", "-c", READ_OWN], "gpus": 1,
        "host": {"cpus": 1, "memory": "1Gi"}}), "json"), TEAM_A)
    jid = rec.job.spec.job_id
    wait_for_job(service, jid)
    notes = [e.detail for e in service.store.events(jid) if e.kind == "host"]
    assert len(notes) == 1 and notes[0].startswith("run 1: host: 1 CPUs on CPU ids"), notes


def test_the_local_machine_reports_its_cpus_and_memory(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path / "runs")
    cpus, mem = ex.host_capacity()["local"]
    assert cpus == len(os.sched_getaffinity(0)) and mem > 0.1
    small = load_cluster("v100:1", 1)
    info, _warnings = host_report(ex, small)
    assert info[0].startswith(f"machine local reports {cpus:g} CPUs")
    big = make_cluster().node("V100", gpus=8, count=64).build()  # 4,096 CPUs declared
    assert "the cluster declares 4096 CPUs" in host_report(ex, big)[1][0]


def test_the_store_keeps_the_cpus_and_memory_a_policy_chose(tmp_path: Path) -> None:
    """A run's explicit ``host_by_node`` (a Synergy mode's choice) survives the store, so the
    live view books what the decision gave; a state file from before the column opens."""
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as db:  # the allocations table as it was before host_json
        db.execute(
            "CREATE TABLE allocations (job_id TEXT NOT NULL, run INTEGER NOT NULL, flavor TEXT "
            "NOT NULL, gpus_json TEXT NOT NULL, status TEXT NOT NULL, stop_reason TEXT, "
            "created_s REAL NOT NULL, started_s REAL, ended_s REAL, exit_code INTEGER, detail "
            "TEXT NOT NULL DEFAULT '', global_batch_samples INTEGER, colocated_with TEXT NOT "
            "NULL DEFAULT '', steps REAL NOT NULL DEFAULT 0, settled_s REAL, "
            "PRIMARY KEY (job_id, run))")
        db.execute("INSERT INTO allocations (job_id, run, flavor, gpus_json, status, created_s)"
                   " VALUES ('j0', 1, 'V100-16GB', '[[\"v-0\", 2]]', 'planned', 0)")
    for path in (tmp_path / "new.db", old):
        store = Store(path)
        v100 = resolve_flavor("V100-16GB")
        p = Placement((v100,), (("v-0", 2), ("v-1", 1)), (), None, (),
                      (("v-0", 9.0, 40.5), ("v-1", 4.5, 20.0)))
        job = to_live_job(JobRequest(name="x", gpus=3, command="true"), "j1", "team-a", 0.0)
        store.add_job(job, 0.0)
        with store.tx() as db:
            store.add_allocation(db, "j1", 1, p, 0.0)
            store.add_allocation(db, "j1", 2, Placement.of(v100, (("v-0", 1),)), 0.0)
        got = {a.run: a.placement for a in store.allocations(("planned",), job_id="j1")}
        assert got[1] == p and got[1].host_by_node == p.host_by_node
        assert got[2].host_by_node == ()
