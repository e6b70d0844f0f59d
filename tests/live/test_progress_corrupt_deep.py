"""A ``progress:<job>`` / ``stepfit:<job>`` row a restart cannot read (more shapes of the
progress row are ``test_progress_corrupt``'s ``BAD_ROWS``): JSON
nested deeper than the parser's recursion limit raised ``RecursionError`` (not among the caught
errors), so every scheduling round that asked the job's rates failed (the loop logs and goes
on, and fails again: nothing was scheduled any more); and a run's ``nodes`` written as a string
was read as one node per character."""

from __future__ import annotations

from pathlib import Path

from tessera.live.progress import JOB_META
from tessera.live.spec import parse_request
from tessera.live.step_fits import STEP_META
from tessera.live.store import Store
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service
from tests.live.test_step_fits import _book

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_deep_stepfit_row_is_dropped_with_an_event(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.set_meta(STEP_META + "j-1", '{"version": 1, "flavors": ' + DEEP + "}")
    book = _book(store)
    assert book.steps.fits("j-1") == ()
    events = book.steps.refit("j-1")
    assert len(events) == 1 and "dropped" in events[0], events


def test_the_service_schedules_a_job_whose_progress_row_is_nested_too_deep(
        tmp_path: Path) -> None:
    """Before: every round raised RecursionError (the job was never planned)."""
    svc = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, start=False)
    jid = svc.submit(parse_request("name: x\nqueue: team-a\ncommand: 'sleep 1'\ngpus: 1\n"
                                   "job_type: resnet\n"), Principal("admin", None)).job_id
    svc.store.set_meta(JOB_META + jid, '{"runs": ' + DEEP + "}")
    svc.round(10.0)
    assert svc.store.allocation(jid, 1) is not None
