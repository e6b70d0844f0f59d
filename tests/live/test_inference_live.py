"""Issue 36, part 4: inference services in ``tessera serve`` on (fake) MIG slices.

Two services run their replicas on fake MIG slices (:class:`FakeDevices`, the real placement
rules); one's rate doubles, the manager re-plans with :func:`tessera.share.replan.replan` and
applies the Transition create-first, so no service ever has fewer replicas running than before.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tessera.live.executors.base import LaunchSpec  # noqa: F401  (the field the replicas use)
from tessera.live.inference.devices import FakeDevices
from tessera.live.inference.manager import InferenceManager, ServiceForbidden, ServiceRefused
from tessera.live.inference.spec import ServiceSpec, parse_service
from tessera.live.service import LiveService
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service, wait_for

ADMIN = Principal("admin", None)
TEAM_A = Principal("a", "team-a")
TEAM_B = Principal("b", "team-b")
#: A replica: prints the slice it was given, then serves (sleeps) until stopped.
REPLICA = [sys.executable, "-c",
           "import os, time; print('devices', os.environ.get('CUDA_VISIBLE_DEVICES'), "
           "os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'), flush=True); time.sleep(600)"]


def _service(tmp_path: Path, gpus: int = 2, start: bool = True
             ) -> tuple[LiveService, FakeDevices]:
    svc = make_service(tmp_path / "state", cluster=f"a100-80gb:{gpus}", gpus_per_server=gpus,
                       start=False)
    fake = FakeDevices(tmp_path / "fake-gpus.json", "A100-80GB", gpus)
    svc.inference = InferenceManager(svc, fake, check_s=0.05)
    if start:
        svc.start()
    return svc, fake


def _spec(name: str, model: str, rate: float, queue: str = "team-a",
          slo_ms: float = 100) -> ServiceSpec:
    return ServiceSpec(name, model, slo_ms, rate, tuple(REPLICA), queue)


def _running(svc: LiveService, service: str) -> list[str]:
    """The MIG UUIDs of the service's replicas whose runs are running now."""
    m = svc.inference
    assert m is not None
    return [r.mig_uuid for r in m.book.replicas(service) if r.status == "running"
            and svc.executor.status(r.replica_id, r.run).state == "running"]


def _printed(svc: LiveService, service: str) -> set[str]:
    """What the service's replicas printed as their CUDA_VISIBLE_DEVICES."""
    m = svc.inference
    assert m is not None
    out = set()
    for r in m.book.replicas(service):
        chunk = svc.executor.read_log(r.replica_id, r.run, 0, 0, 4096)
        if chunk is not None:
            out |= {line.split()[1] for line in chunk.text.splitlines()
                    if line.startswith("devices")}
    return out


def _settled(svc: LiveService, plan_replicas: dict[str, int]) -> bool:
    return all(len(_running(svc, s)) == n for s, n in plan_replicas.items())


@pytest.mark.slow
def test_two_services_on_fake_mig_and_a_rate_that_doubles(tmp_path: Path) -> None:
    svc, fake = _service(tmp_path)
    m = svc.inference
    assert m is not None
    try:
        m.submit(_spec("ranker", "resnet50", 400), TEAM_A)
        m.submit(_spec("tagger", "vgg16", 100, queue="team-b"), TEAM_B)
        wait_for(lambda: _settled(svc, {"ranker": 1, "tagger": 1}), 30, "both replicas")
        uuids = {i["uuid"] for g in fake.state()["gpus"] for i in g["instances"]}  # type: ignore
        assert set(_running(svc, "ranker")) | set(_running(svc, "tagger")) <= uuids
        wait_for(lambda: _printed(svc, "ranker") and _printed(svc, "tagger"), 10, "output")
        assert _printed(svc, "ranker") == set(_running(svc, "ranker"))  # its own slice
        assert all(u.startswith("MIG-") for u in _printed(svc, "tagger"))
        before = {s: len(_running(svc, s)) for s in ("ranker", "tagger")}
        # one's rate doubles: watch that no service drops below its replicas in flight
        low: list[str] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                for s, n in before.items():
                    if len(_running(svc, s)) < n:
                        low.append(s)
                time.sleep(0.02)

        t = threading.Thread(target=watch)
        t.start()
        try:
            m.set_rate("ranker", 800, TEAM_A)
            wait_for(lambda: len(_running(svc, "ranker")) == 2, 30, "the new replica")
            wait_for(lambda: m.book.state("dirty") == "0", 10, "the plan")
        finally:
            stop.set()
            t.join()
        assert not low, f"services below their replicas in flight: {low}"
        kinds = sorted(str(i["kind"]) for g in fake.state()["gpus"] for i in g["instances"])
        assert len(kinds) == 3  # a new slice for the ranker, the old ones kept
        assert len(set(_running(svc, "ranker"))) == 2  # two different slices
        kinds_ev = [e.kind for e in m.book.events()]
        assert "planned" in kinds_ev and kinds_ev.count("slice-created") == 3
    finally:
        svc.stop()


@pytest.mark.slow
def test_a_failed_replica_is_restarted_and_a_restart_loses_nothing(tmp_path: Path) -> None:
    svc, fake = _service(tmp_path)
    m = svc.inference
    assert m is not None
    try:
        m.submit(_spec("ranker", "resnet50", 400), TEAM_A)
        wait_for(lambda: len(_running(svc, "ranker")) == 1, 30, "the replica")
        r = m.book.replicas("ranker")[0]
        d = svc.executor.run_dir(r.replica_id, r.run)  # type: ignore[attr-defined]
        wait_for(lambda: (d / "ranks.json").exists(), 10, "ranks.json")
        for pid in json.loads((d / "ranks.json").read_text()):  # the replica's guardian dies
            os.kill(int(pid), signal.SIGKILL)
        wait_for(lambda: any(e.kind == "replica-restarted" for e in m.book.events("ranker")),
                 30, "the restart")
        wait_for(lambda: len(_running(svc, "ranker")) == 1, 30, "the replica again")
        assert m.book.replicas("ranker")[0].run == 2
    finally:
        svc.stop()
    layout = fake.state()
    # a new service process on the same state: the service, its replica and slices are there
    svc2, fake2 = _service(tmp_path, start=False)
    assert svc2.inference is not None
    assert [s.name for s in svc2.inference.book.services()] == ["ranker"]
    assert fake2.state() == layout
    svc2.start()
    try:
        time.sleep(1.0)
        assert len(_running(svc2, "ranker")) == 1  # adopted, not started twice
        assert [e.kind for e in svc2.inference.book.events()].count("replica-started") == 1
    finally:
        svc2.stop()


def test_training_does_not_get_the_services_gpus(tmp_path: Path) -> None:
    svc, _fake = _service(tmp_path, gpus=2, start=False)
    m = svc.inference
    assert m is not None
    m.submit(_spec("ranker", "resnet50", 400), TEAM_A)
    m._plan(time.time())  # plan only: no replica is started
    assert m.held_devices() == {0}
    assert m.training_cluster().total_gpus == 1  # of 2: the services hold one
    svc.executor.close()


def test_quota_charges_mig_slices(tmp_path: Path) -> None:
    """A service's slices count against its queue's MIG quota (compute and memory slices)."""
    from dataclasses import replace

    from tessera.model.gpus import resolve_flavor
    from tessera.sched.core.mig_quota import MigQuota

    svc, _fake = _service(tmp_path, start=False)
    a100 = resolve_flavor("A100-80GB")
    svc.tenancy = replace(svc.tenancy, mig_quotas={
        "team-a": {a100: {"1g.10gb": MigQuota("1g.10gb", 2)}}})
    m = svc.inference
    assert m is not None
    m.submit(_spec("small", "resnet50", 50), TEAM_A)  # one 1g slice: fits (1, 1) of (2, 2)
    with pytest.raises(ServiceRefused, match=r"queue 'team-a' is over its MIG quota on "
                       r"A100-80GB: its services need .* compute"):
        m.submit(_spec("big", "resnet50", 400), TEAM_A)  # a 2g more: (3, 3) > (2, 2)
    with pytest.raises(ServiceRefused, match="over its MIG quota"):
        m.set_rate("small", 800, TEAM_A)  # 2g + 1g: (3, 3)
    m.submit(_spec("other", "resnet50", 400, queue="team-b"), TEAM_B)  # no MIG lines: not capped
    svc.executor.close()


def test_hostile_tenant(tmp_path: Path) -> None:
    """A tenant cannot put a service in another tenant's queue, see or change another's, or
    choose its replicas' GPU through the spec."""
    svc, _fake = _service(tmp_path, start=False)
    m = svc.inference
    assert m is not None
    with pytest.raises(ServiceForbidden, match="may submit only to queue 'team-a'"):
        m.submit(_spec("evil", "resnet50", 100, queue="team-b"), TEAM_A)
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "TESSERA_SERVICE"):
        with pytest.raises(Exception, match=f"env may not set {var}"):
            parse_service({"name": "x", "model": "resnet50", "slo_ms": 100, "rate_rps": 10,
                           "command": ["true"], "env": {var: "MIG-other"}}, "team-a")
    m.submit(_spec("mine", "resnet50", 100, queue="team-b"), TEAM_B)
    with pytest.raises(KeyError):
        m.set_rate("mine", 200, TEAM_A)
    with pytest.raises(KeyError):
        m.delete("mine", TEAM_A)
    svc.executor.close()


@pytest.mark.parametrize(("spec", "said"), [
    (_spec("x", "no-such-model", 100), "no-such-model"),
    (_spec("x", "resnet50", 100, slo_ms=0.5), "service 'x'"),
    (_spec("x", "resnet50", 1_000_000), r"infeasible: the services need .* GPUs at least"),
    (_spec("x", "resnet50", 100, queue="nope"), "unknown queue 'nope'"),
], ids=["model", "slo", "rate", "queue"])
def test_bad_services_are_refused(tmp_path: Path, spec: ServiceSpec, said: str) -> None:
    svc, _fake = _service(tmp_path, start=False)
    assert svc.inference is not None
    with pytest.raises(ServiceRefused, match=said):
        svc.inference.submit(spec, ADMIN)
    svc.executor.close()


@pytest.mark.slow
def test_a_freed_slice_moves_to_another_service(tmp_path: Path) -> None:
    """One service goes and another comes in one re-plan: the Transition reassigns the freed
    slice (no MIG change); the old replica stops first, then the new one starts on it."""
    svc, fake = _service(tmp_path, start=False)
    m = svc.inference
    assert isinstance(m, InferenceManager)

    def until(pred: Callable[[], bool], what: str) -> None:
        """Drive the manager's loop (this test runs no service loop) until ``pred`` holds."""
        def ticked() -> bool:
            m.tick(time.time())
            return pred()
        wait_for(ticked, 30.0, what)

    try:
        m.submit(_spec("ranker", "resnet50", 400), TEAM_A)
        m.submit(_spec("tagger", "vgg16", 100), TEAM_A)
        until(lambda: len(_running(svc, "ranker")) == len(_running(svc, "tagger")) == 1,
              "both replicas")
        tagger_slice = _running(svc, "tagger")[0]
        m.delete("tagger", TEAM_A)
        m.submit(_spec("dense", "densenet121", 100), TEAM_A)
        until(lambda: len(_running(svc, "dense")) == 1 and not m.book.replicas("tagger"),
              "the move")
        assert _running(svc, "dense") == [tagger_slice]  # the same MIG instance, reassigned
        kinds = [e.kind for e in m.book.events()]
        assert kinds.count("slice-created") == 2 and "slice-destroyed" not in kinds
        planned = [e.detail for e in m.book.events() if e.kind == "planned"]
        assert planned[-1].endswith("(1 reassign)")
        assert kinds.index("replica-stopped") < len(kinds) - 1 - kinds[::-1].index(
            "replica-started")  # stopped, then the new one started on the slot
        assert len(fake.state()["gpus"][0]["instances"]) == 2
    finally:
        for r in m.book.replicas():
            svc.executor.stop(r.replica_id, r.run, 1.0)
        svc.executor.close()


def test_no_permission_to_change_mig_is_an_event(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="a100-80gb:2", gpus_per_server=2,
                       start=False)
    m = InferenceManager(svc, FakeDevices(tmp_path / "g.json", "A100-80GB", 2,
                                          mig_allowed=False), check_s=0.0)
    m.submit(_spec("ranker", "resnet50", 400), TEAM_A)
    m.tick(time.time())
    errors = [e.detail for e in m.book.events() if e.kind == "device-error"]
    assert errors == ["cannot create 2g@0 on GPU 0: changing MIG geometry is not permitted here "
                      "(the service must run as root on a GPU with MIG mode on)"]
    assert not m.book.replicas()
    m.tick(time.time() + 1)  # said once, not at every pass
    assert [e.kind for e in m.book.events()].count("device-error") == 1
    svc.executor.close()


@pytest.mark.slow
def test_training_and_services_do_not_share_gpus(tmp_path: Path) -> None:
    """The services' GPU is not offered to training (a 2-GPU job waits on the 2-GPU node), and
    a plan that needs GPUs training holds waits for them."""
    from tessera.live.spec import parse_request

    svc, _fake = _service(tmp_path)
    m = svc.inference
    assert isinstance(m, InferenceManager)
    try:
        m.submit(_spec("ranker", "resnet50", 400), TEAM_A)
        wait_for(lambda: len(_running(svc, "ranker")) == 1, 30, "the replica")
        job = "queue: team-a\ncommand: sleep 30\n"
        rec = svc.submit(parse_request(f"name: big\ngpus: 2\n{job}"), ADMIN)
        small = svc.submit(parse_request(f"name: one\ngpus: 1\n{job}"), ADMIN)
        wait_for(lambda: svc.store.get(small.job_id).state.value == "running",  # type: ignore
                 20, "the 1-GPU job")
        time.sleep(1.0)
        assert svc.store.get(rec.job_id).state.value == "pending"  # type: ignore[union-attr]
        # training now holds the other GPU: a second service must wait, with an event
        m.submit(_spec("tagger", "vgg16", 2000, queue="team-b"), TEAM_B)
        wait_for(lambda: any(e.kind == "plan-refused" for e in m.book.events()), 10, "refusal")
        said = next(e.detail for e in m.book.events() if e.kind == "plan-refused")
        assert said.startswith("the plan needs 2 GPUs; 1 of node ")
        assert said.endswith("are free of training (waiting for more)")
        assert m.held_devices() == {0}
    finally:
        svc.stop()


def test_a_replan_onto_a_second_gpu_keeps_the_first(tmp_path: Path) -> None:
    """The Transition's kept GPU keeps its physical GPU; a GPU it adds takes a free one."""
    svc, _fake = _service(tmp_path, start=False)
    m = svc.inference
    assert isinstance(m, InferenceManager)
    m.submit(_spec("ranker", "resnet50", 400), TEAM_A)
    m._plan(1.0)
    first = m.applied()
    assert first.devices == (0,)
    m.set_rate("ranker", 3000, TEAM_A)
    m._plan(2.0)
    second = m.applied()
    assert second.devices == (0, 1)
    assert set(first.slots()) <= set(second.slots())  # nothing torn down on GPU 0
    svc.executor.close()


def test_min_replicas_raises_the_planned_rate(tmp_path: Path) -> None:
    svc, _fake = _service(tmp_path, start=False)
    m = svc.inference
    assert isinstance(m, InferenceManager)
    spec = _spec("ranker", "resnet50", 50)
    m.submit(ServiceSpec(*[getattr(spec, f) for f in ("name", "model", "slo_ms", "rate_rps",
                                                      "command", "queue")], 3), TEAM_A)
    m._plan(1.0)
    assert sum(seg.procs for seg in m.applied().slots().values()) >= 3
    svc.executor.close()


def test_a_failing_replica_is_restarted_ever_more_slowly() -> None:
    from tessera.live.inference.apply import restart_delay_s

    assert [restart_delay_s(n) for n in (0, 1, 2, 6, 50)] == [0.5, 1.0, 2.0, 30.0, 30.0]
