"""The live service decides on the simulator's cadence, from the same settings.

These tests drive the loop's cadence step by step with a chosen clock (no loop thread, no
runs launched), and read the allocations the rounds journal.
"""

from __future__ import annotations

from pathlib import Path

from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.sched.settings import SchedulerSettings
from tests.live.helpers import make_service

ADMIN = Principal("admin", None)


def _service(tmp_path: Path, policy: str, **settings: object) -> LiveService:
    return make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, policy=policy,
                        settings=SchedulerSettings.model_validate(settings), start=False)


def _submit(svc: LiveService, name: str, gpus: int) -> str:
    req = parse_request(f"name: {name}\nqueue: team-a\ngpus: {gpus}\ncommand: sleep 600")
    return svc.submit(req, ADMIN).job_id


def _planned(svc: LiveService) -> set[str]:
    return {a.job_id for a in svc.store.allocations(("planned",))}


def test_round_based_policy_decides_every_round_s(tmp_path: Path) -> None:
    svc = _service(tmp_path, "max_min_fairness", round_s=100.0)
    assert svc.uses_rounds
    a = _submit(svc, "a", 1)
    acted, nxt = svc._round_cadence(1000.0, True, None)  # idle until now: a round at once
    assert acted and nxt == 1100.0 and _planned(svc) == {a}
    b = _submit(svc, "b", 1)  # a change between rounds leaves the free GPU idle ...
    acted, nxt = svc._round_cadence(1050.0, True, nxt)
    assert not acted and nxt == 1100.0 and _planned(svc) == {a}
    acted, nxt = svc._round_cadence(1100.0, False, nxt)  # ... until the next round
    assert acted and nxt == 1200.0 and _planned(svc) == {a, b}


def test_fill_between_rounds_places_waiting_jobs_at_once(tmp_path: Path) -> None:
    svc = _service(tmp_path, "max_min_fairness", round_s=100.0, fill_between_rounds=True)
    a = _submit(svc, "a", 1)
    _acted, nxt = svc._round_cadence(1000.0, True, None)
    state = svc.policy_state
    b = _submit(svc, "b", 1)
    acted, nxt2 = svc._round_cadence(1050.0, True, nxt)
    assert acted and nxt2 == nxt and _planned(svc) == {a, b}
    assert svc.policy_state is state  # a fill step leaves the policy's memory alone


def test_rounds_stop_when_idle_and_snapshots_carry_the_round_length(tmp_path: Path) -> None:
    svc = _service(tmp_path, "hetero_srpt", mode="rounds", round_s=60.0)
    assert svc.uses_rounds
    acted, nxt = svc._round_cadence(10.0, True, None)
    assert acted and nxt is None and svc.idle  # nothing to decide: no round is scheduled
    seen: list[float | None] = []
    decide = svc.policy.rank

    def spy(ctx):  # type: ignore[no-untyped-def]
        seen.append(ctx.snapshot.round_s)
        return decide(ctx)

    svc.policy.rank = spy  # type: ignore[method-assign]
    _submit(svc, "a", 1)
    acted, nxt = svc._round_cadence(20.0, True, None)
    assert acted and nxt == 80.0 and seen and set(seen) == {60.0}


def test_event_driven_policy_keeps_event_cadence(tmp_path: Path) -> None:
    svc = _service(tmp_path, "fifo")
    assert not svc.uses_rounds
    svc2 = _service(tmp_path / "two", "fifo", mode="rounds")
    assert svc2.uses_rounds
