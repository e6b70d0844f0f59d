"""Builders for live-service tests: a state dir with known tokens, a service, waiting."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

from tessera.live.executors.local import LocalExecutor
from tessera.live.layout import default_work_dir
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.store import Store
from tessera.live.tenancy import CONFIG_NAME, hash_token, load_tenancy
from tessera.model.cluster import load_cluster
from tessera.sched.core.settings import SchedulerSettings

ADMIN = "admin-token-for-tests"
TEAM_A = "team-a-token"
TEAM_B = "team-b-token"


def write_config(state_dir: Path, queues: list[dict[str, object]] | None = None) -> None:
    """A config with queues team-a and team-b (4 GPUs each, may borrow) and three tokens, in a
    private state dir (0700, the file 0600) as ``tessera serve`` insists on."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    state_dir.chmod(0o700)
    cfg = {
        "queues": queues or [
            {"name": "team-a", "nominal_gpus": 4, "borrowing_limit_gpus": 4},
            {"name": "team-b", "nominal_gpus": 4, "borrowing_limit_gpus": 4},
        ],
        "tokens": [
            {"name": "admin", "sha256": hash_token(ADMIN), "queue": None},
            {"name": "a", "sha256": hash_token(TEAM_A), "queue": "team-a"},
            {"name": "b", "sha256": hash_token(TEAM_B), "queue": "team-b"},
        ],
    }
    path = state_dir / CONFIG_NAME
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)


def make_service(state_dir: Path, cluster: str = "v100:4,t4:4", policy: str = "fifo",
                 grace_s: float = 2.0, queues: list[dict[str, object]] | None = None,
                 gpus_per_server: int = 4, mixed_gangs: bool = False,
                 settings: SchedulerSettings | None = None, start: bool = True,
                 work_dir: Path | None = None) -> LiveService:
    """A service with the local executor, started unless ``start`` is false (stop a started
    one with ``svc.stop()``); runs and checkpoints go under ``work_dir`` (default: the
    state dir's sibling ``<state>-work``, as ``tessera serve`` lays it out)."""
    write_config(state_dir, queues)
    work = work_dir or default_work_dir(state_dir)
    svc = LiveService(
        Store(state_dir / "state.db"), LocalExecutor(work / "runs", grace_s=grace_s),
        load_cluster(cluster, gpus_per_server), load_tenancy(state_dir), policy, work,
        ServiceOptions(scheduler=settings or SchedulerSettings(mixed_gangs=mixed_gangs),
                       period_s=0.5, poll_s=0.05, grace_s=grace_s))
    if start:
        svc.start()
    return svc


def wait_for(pred: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def wait_for_job(svc: LiveService, job_id: str, state: str = "succeeded",
                 timeout_s: float = 20.0) -> None:
    """Wait until the job reaches ``state``; fail at once if it ends in another final state
    (succeeded or cancelled), and on any failure say where the job stood and its last events,
    so a slow job and a broken one read differently in the log."""
    final = {"succeeded", "cancelled"}
    deadline = time.monotonic() + timeout_s
    now = ""
    while time.monotonic() < deadline:
        rec = svc.store.get(job_id)
        now = rec.state.value if rec is not None else "unknown"
        if now == state:
            return
        if now in final:
            break
        time.sleep(0.05)
    events = "\n".join(f"  {e.ts_s:.2f} {e.kind} {e.from_state}->{e.to_state} {e.detail}"
                       for e in svc.store.events(job_id)[-20:])
    why = f"it ended {now}" if now in final else f"timed out after {timeout_s} s, still {now}"
    raise AssertionError(f"job {job_id} never reached {state}: {why}; its last events:\n{events}")


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class ServerThread:
    """uvicorn serving a service's API on a free loopback port, in a thread."""

    def __init__(self, svc: LiveService) -> None:
        import threading

        import uvicorn

        from tessera.live.api import create_app
        from tessera.live.executors.base import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(svc), host="127.0.0.1",
                                                    port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, 10, "uvicorn to start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serving(url: str) -> bool:
    """Whether a service answers ``/healthz`` at ``url`` (for ``wait_for``)."""
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
