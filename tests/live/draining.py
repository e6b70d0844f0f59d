"""Test executors whose stopped runs keep running -- their grace period -- until a test says
they exited, and the launch-then-cancel sequence the quota and launch-gate tests start from."""

from __future__ import annotations

from tessera.live.executors.base import LaunchSpec, RunStatus
from tessera.live.executors.gpu_sharing import Mechanism
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal


class DrainingExecutor:
    """Runs every launch at once; a stopped run drains until ``(job, run)`` is in ``exited``."""

    name = "draining"

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.exited: set[tuple[str, int]] = set()

    def launch(self, spec: LaunchSpec) -> None:
        self.launched.append(spec.job_id)

    def status(self, job_id: str, run: int) -> RunStatus:
        if (job_id, run) in self.exited:
            return RunStatus("exited", exit_code=143, stopped=True)
        return RunStatus("running" if job_id in self.launched else "absent")

    def stop(self, job_id: str, run: int, grace_s: float) -> bool:
        return True

    def release(self, job_id: str, run: int) -> None:
        pass

    def read_log(self, job_id: str, run: int, rank: int, offset: int,
                 limit_bytes: int) -> None:
        return None

    def close(self) -> None:
        pass


class SharingDrainingExecutor(DrainingExecutor):
    """:class:`DrainingExecutor` that may put two runs on one GPU set (time-slicing)."""

    name = "sharing-draining"
    shares_gpus = True

    def sharing_mechanism(self, host: tuple[str, int]) -> Mechanism:
        return Mechanism("time-slicing")


def launch_then_cancel(svc: LiveService, ex: DrainingExecutor, job_text: str,
                       who: Principal) -> str:
    """Submit ``job_text`` as ``who``, launch it (rounds at 10 s) and cancel it at 11 s: its
    run is left stopping, holding what it held, until the test marks it exited."""
    first = svc.submit(parse_request(job_text), who).job_id
    svc.round(10.0)
    svc.act(10.0)
    svc.act(10.5)
    assert ex.launched == [first]
    svc.cancel(first, who)
    svc.act(11.0)
    assert [a.job_id for a in svc.store.allocations(("stopping",))] == [first]
    return first
