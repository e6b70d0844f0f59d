"""A plain Python job with no ``job_type`` tells the live service how fast it goes.

The job calls ``tessera.progress(steps=...)`` in a loop (it reaches the service's API over
loopback with its run's token); the service's events show the measured rate, and the next
decision reads it: the oracle the service built, and the running job's speed in the round's
snapshot. The two-flavor test (issue 35, "Done when") runs one job on a T4 and then on a
V100 and checks that the service learned both speeds and ranks the flavors by them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import tessera
from tessera.cli.job_text import speeds_text
from tessera.live import learned
from tessera.live.learned import speeds_json
from tessera.live.progress import RunRate
from tessera.live.service import LiveService
from tessera.live.spec import validate_request
from tessera.live.tenancy import Principal
from tessera.model.gpus import resolve_flavor
from tests.live.helpers import ServerThread, make_service, wait_for

ADMIN = Principal("admin", None)
SRC = str(Path(tessera.__file__).parents[1])  # the job imports these very sources
#: A job that reports STEPS_PER_S[flavor] steps a second until the file ``stop<run>`` exists
#: (then run 1 fails, so that the job is retried), or for ever.
SCRIPT = """
import os, sys, time
import tessera
rate = 40.0 if os.environ["TESSERA_FLAVOR"].lower().startswith("v100") else 10.0
run, t0 = os.environ["TESSERA_RUN"], time.monotonic()
while not os.path.exists(os.path.join(sys.argv[1], "stop" + run)):
    tessera.progress(steps=rate * (time.monotonic() - t0))
    time.sleep(0.1)
sys.exit(3 if run == "1" else 0)
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LiveService, Path]]:
    svc = make_service(tmp_path / "state", cluster="v100:1,t4:1", gpus_per_server=1,
                       start=False)
    srv = ServerThread(svc)
    svc.opts = replace(svc.opts, progress_url=srv.url)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    flags = tmp_path / "flags"
    flags.mkdir()
    svc.start()
    try:
        yield svc, flags
    finally:
        (flags / "stop1").touch()
        (flags / "stop2").touch()
        svc.stop()
        srv.stop()

V100 = resolve_flavor("V100-16GB")


def _submit(svc: LiveService, flags: Path, **fields: object) -> str:
    script = flags.parent / "job.py"
    req = validate_request({"name": "learner", "queue": "team-a", "gpus": 1,
                            "command": [sys.executable, str(script), str(flags)],
                            "env": {"PYTHONPATH": SRC}, **fields})
    return svc.submit(req, ADMIN).job_id


def _events(svc: LiveService, jid: str) -> list[str]:
    return [e.detail for e in svc.store.events(jid)]


def _measured(svc: LiveService, jid: str, flavor: str) -> bool:
    return any(d.startswith("measured ") and f" on {flavor} (" in d for d in _events(svc, jid))


def test_the_service_learns_a_jobs_speed_from_its_reports(
        served: tuple[LiveService, Path]) -> None:
    svc, flags = served
    jid = _submit(svc, flags, flavors=["t4"], total_steps=100000)
    wait_for(lambda: _measured(svc, jid, "T4"), 20, "a measured rate in the job's events")
    (line,) = [d for d in _events(svc, jid) if d.startswith("measured ")]
    rate = float(line.split()[1])
    # the service times reports by when they arrive, so a loaded machine's delivery jitter
    # shows; 10 vs the 40 of the other flavor is what the scheduler must tell apart
    assert rate == pytest.approx(10.0, rel=0.3) and line.endswith("on T4 (prior 1)"), line
    spec = svc.store.get(jid).job.spec  # type: ignore[union-attr]
    assert svc.oracle.rate(spec, resolve_flavor("t4"), True) == pytest.approx(rate, rel=0.01)
    # the next round's snapshot runs the job at its measured speed (its progress rate)
    rounds = svc.rounds
    svc.poke()
    wait_for(lambda: svc.rounds > rounds, 10, "another round")
    assert [r for _s, r in svc._held] == [pytest.approx(rate, rel=0.1)]
    # tessera job: measured vs predicted per flavor
    shown = speeds_text(speeds_json(svc, svc.store.get(jid)))  # type: ignore[arg-type]
    rate = svc.progress.measured(jid)[resolve_flavor('T4')]
    assert shown == f"T4 measured {rate:.3g} steps/s (predicted 1)"


def test_a_job_that_never_reports_is_told_once_it_keeps_its_prior(
        served: tuple[LiveService, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    svc, flags = served
    monkeypatch.setattr(learned, "SILENT_S", 0.3)
    jid = _submit(svc, flags, flavors=["t4"], command="sleep 30")
    said = "no progress reports: scheduling with the prior speed (1 steps/s on T4)"
    wait_for(lambda: any(d.startswith(said) for d in _events(svc, jid)), 10, "the notice")
    rounds = svc.rounds
    svc.poke()
    wait_for(lambda: svc.rounds > rounds + 1, 10, "two more rounds")
    assert sum(d.startswith(said) for d in _events(svc, jid)) == 1
    assert svc.oracle.rate(svc.store.get(jid).job.spec,  # type: ignore[union-attr]
                           resolve_flavor("t4"), True) == 1.0


@pytest.mark.slow
def test_a_job_on_two_flavors_is_ranked_by_its_measured_speeds(
        served: tuple[LiveService, Path]) -> None:
    svc, flags = served
    blocker = _submit(svc, flags, flavors=["v100"], command="sleep 120")
    wait_for(lambda: svc.store.get(blocker).state.value == "running",  # type: ignore[union-attr]
             what="the blocker to hold the V100")
    jid = _submit(svc, flags, flavors=["v100", "t4"], max_retries=1, total_steps=100000)
    wait_for(lambda: _measured(svc, jid, "T4"), 20, "the T4 rate")
    svc.cancel(blocker, ADMIN)
    wait_for(lambda: svc.store.get(blocker).final, what="the V100 freed")  # type: ignore[union-attr]
    # run 1 fails; its retry goes to the V100, now free: the T4's measured 10 steps/s lifts
    # the V100's prior (1 step/s, like the T4's) to 10 too, and the job lists the V100 first
    (flags / "stop1").touch()
    wait_for(lambda: _measured(svc, jid, "V100-16GB"), 90, "the V100 rate")  # (slow CI)
    spec = svc.store.get(jid).job.spec  # type: ignore[union-attr]
    v100, t4 = resolve_flavor("v100"), resolve_flavor("t4")
    assert svc.oracle.rate(spec, v100, True) == pytest.approx(40.0, rel=0.15)
    assert svc.oracle.rate(spec, t4, True) == pytest.approx(10.0, rel=0.15)
    assert svc.oracle.fastest_first(spec) == (v100, t4)
    assert svc.progress.measured(jid).keys() == {v100, t4}


def test_a_node_slow_for_every_job_gets_no_new_gang_until_speed_returns(
        tmp_path: Path) -> None:
    """Two jobs of two queues measured 50 % slower on node v100-0002 than on their other
    node: the node is marked slow (an event naming it and the evidence), a new job waits
    rather than go there, and a run at normal speed there clears it."""
    svc = make_service(tmp_path / "state", cluster="v100:3", gpus_per_server=1)
    svc.slow_nodes.hold_s = 0.0
    try:
        a, b = (_submit_sleep(svc, q) for q in ("team-a", "team-b"))  # two tenants agree
        for j in (a, b):
            wait_for(lambda j=j: svc.store.get(j).state.value == "running",  # type: ignore[union-attr]
                     what="the jobs to run")
        slow = next(n.node_id for n in svc.cluster.nodes if all(
            n.node_id not in _nodes(svc, j) for j in (a, b)))
        now = svc.clock()
        for k, j in enumerate((a, b)):  # earlier runs elsewhere at 10, now 5 steps/s on `slow`
            svc.progress._keep(j, RunRate(7, V100, ("elsewhere",), 10.0 + k, 10, 0.0, now))
            svc.progress._keep(j, RunRate(8, V100, (slow,), 5.0, 10, now - 1, now))
        svc.poke()
        wait_for(lambda: any(e.kind == "slow-node" for e in svc.store.events()), 10, "the mark")
        (mark,) = [e.detail for e in svc.store.events() if e.kind == "slow-node"]
        assert mark.startswith(f"node {slow} marked slow: every job there runs more than 30%")
        c = _submit_sleep(svc)
        rounds = svc.rounds
        wait_for(lambda: svc.rounds > rounds + 1, 10, "two rounds")
        assert svc.store.get(c).state.value == "pending"  # type: ignore[union-attr]
        svc.progress._keep(a, RunRate(9, V100, (slow,), 10.5, 10, now, svc.clock()))
        svc.poke()
        wait_for(lambda: svc.store.get(c).state.value == "running",  # type: ignore[union-attr]
                 what="the new job to take the node back")
        assert _nodes(svc, c) == {slow}
        assert any(e.detail.startswith(f"node {slow} no longer slow")
                   for e in svc.store.events())
    finally:
        svc.stop()


def _submit_sleep(svc: LiveService, queue: str = "team-a") -> str:
    req = validate_request({"name": "s", "queue": queue, "gpus": 1, "command": "sleep 60"})
    return svc.submit(req, ADMIN).job_id


def _nodes(svc: LiveService, jid: str) -> set[str]:
    a = svc.store.allocation(jid, 1)
    return set() if a is None else {n for n, _c in a.placement.gpus_by_node}


def test_a_restarted_service_schedules_with_the_rates_it_had_learned(tmp_path: Path) -> None:
    state = tmp_path / "state"
    svc = make_service(state, cluster="v100:1,t4:1", gpus_per_server=1)
    try:
        jid = _submit_sleep(svc)
        wait_for(lambda: svc.store.get(jid).state.value == "running",  # type: ignore[union-attr]
                 what="the job to run")
        # the runner has claimed its run (its marker): a restart adopts it, never "absent"
        wait_for(lambda: (svc.executor.run_dir(jid, 1) / "marker").exists(),  # type: ignore[attr-defined]
                 what="the runner's marker")
        node = next(iter(_nodes(svc, jid)))
        flavor = svc.store.allocation(jid, 1).placement.flavor  # type: ignore[union-attr]
        now = svc.clock()
        svc.progress._keep(jid, RunRate(1, flavor, (node,), 7.5, 5, now - 10, now))
    finally:
        svc.stop()
    again = make_service(state, cluster="v100:1,t4:1", gpus_per_server=1)
    try:
        spec = again.store.get(jid).job.spec  # type: ignore[union-attr]
        again.poke()
        wait_for(lambda: again.oracle.rate(spec, flavor, True) == 7.5, 20,
                 f"the kept rate in the new service's oracle ({_events(again, jid)})")
        assert any(d == f"measured 7.5 steps/s on {flavor.short} (prior 1)"
                   for d in _events(again, jid))
        again.cancel(jid, ADMIN)
    finally:
        again.stop()
