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
