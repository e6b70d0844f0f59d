"""Progress reports (issue 35 part 4): tokens, validation, rate limit, the estimate, the store.

The report book is tested on its own with a fake run table and a hand-driven clock; the route
(``POST /api/progress/<job>/<run>``) through the API with a running job.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.live.progress import (
    MIN_INTERVAL_S,
    MIN_INTERVALS,
    ProgressBook,
    check_values,
    median_rate,
)
from tessera.live.service import LiveService
from tessera.live.store import Store
from tessera.model.gpus import resolve_flavor
from tests.live.helpers import ADMIN, TEAM_A, auth, wait_for

V100, T4 = resolve_flavor("v100"), resolve_flavor("t4")
RUNS = {("j-1", 1): ("running", V100, ("n0",)), ("j-1", 2): ("running", T4, ("n1",)),
        ("j-2", 1): ("completed", V100, ("n0",))}


def _book(tmp_path: Path, prior: float | None = 2.0) -> ProgressBook:
    store = Store(tmp_path / "state.db")
    return ProgressBook(store, lambda j, r: RUNS.get((j, r)), lambda _j, _f: prior)


def _feed(book: ProgressBook, job: str, run: int, steps: list[float], t0: float = 100.0,
          dt: float = 2.0) -> list[int]:
    tok = book.token(job, run)
    return [book.report(job, run, tok, {"steps": s}, t0 + k * dt).status
            for k, s in enumerate(steps)]


def test_only_the_runs_own_token_is_accepted(tmp_path: Path) -> None:
    book = _book(tmp_path)
    assert book.report("j-1", 1, book.token("j-1", 1), {"steps": 1}, 0.0).status == 200
    other = book.report("j-1", 1, book.token("j-1", 2), {"steps": 2}, 5.0)  # run 2's token
    assert other.status == 403 and "may not report for run 1 of j-1" in other.detail
    assert book.report("j-1", 1, "f" * 64, {"steps": 2}, 5.0).status == 403
    assert book.report("j-1", 1, None, {"steps": 2}, 5.0).status == 403
    finished = book.report("j-2", 1, book.token("j-2", 1), {"steps": 1}, 5.0)
    assert finished.status == 409 and "is completed" in finished.detail
    assert book.report("j-9", 1, book.token("j-9", 1), {"steps": 1}, 5.0).status == 404


@pytest.mark.parametrize(("body", "why"), [
    ({"steps": -1}, "steps must be >= 0"),
    ({"steps": "nan"}, "steps must be a number"),
    ({"steps": math.nan}, "steps must be finite"),
    ({"steps": math.inf}, "steps must be finite"),
    ({"steps": 3, "samples": -5}, "samples must be >= 0"),
    ({"steps": True}, "steps must be a number"),
    ({"samples": 10}, "a report needs steps"),
    ({"steps": 1, "speed": 3}, "unknown field 'speed'"),
    ([1, 2], "a report is a JSON object"),
])
def test_bad_values_are_refused_with_a_reason(body: object, why: str) -> None:
    values, reason = check_values(body)  # type: ignore[arg-type]
    assert values == {} and reason is not None and why in reason


def test_backwards_steps_and_absurd_jumps_are_refused_once_each_as_events(
        tmp_path: Path) -> None:
    book = _book(tmp_path, prior=2.0)   # 2 steps/s: a jump over 200 steps/s is absurd
    tok = book.token("j-1", 1)
    assert book.report("j-1", 1, tok, {"steps": 100}, 10.0).status == 200
    back = book.report("j-1", 1, tok, {"steps": 50}, 12.0)
    assert back.status == 422 and "went backwards" in back.detail
    assert back.event == "progress report refused: steps went backwards (50 after 100)"
    again = book.report("j-1", 1, tok, {"steps": 40}, 14.0)
    assert again.status == 422 and again.event is None   # one event per kind per run
    jump = book.report("j-1", 1, tok, {"steps": 100 + 2 * 201}, 16.0)   # 67 steps/s: fine
    assert jump.status == 200
    absurd = book.report("j-1", 1, tok, {"steps": 502 + 2 * 201 * 2}, 18.0)  # 402 steps/s
    assert absurd.status == 422 and "over 100x the expected 2 steps/s" in absurd.detail
    assert absurd.event is not None and absurd.event.startswith("progress report refused: jump")


def test_reports_are_rate_limited_per_run(tmp_path: Path) -> None:
    book = _book(tmp_path)
    assert _feed(book, "j-1", 1, [1, 2, 3], dt=0.3) == [200, 429, 429]
    tok = book.token("j-1", 1)
    assert book.report("j-1", 1, tok, {"steps": 4}, 101.0).status == 200
    assert book.report("j-1", 2, book.token("j-1", 2), {"steps": 4}, 101.0).status == 200


def test_the_estimate_is_the_median_of_the_intervals_and_survives_a_restart(
        tmp_path: Path) -> None:
    book = _book(tmp_path)
    # 10 steps/s, one 20 s stall (a checkpoint) and one burst: the median ignores both
    assert _feed(book, "j-1", 1, [0, 20, 40, 40, 80, 100, 120], dt=2.0) == [200] * 7
    assert book.measured("j-1") == {V100: pytest.approx(10.0)}
    assert median_rate([(0.0, 0.0)] * MIN_INTERVALS) is None  # too few intervals
    book.store.close()
    again = ProgressBook(Store(tmp_path / "state.db"), lambda j, r: RUNS.get((j, r)),
                         lambda _j, _f: None)
    assert again.measured("j-1") == {V100: pytest.approx(10.0)}
    assert again.token("j-1", 1) == book.token("j-1", 1)  # the key is kept too
    (run,) = again.runs("j-1")
    # written when first estimated (2 intervals); the same rate since was not rewritten
    assert (run.run, run.flavor, run.nodes, run.intervals) == (1, V100, ("n0",), 2)


def _running_job(api: TestClient, svc: LiveService) -> str:
    r = api.post("/api/jobs", json={"name": "r", "command": "sleep 30", "gpus": 1,
                                    "flavors": ["v100"]}, headers=auth(TEAM_A))
    assert r.status_code == 201, r.text
    jid = str(r.json()["job_id"])
    wait_for(lambda: svc.store.get(jid).state.value == "running",  # type: ignore[union-attr]
             what="the job to run")
    return jid


def test_the_route_takes_only_the_runs_token_and_never_shows_it(
        api: TestClient, service: LiveService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    jid = _running_job(api, service)
    tok = service.progress.token(jid, 1)
    url = f"/api/progress/{jid}/1"
    assert api.post(url, json={"steps": 1}).status_code == 401
    tenant = api.post(url, json={"steps": 1}, headers=auth(TEAM_A))
    assert tenant.status_code == 403 and "tenant or admin token" in tenant.json()["detail"]
    assert api.post(url, json={"steps": 1}, headers=auth(ADMIN)).status_code == 403
    assert api.post(f"/api/progress/{jid}/2", json={"steps": 1},
                    headers=auth(tok)).status_code == 403   # run 1's token for run 2
    assert api.post(url, json={"steps": 1}, headers=auth(tok)).status_code == 200
    assert api.post(url, json={"steps": 2}, headers=auth(tok)).status_code == 429
    time.sleep(MIN_INTERVAL_S)
    bad = api.post(url, json={"steps": -3}, headers=auth(tok))
    assert bad.status_code == 422 and bad.json()["detail"] == "steps must be >= 0, got -3"
    events = [e.detail for e in service.store.events(jid)]
    assert "progress report refused: steps must be >= 0, got -3" in events
    shown = api.get(f"/api/jobs/{jid}", headers=auth(ADMIN)).text
    shown += api.get(f"/api/jobs/{jid}/explain", headers=auth(ADMIN)).text
    assert tok not in shown and tok not in " ".join(events) and tok not in caplog.text
    assert all(tok not in e.detail for e in service.store.events())
    api.post(f"/api/jobs/{jid}/cancel", headers=auth(ADMIN))
    wait_for(lambda: service.store.get(jid).final, what="the cancel")  # type: ignore[union-attr]
    done = api.post(url, json={"steps": 9}, headers=auth(tok))
    assert done.status_code == 409 and "reports no more" in done.json()["detail"]


def test_the_url_jobs_report_to() -> None:
    from tessera.errors import SpecError
    from tessera.live.server import check_url, progress_base_url

    assert progress_base_url("0.0.0.0", 8470) == "http://127.0.0.1:8470"
    assert progress_base_url("::", 8470) == "http://[::1]:8470"
    assert progress_base_url("10.0.0.5", 80) == "http://10.0.0.5:80"
    assert check_url("http://10.0.0.5:8470/") == "http://10.0.0.5:8470"
    assert check_url(None) is None
    for bad in ("10.0.0.5:8470", "ftp://h", "http://h/api/progress", "http://"):
        with pytest.raises(SpecError, match="--progress-url"):
            check_url(bad)


def test_the_admin_lists_and_clears_slow_nodes(api: TestClient, service: LiveService) -> None:
    service.slow_nodes.marked["t4-0000"] = 123.0
    assert api.get("/api/slow-nodes").status_code == 401
    assert api.get("/api/slow-nodes", headers=auth(TEAM_A)).status_code == 403
    assert api.delete("/api/slow-nodes/t4-0000", headers=auth(TEAM_A)).status_code == 403
    assert api.get("/api/slow-nodes", headers=auth(ADMIN)).json() == {
        "slow_nodes": [{"node": "t4-0000", "last_slow_s": 123.0}]}
    assert api.delete("/api/slow-nodes/t4-0000", headers=auth(ADMIN)).json() == {
        "cleared": "t4-0000"}
    assert not service.slow_nodes.marked
    assert [e.detail for e in service.store.events() if e.kind == "slow-node"] == [
        "node t4-0000 cleared by admin: gangs may be placed there"]
    gone = api.delete("/api/slow-nodes/t4-0000", headers=auth(ADMIN))
    assert gone.status_code == 404 and gone.json()["detail"] == "node 't4-0000' is not marked slow"


def test_a_report_body_is_small_and_flat(api: TestClient, service: LiveService) -> None:
    jid = _running_job(api, service)
    tok = service.progress.token(jid, 1)
    url = f"/api/progress/{jid}/1"
    big = api.post(url, content=b"[" * 5000, headers=auth(tok))
    assert big.status_code == 413 and big.json()["detail"] == "a report is at most 4096 bytes"
    deep = api.post(url, content=b"[" * 3000, headers=auth(tok))
    assert deep.status_code == 422 and "a report is a JSON object" in deep.json()["detail"]
    assert service.store.get(jid).state.value == "running"  # type: ignore[union-attr]
