"""The dashboard as a person sees it, in headless Chromium.

The page is plain HTML whose script (``/dashboard.js``, under the page's CSP) polls the JSON
API; Chromium runs the script and ``--dump-dom`` prints the page after it did, which is what a
person would read on screen.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tessera.live.service import LiveService
from tests.live.helpers import ADMIN, TEAM_A, TEAM_B, ServerThread, auth, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Rows(HTMLParser):
    """Collects the text of every table row, by table id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            if self._row:
                self.tables[self._table].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _render(url: str) -> str:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=3000",
             "--dump-dom", url],
            capture_output=True, text=True, timeout=60)
    return r.stdout


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_dashboard_shows_flavors_queues_and_jobs(server: ServerThread,
                                                 service: LiveService) -> None:
    with TestClient(server.server.config.app) as api:
        run = api.post("/api/jobs", json={"name": "resnet", "command": "sleep 30", "gpus": 3,
                                          "flavors": ["v100"]}, headers=auth(TEAM_A)).json()
        wait = api.post("/api/jobs", json={"name": "bert", "command": "sleep 1", "gpus": 2,
                                           "flavors": ["v100"]}, headers=auth(TEAM_B)).json()
    wait_for(lambda: service.store.get(wait["job_id"]).reason != "",  # type: ignore[union-attr]
             what="a pending reason")
    page = _Rows()
    page.feed(_render(f"{server.url}/dashboard#token={ADMIN}"))
    flavors = {r[0]: r for r in page.tables["flavors"]}
    assert flavors["V100-16GB"][2] == "3 / 4" and flavors["T4"][2] == "0 / 4"
    queues = {r[0]: r for r in page.tables["queues"]}
    assert queues["team-a"][1:5] == ["4", "4", "3", "1"]  # quota, borrow limit, used, running
    assert queues["team-b"][5] == "1"  # one job pending
    jobs = {r[0]: r for r in page.tables["jobs"]}
    assert jobs[run["job_id"]][1:5] == ["resnet", "team-a", "running", "3"]
    assert jobs[run["job_id"]][5] == "3×V100-16GB: 3 GPUs on node v100-16gb-0000"
    assert jobs[wait["job_id"]][3] == "pending"
    assert jobs[wait["job_id"]][5].startswith("needs 2 GPUs of V100-16GB; free now: V100-16GB 1")
    tenant = _Rows()
    tenant.feed(_render(f"{server.url}/dashboard#token={TEAM_B}"))
    # team-b sees the cluster's capacity, its own queue and jobs, nothing of team-a's
    assert {r[0]: r[2] for r in tenant.tables["flavors"]} == {"V100-16GB": "0 / 4", "T4": "0 / 4"}
    assert [r[0] for r in tenant.tables["queues"]] == ["team-b"]
    assert list({r[0] for r in tenant.tables["jobs"]}) == [wait["job_id"]]


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_dashboard_asks_for_a_token(server: ServerThread) -> None:
    dom = _render(f"{server.url}/dashboard#token=wrong")
    assert 'id="login" style="display: block;"' in dom
    assert "error: unauthorized" in dom


def _text_of(dom: str, element_id: str) -> str:
    """The text inside ``<pre id=element_id>`` of a dumped page, entities decoded."""
    import html
    import re

    m = re.search(rf'<pre id="{element_id}"[^>]*>(.*?)</pre>', dom, re.S)
    assert m is not None, f"no #{element_id} in the page"
    return html.unescape(m.group(1))


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_a_jobs_detail_shows_where_it_ran_and_its_output_escaped(
        server: ServerThread, service: LiveService) -> None:
    """``#job=<id>`` opens the job's detail: where it ran (kept after it ended) and its output
    from the logs API, as text: markup stays text, escape sequences are shown, not run."""
    with TestClient(server.server.config.app) as api:
        job = api.post("/api/jobs", json={
            "name": "talker", "gpus": 2, "flavors": ["v100"],
            "command": ["sh", "-c", "printf 'step 1 loss 2.30\\n<b>bold</b>\\n\\033[31mred\\n'"]},
            headers=auth(TEAM_A)).json()
    wait_for(lambda: service.store.get(job["job_id"]).final,  # type: ignore[union-attr]
             what="the job to finish")
    dom = _render(f"{server.url}/dashboard#token={TEAM_A}&job={job['job_id']}")
    assert '<section id="job">' in dom  # shown (no longer hidden)
    detail = _text_of(dom, "detail")
    assert detail.startswith(f"{job['job_id']} (talker) · queue team-a · succeeded")
    assert "2 GPU(s) · ran on: 2×V100-16GB: 2 GPUs on node v100-16gb-0000 (run 1, ended)" \
        in detail
    assert _text_of(dom, "log") == "step 1 loss 2.30\n<b>bold</b>\n\\u001b[31mred\n"
    assert "<b>bold</b>" not in dom  # the markup is text in the page, never an element
    page = _Rows()
    page.feed(dom)
    jobs = {r[0]: r for r in page.tables["jobs"]}
    assert jobs[job["job_id"]][5] == "ran on 2×V100-16GB: 2 GPUs on node v100-16gb-0000"


def test_the_favicon_is_the_services_own(api: TestClient) -> None:
    page = api.get("/dashboard").text
    assert '<link rel="icon" type="image/svg+xml" href="/favicon.svg">' in page
    icon = api.get("/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.text.startswith("<svg") and "href" not in icon.text  # fetches nothing
    assert icon.headers["content-security-policy"].startswith("default-src 'none'")
    assert "img-src 'self'" in api.get("/dashboard").headers["content-security-policy"]


def _scripted_api(polls: list[int]) -> FastAPI:
    """The dashboard's own page and script over a scripted API: one job ``j-1`` whose run 1
    is running at the first read of the job and which is on run 2 from the second read on
    (it was preempted and started again). ``polls`` counts the job's reads. Each run's
    output is one line that names the run."""
    from tessera.live.api import _add_web_routes

    app = FastAPI()
    _add_web_routes(app)
    out = {1: "output of run 1\n", 2: "output of run 2\n"}

    def placement(run: int) -> dict[str, Any]:
        return {"run": run, "status": "running", "held": True, "text": "1×T4: 1 GPU on node t",
                "nodes": [{"node_id": "t", "gpu_count": 1, "flavor": "T4"}]}

    @app.get("/api/cluster")
    def cluster() -> dict[str, Any]:
        return {"view": "cluster", "name": "c", "policy": "srtf", "executor": "local",
                "flavors": [], "counts": {}}

    @app.get("/api/queues")
    def queues() -> dict[str, Any]:
        return {"queues": []}

    @app.get("/api/jobs")
    def jobs() -> dict[str, Any]:
        return {"jobs": [], "next_before": None}

    @app.get("/api/jobs/j-1")
    def job() -> dict[str, Any]:
        polls.append(1)
        run = 1 if len(polls) == 1 else 2
        return {"job_id": "j-1", "name": "retried", "queue": "team-a", "state": "running",
                "gpus": 1, "runs": run, "placement": "1×T4: 1 GPU on node t",
                "last_placement": placement(run), "reason": "", "command": ["sleep", "9"],
                "events": []}

    @app.get("/api/jobs/j-1/logs")
    def logs(rank: int = 0, offset: int = 0, run: int | None = None) -> dict[str, Any]:
        r = run or (1 if len(polls) <= 1 else 2)
        text = out[r][offset:]
        return {"job_id": "j-1", "run": r, "rank": rank, "ranks": 1, "running": True,
                "final": False, "text": text, "next_offset": offset + len(text),
                "size_bytes": len(out[r]), "skipped_bytes": 0}

    return app


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_output_view_follows_the_jobs_newest_run() -> None:
    """The view first reads run 1; once the job is on run 2 it shows run 2's output from its
    start (before the fix it kept asking for ``run=1`` and showed run 1 for ever)."""
    import threading

    import uvicorn

    from tessera.live.executors.base import free_port

    polls: list[int] = []
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(_scripted_api(polls), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 10, "uvicorn to start")
        dom = _render(f"http://127.0.0.1:{port}/dashboard#token=t&job=j-1")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert len(polls) >= 2, "the page read the job only once: the render ended too soon"
    assert _text_of(dom, "log") == "output of run 2\n"
    assert '<span id="log-status">run 2 · rank 0 of 1 · ' in dom
