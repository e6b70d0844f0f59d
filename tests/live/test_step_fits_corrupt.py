"""Review of the live step-time fits (:mod:`tessera.live.step_fits`): a ``stepfit:<job>`` row
the service cannot read (a torn write, a hand edit, another version's shape) must not stop the
scheduling loop; the fit is dropped, the job's events say so, and the job is scheduled with its
profile as if it had never reported a local batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.step_fits import STEP_META
from tessera.live.store import Store
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service
from tests.live.test_step_fits import _book

ADMIN = Principal("admin", None)
BAD_ROWS = [
    "{not json",
    json.dumps({"version": 1}),  # no flavors
    json.dumps({"version": 1, "flavors": {"no-such-gpu": {"obs": [], "fit": None}}}),
    json.dumps({"version": 1, "flavors": {"V100": {"obs": [[1, 64, -0.2]], "fit": None}}}),
    json.dumps({"version": 1, "flavors": {"V100": {"obs": [[1, 64, 0.2]], "fit": [1, 2]}}}),
    json.dumps({"version": 1, "flavors": {"V100": {"obs": [[0, 64, 0.2]], "fit": None}}}),
    json.dumps([1, 2, 3]),
    json.dumps({"version": float("inf"), "flavors": {}}),  # (OverflowError, uncaught before)
    json.dumps({"version": 1, "flavors": {"V100": {"obs": [[float("inf"), 64, 0.2]],
                                                    "fit": None}}}),
]


@pytest.mark.parametrize("raw", BAD_ROWS)
def test_a_corrupt_stepfit_row_is_dropped_with_an_event_not_raised(
        tmp_path: Path, raw: str) -> None:
    store = Store(tmp_path / "state.db")
    store.set_meta(STEP_META + "j-1", raw)
    book = _book(store)
    assert book.steps.fits("j-1") == ()
    events = book.steps.refit("j-1")
    assert len(events) == 1 and "stored step-time fit" in events[0], events
    assert "unreadable" in events[0] and "dropped" in events[0]
    assert book.steps.refit("j-1") == []  # said once


def test_the_service_schedules_a_job_whose_stepfit_row_is_corrupt(tmp_path: Path) -> None:
    """A restart over a store with a torn ``stepfit:`` row: the round runs, the job starts,
    and its events say the fit was dropped."""
    svc: LiveService = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2,
                                    policy="pollux", start=False)
    text = ("name: j\nqueue: team-a\ncommand: 'true'\nflavors: [V100]\nmodel: cifar10\n"
            "gpus: {min: 1, max: 2}\nglobal_batch: {initial: 256, max: 1024}\n")
    jid = svc.submit(parse_request(text), ADMIN).job_id
    svc.store.set_meta(STEP_META + jid, '{"version": 3, "flavors": {"V100": {"obs": [[1,')
    svc.round(10.0)
    texts = [e.detail for e in svc.store.events(jid)]
    assert any("stored step-time fit" in t and "dropped" in t for t in texts), texts
    assert svc.store.allocation(jid, 1) is not None  # scheduled with its profile


def test_a_run_cycling_through_many_local_batches_keeps_a_bounded_book(tmp_path: Path) -> None:
    """A job's own code chooses ``local_batch``: one that reports a new value each time (1, 2,
    3, ... round robin) made one meter and, after two intervals each, one fitted size per value
    -- without bound, each refit a least-squares over all of them and each publication a
    larger ``stepfit:`` row."""
    from tessera.live.step_fits import MAX_SIZES_PER_FLAVOR

    store = Store(tmp_path / "state.db")
    book = _book(store)
    tok = book.token("j-1", 1)
    n_batches = MAX_SIZES_PER_FLAVOR * 3
    t_s, steps = 100.0, 0.0
    for _cycle in range(3):
        for lb in range(1, n_batches + 1):
            t_s += 2.0
            steps += 10.0
            out = book.report("j-1", 1, tok, {"steps": steps, "local_batch": lb}, t_s)
            assert out.status == 200, out.detail
    book.steps.refit("j-1")
    sizes = book.steps.sizes("j-1")
    assert sum(len(s) for s in sizes.values()) <= MAX_SIZES_PER_FLAVOR
    assert len(book.steps._meters) <= MAX_SIZES_PER_FLAVOR
    raw = store.meta(STEP_META + "j-1")
    assert raw is None or len(raw) < 100 * MAX_SIZES_PER_FLAVOR
