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

import pytest
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
