"""The Ray executor on an embedded Ray cluster that pretends to hold V100s and T4s.

Opt-in (``-m ray``): starting Ray costs several seconds on a small machine.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import Principal, load_tenancy
from tessera.model.cluster import load_cluster
from tessera.sched.core.settings import SchedulerSettings
from tests.live.helpers import wait_for, write_config

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")

ADMIN = Principal("admin", None)
ENV_DUMP = ("import json, os, sys; json.dump({k: v for k, v in os.environ.items() "
            "if k.startswith(('MASTER_', 'RANK', 'WORLD_', 'LOCAL_', 'TESSERA_'))}, "
            "open(sys.argv[1] + '/' + os.environ['RANK'] + '.json', 'w'))")


from tessera.live.executors.ray.head import EmbeddedHead  # noqa: E402


@pytest.fixture
def ray_service(tmp_path: Path) -> Iterator[LiveService]:
    from tessera.live.executors.ray.executor import RayExecutor

    state, work = tmp_path / "state", tmp_path / "state-work"
    write_config(state)
    cluster = load_cluster("v100:2,t4:2", 2)
    svc = LiveService(Store(state / "state.db"),
                      RayExecutor(cluster, None, work / "runs", grace_s=1.0, state_dir=state),
                      cluster,
                      load_tenancy(state), "fifo", work,
                      ServiceOptions(period_s=0.5, poll_s=0.1, grace_s=1.0))
    svc.start()
    yield svc
    svc.stop()
    EmbeddedHead(state).stop()


def _final(svc: LiveService, jid: str) -> bool:
    rec = svc.store.get(jid)
    return rec is not None and rec.final


def test_gang_gets_rendezvous_env_and_failures_retry(ray_service: LiveService,
                                                     tmp_path: Path) -> None:
    svc = ray_service
    resources = ray.cluster_resources()
    assert resources["GPU"] == 4
    assert resources["accelerator_type:V100"] == resources["accelerator_type:T4"] == 1
    out = tmp_path / "env"
    out.mkdir()
    ok = svc.submit(parse_request(
        f"name: ddp\nqueue: team-a\ngpus: 2\nflavors: [t4]\nrequires_locality: true\n"
        f"command: [{sys.executable}, -c, \"{ENV_DUMP}\", {out}]"), ADMIN).job_id
    flaky = svc.submit(parse_request(
        "name: flaky\nqueue: team-b\nmax_retries: 1\nflavors: [v100]\n"
        "command: test \"$TESSERA_RUN\" = 2"), ADMIN).job_id
    wait_for(lambda: _final(svc, ok) and _final(svc, flaky), 60, "both jobs")
    envs = [json.loads((out / f"{r}.json").read_text()) for r in (0, 1)]
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    assert envs[0]["TESSERA_FLAVOR"] == "T4" and envs[0]["TESSERA_JOB_ID"] == ok
    flaky_rec = svc.store.get(flaky)
    assert flaky_rec is not None and flaky_rec.state.value == "succeeded"
    assert flaky_rec.attempts == 1
    # The loop releases a run's placement group right after it records the exit (in that
    # order, so a crash in between never loses an exit): wait for the release, do not race it.
    wait_for(lambda: all(pg["state"] == "REMOVED"
                         for pg in ray.util.placement_group_table().values()),
             30, "the placement groups to be removed")
    # Once the store holds each run's end, its KV records are pruned (three runs, none left),
    # and a finished rank's output is still readable from the copy the service kept.
    wait_for(lambda: _kv_records() == [], 30, "the KV records to be pruned")
    chunk = svc.executor.read_log(flaky, 1, 0, 0, 4096)
    assert chunk is not None and chunk.size_bytes == 0


def test_cancel_stops_the_actors(ray_service: LiveService) -> None:
    svc = ray_service
    jid = svc.submit(parse_request("name: long\nqueue: team-a\ncommand: sleep 60"),
                     ADMIN).job_id
    wait_for(lambda: svc.store.get(jid).state.value == "running", 30,  # type: ignore[union-attr]
             "the job to run")
    svc.cancel(jid, ADMIN)
    wait_for(lambda: not svc.store.allocations(), 20, "the GPUs to be released")
    hosts = svc.executor.hosts  # type: ignore[attr-defined]
    wait_for(lambda: not [k for k in hosts.held() if k[0] == jid], 20,
             "the rank host to forget the rank")


def test_a_restart_finds_the_exit_of_a_run_that_ended_while_it_was_down(
        tmp_path: Path) -> None:
    """The service stops while a job runs; the job ends; its rank host is killed (as a node
    restart would): the next service learns the exit from the KV record, then prunes it, and
    frees a group and a record of a run its store no longer holds."""
    from tessera.live.executors.ray.hosts import HOST_PREFIX
    from tessera.live.executors.ray.records import NAMESPACE

    state, work = tmp_path / "state", tmp_path / "state-work"
    write_config(state)
    try:
        svc = _service(state, work)
        jid = svc.submit(parse_request("name: brief\nqueue: team-a\n"
                                       "command: sleep 3; echo bye"), ADMIN).job_id
        wait_for(lambda: svc.store.get(jid).state.value == "running", 60,  # type: ignore
                 "the job to run")
        # What a service killed between recording a run's end and releasing it leaves: a
        # group and a run record of a run the store does not hold. The restart frees both.
        from ray.util.placement_group import placement_group

        from tessera.live.executors.ray.records import put, run_key

        stray = placement_group([{"GPU": 1.0}], name="tessera-pg:j-stray:1",
                                lifetime="detached")
        ray.get(stray.ready(), timeout=30)
        put(run_key("j-stray", 1), {"world": 1})
        svc.stop()
        svc = _service(state, work, start=False)
        wait_for(lambda: [k for k in _kv_records() if k.startswith("exit:")] != [], 30,
                 "the rank's exit record")
        for name in ray.util.list_named_actors():
            if name.startswith(HOST_PREFIX):
                ray.kill(ray.get_actor(name, namespace=NAMESPACE))
        svc.start()
        wait_for(lambda: _final(svc, jid), 30, "the restarted service to record the exit")
        rec = svc.store.get(jid)
        assert rec is not None and rec.state.value == "succeeded" and rec.attempts == 0
        wait_for(lambda: _kv_records() == [], 30, "the KV records to be pruned")
        chunk = svc.executor.read_log(jid, 1, 0, 0, 4096)
        assert chunk is not None and chunk.text == "bye\n"
        wait_for(lambda: all(g["state"] == "REMOVED" for g in
                             ray.util.placement_group_table().values()
                             if g["name"] == "tessera-pg:j-stray:1"), 30, "the stray group's end")
        svc.stop()
    finally:
        EmbeddedHead(state).stop()


def _service(state: Path, work: Path, start: bool = True) -> LiveService:
    from tessera.live.executors.ray.executor import RayExecutor

    cluster = load_cluster("v100:2,t4:2", 2)
    svc = LiveService(Store(state / "state.db"),
                      RayExecutor(cluster, None, work / "runs", grace_s=1.0, state_dir=state),
                      cluster, load_tenancy(state), "fifo", work,
                      ServiceOptions(period_s=0.5, poll_s=0.1, grace_s=1.0))
    if start:
        svc.start()
    return svc


def _kv_records() -> list[str]:
    from tessera.live.executors.ray.records import keys

    return keys("run:") + keys("exit:")


def test_a_mixed_gang_gets_one_bundle_per_flavor(tmp_path: Path) -> None:
    from tessera.live.executors.ray.executor import RayExecutor

    state, work = tmp_path / "state", tmp_path / "state-work"
    write_config(state)
    cluster = load_cluster("v100:2,t4:2", 2)
    svc = LiveService(Store(state / "state.db"),
                      RayExecutor(cluster, None, work / "runs", grace_s=1.0, state_dir=state),
                      cluster,
                      load_tenancy(state), "fifo", work,
                      ServiceOptions(scheduler=SchedulerSettings(mixed_gangs=True), period_s=0.5,
                                     poll_s=0.1, grace_s=1.0))
    svc.start()
    try:
        out = tmp_path / "env"
        out.mkdir()
        jid = svc.submit(parse_request(
            f"name: wide\nqueue: team-a\ngpus: 3\n"
            f"command: [{sys.executable}, -c, \"{ENV_DUMP}\", {out}]"), ADMIN).job_id
        wait_for(lambda: _final(svc, jid), 60, "the mixed gang")
        rec = svc.store.get(jid)
        assert rec is not None and rec.state.value == "succeeded"
        envs = [json.loads((out / f"{r}.json").read_text()) for r in range(3)]
        assert sorted(e["TESSERA_FLAVOR"] for e in envs) == ["T4", "V100-16GB", "V100-16GB"]
        assert {e["TESSERA_GANG_FLAVORS"] for e in envs} == {"T4+V100-16GB"}
    finally:
        svc.stop()
        EmbeddedHead(state).stop()


def test_a_flavor_no_node_offers_waits_and_others_run_and_keep_their_logs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A head offering only V100s: a T4 job is unplaceable (pending, reason, no retry) while a
    V100 job runs; the V100 job's output is read through its host, then from its exit record
    once its host has forgotten the rank."""
    from tessera.live.executors.ray.executor import RayExecutor
    from tests.live.ray_nodes import RayNodes

    nodes = RayNodes()
    state = tmp_path / "state"
    write_config(state)
    cluster = load_cluster("v100:2,t4:2", 2)
    try:
        nodes.add_head(2, {"accelerator_type:V100": 1.0})
        from tessera.live.executors.ray.cluster import use_token_file

        monkeypatch.setenv("RAY_AUTH_MODE", "token")  # restored afterwards
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(nodes.token_file))
        use_token_file(nodes.token_file)
        ex = RayExecutor(cluster, nodes.address, state / "runs", grace_s=1.0)
        svc = LiveService(Store(state / "state.db"), ex, cluster, load_tenancy(state), "fifo",
                          state, ServiceOptions(period_s=0.5, poll_s=0.1, grace_s=1.0))
        svc.start()
        try:
            t4 = svc.submit(parse_request("name: t4\nqueue: team-a\nflavors: [t4]\n"
                                          "command: 'true'"), ADMIN).job_id
            v100 = svc.submit(parse_request(
                "name: v\nqueue: team-b\nflavors: [v100]\n"
                "command: echo hello from $RANK on $CUDA_VISIBLE_DEVICES"), ADMIN).job_id
            wait_for(lambda: _final(svc, v100), 120, "the V100 job")
            wait_for(lambda: "no Ray node offers accelerator_type:T4" in
                     (svc.store.get(t4).reason or ""), 60, "the T4 job's reason")  # type: ignore
            rec = svc.store.get(t4)
            assert rec is not None and rec.state.value == "pending" and rec.attempts == 0
            wait_for(lambda: not svc.store.allocations(), 30, "the V100 run's release")
            # The host has forgotten the rank and its KV record is pruned: the log below comes
            # from the exit record the service kept.
            wait_for(lambda: _kv_records() == [], 30, "the run's records to be pruned")
            assert not [k for k in ex.hosts.held() if k[0] == v100]
            chunk = ex.read_log(v100, 1, 0, 0, 4096)
            assert chunk is not None and chunk.text.startswith("hello from 0 on ")
        finally:
            svc.stop()
    finally:
        nodes.stop()
