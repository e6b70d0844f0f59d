"""Kill the service at random points of a 50-job workload: every job runs exactly once.

The service runs as a real process (``python -m tessera.cli serve``). It is killed with
SIGKILL at random moments, and made to exit hard at the three crash points between "written to
the store" and "acted on" (:mod:`tessera.live.faults`); after each death it is restarted on the
same state directory. Each job's command appends its id to one file, so the file shows how many
times each job really ran. At the end: every job succeeded, every id appears exactly once, and
the event log replays to each job's stored state through valid lifecycle edges only.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tessera.live.executors.base import free_port
from tessera.live.store import Store
from tessera.model.jobs import VALID_TRANSITIONS, JobState
from tests.live.helpers import ADMIN, auth, write_config

SRC = Path(__file__).resolve().parents[2] / "src"
# After a first SIGKILL right after the submissions, the service dies once per entry.
CRASHES = ["after-journal:2", "before-exit-recorded:1", "sigkill", "after-launch:2", "sigkill"]


def _start(state: Path, port: int, crash: str | None,
           executor: tuple[str, ...] = ("--executor", "local")) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TESSERA_LIVE_CRASH", None)
    if crash and crash != "sigkill":
        env["TESSERA_LIVE_CRASH"] = crash
    return subprocess.Popen(
        [sys.executable, "-m", "tessera.cli", "serve", "--state", str(state), "--port",
         str(port), "--cluster", "v100:4,t4:4", *executor, "--grace-s", "2",
         "--period-s", "0.5"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(state / "serve.log", "ab"))


def _wait_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("service did not come up")


@pytest.mark.slow
def test_sigkill_during_workload_runs_every_job_exactly_once(tmp_path: Path) -> None:
    run_workload(tmp_path, ("--executor", "local"), finish_s=90, up_s=20)


def run_workload(tmp_path: Path, executor: tuple[str, ...], finish_s: float,
                 up_s: float) -> None:
    """50 jobs, the service killed six times (module docstring); ``finish_s``: how long the
    jobs may take after the submissions, ``up_s``: how long one start may take."""
    seed = int(time.time())
    rng = random.Random(seed)
    state = tmp_path / "state"
    write_config(state)
    out = tmp_path / "ran.txt"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(state, port, None, executor)
    assert _wait_up(url, proc, up_s)
    ids = []
    with httpx.Client(base_url=url, headers=auth(ADMIN), timeout=10) as c:
        for i in range(50):
            cmd = (f"sleep {rng.choice([0.2, 0.4, 0.6, 0.8])}; "
                   f'if [ "$RANK" = 0 ]; then echo $TESSERA_JOB_ID >> {out}; fi')
            r = c.post("/api/jobs", json={"name": f"job-{i}", "command": cmd,
                                          "gpus": rng.choice([1, 1, 2]),
                                          "queue": "team-a" if i % 2 else "team-b"})
            assert r.status_code == 201, r.text
            ids.append(r.json()["job_id"])
    deadline = time.monotonic() + finish_s
    proc.send_signal(signal.SIGKILL)  # first death: right after the submissions
    proc.wait()
    for crash in CRASHES:
        t0 = time.monotonic()
        proc = _start(state, port, crash, executor)
        _wait_up(url, proc, up_s)
        print(f"{crash}: up after {time.monotonic() - t0:.2f} s")
        if crash == "sigkill":
            time.sleep(rng.uniform(0.2, 1.5))
            proc.send_signal(signal.SIGKILL)
        try:
            proc.wait(timeout=6 + up_s / 4)  # a crash point exits on its own
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)  # the point was never reached: kill anyway
            proc.wait()
        print(f"{crash}: died after {time.monotonic() - t0:.2f} s")
    proc = _start(state, port, None, executor)
    assert _wait_up(url, proc, up_s)
    unfinished: list[str] = []
    try:  # a bound on waiting, not a speed target: a slow machine gets the whole finish_s
        while time.monotonic() < deadline:
            jobs = httpx.get(url + "/api/jobs", headers=auth(ADMIN), timeout=5).json()["jobs"]
            unfinished = [j["job_id"] for j in jobs if not j["final"]]
            if not unfinished:
                break
            time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    ran = Counter(out.read_text().split())
    assert {j for j, n in ran.items() if n != 1} == set(), f"seed {seed}: ran twice"
    assert set(ran) == set(ids), (f"seed {seed}: lost {set(ids) - set(ran)}"
                                  + (f" ({len(unfinished)} jobs still not final after the "
                                     f"{finish_s:g} s wait)" if unfinished else ""))
    _check_event_log(Store(state / "state.db"), ids)


def _check_event_log(store: Store, ids: list[str]) -> None:
    """Every job's transitions chain through valid edges to its stored (succeeded) state."""
    for jid in ids:
        rec = store.get(jid)
        assert rec is not None and rec.state is JobState.SUCCEEDED, (jid, rec)
        state: JobState | None = None
        for e in store.events(jid):
            if e.to_state is None:
                continue
            new = JobState(e.to_state)
            if state is None:
                assert new is JobState.PENDING
            else:
                assert e.from_state == state.value, (jid, e)
                assert new in VALID_TRANSITIONS[state], (jid, e)
            state = new
        assert state is rec.state
    assert store.allocations() == []  # no run still holds GPUs
