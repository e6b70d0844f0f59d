"""Non-blocking launches: a run the executor is still starting, or cannot place.

The executor here is the local one with two twists driven by the job's name: ``slow-*`` runs
report ``starting`` until released by the test, ``nowhere-*`` runs are ``unplaceable`` (what
the Ray executor says when no node offers the flavor).
"""

from __future__ import annotations

from pathlib import Path

from tessera.live.executors.base import LaunchSpec, RunStatus
from tessera.live.executors.local import LocalExecutor
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service, wait_for

ADMIN = Principal("admin", None)
NOWHERE = "no Ray node offers accelerator_type:A100 (2 GPUs in one bundle)"


class PickyExecutor(LocalExecutor):
    """Local runs, except the ``slow-`` and ``nowhere-`` jobs (see the module docstring)."""

    def __init__(self, runs_dir: Path) -> None:
        super().__init__(runs_dir, grace_s=1.0)
        self.kinds: dict[str, str] = {}
        self.launches: list[str] = []
        self.hold = True

    def launch(self, spec: LaunchSpec) -> None:
        self.launches.append(spec.job_id)
        name = dict(spec.env).get("KIND", "")
        self.kinds[spec.job_id] = name
        if name == "":
            super().launch(spec)

    def status(self, job_id: str, run: int) -> RunStatus:
        kind = self.kinds.get(job_id, "")
        if kind == "nowhere":
            return RunStatus("unplaceable", detail=NOWHERE)
        if kind == "slow":
            return RunStatus("starting") if self.hold else RunStatus("exited", 0)
        return super().status(job_id, run)


def _service(tmp_path: Path) -> tuple[LiveService, PickyExecutor]:
    svc = make_service(tmp_path / "state", start=False)
    ex = PickyExecutor(tmp_path / "state" / "runs")
    svc.executor = ex
    svc.start()
    return svc, ex


def _job(svc: LiveService, name: str, kind: str, gpus: int = 1) -> str:
    env = f"env: {{KIND: {kind}}}\n" if kind else ""
    return svc.submit(parse_request(f"name: {name}\nqueue: team-a\ngpus: {gpus}\n{env}"
                                    "command: 'true'"), ADMIN).job_id


def test_an_unplaceable_run_waits_without_a_retry_and_names_what_is_missing(
        tmp_path: Path) -> None:
    svc, ex = _service(tmp_path)
    try:
        bad = _job(svc, "nowhere", "nowhere", gpus=2)
        wait_for(lambda: NOWHERE in (svc.store.get(bad).reason or ""), 20,  # type: ignore
                 "the unplaceable reason")
        ok = _job(svc, "fine", "")
        wait_for(lambda: svc.store.get(ok).state.value == "succeeded", 20,  # type: ignore
                 "the other job to finish")
        rec = svc.store.get(bad)
        assert rec is not None and rec.state.value == "pending" and rec.attempts == 0
        assert "trying again in 5 s" in rec.reason
        assert svc.store.allocations(job_id=bad) == []  # its GPUs are free again
        assert ex.launches.count(bad) == 1  # the backoff keeps it out of the next rounds
    finally:
        svc.stop()


def test_a_run_still_starting_holds_its_gpus_and_does_not_block_others(
        tmp_path: Path) -> None:
    svc, ex = _service(tmp_path)
    try:
        slow = _job(svc, "slow", "slow")
        wait_for(lambda: slow in ex.launches, 20, "the slow launch")
        ok = _job(svc, "fine", "")
        wait_for(lambda: svc.store.get(ok).state.value == "succeeded", 20,  # type: ignore
                 "the job behind it")
        rec = svc.store.get(slow)
        assert rec is not None and rec.state.value == "admitted"
        [a] = svc.store.allocations(job_id=slow)
        assert a.status == "planned"  # held, not yet running
        ex.hold = False
        wait_for(lambda: svc.store.get(slow).state.value == "succeeded", 20,  # type: ignore
                 "the slow job to be confirmed and finish")
    finally:
        svc.stop()
