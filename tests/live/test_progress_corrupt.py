"""A ``progress:<job>`` row the service cannot read (a torn write, a hand edit, another
version's shape) must not stop the scheduling loop: the rates are dropped, the job's events say
so once, and the job is scheduled with its prior speed -- as a corrupt ``stepfit:`` row is
(``test_step_fits_corrupt.py``). Before, every round that asked the job's measured rates raised.
Also: a CPU-only job that never reports is told it runs at its own CPU speed, not at a speed
"on" the GPU flavor of the server it sits on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.live.progress import JOB_META
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import Principal
from tests.live.helpers import make_service, wait_for
from tests.live.test_step_fits import _book

ADMIN = Principal("admin", None)
GOOD_RUN = {"run": 1, "flavor": "V100", "nodes": ["n0"], "steps_per_s": 2.0, "intervals": 3,
            "since_s": 1.0, "updated_s": 5.0}
BAD_ROWS = [
    "{not json",
    json.dumps({"version": 1}),  # no runs
    json.dumps([1, 2]),
    json.dumps({"runs": [{**GOOD_RUN, "flavor": "no-such-gpu"}]}),
    json.dumps({"runs": [{**GOOD_RUN, "steps_per_s": -1.0}]}),
    json.dumps({"runs": [{**GOOD_RUN, "steps_per_s": "NaN"}]}),
    json.dumps({"runs": [{k: v for k, v in GOOD_RUN.items() if k != "nodes"}]}),
    json.dumps({"runs": ["x"]}),
    # JSON's Infinity (or 1e999) in a count raised OverflowError, not among the caught errors;
    # a time that is not finite was kept as a measured run.
    json.dumps({"runs": [{**GOOD_RUN, "run": float("inf")}]}),
    json.dumps({"runs": [{**GOOD_RUN, "intervals": float("inf")}]}),
    '{"runs": [{"run": 1e999, "flavor": "V100", "nodes": ["n0"], "steps_per_s": 2.0, '
    '"intervals": 3, "since_s": 1.0, "updated_s": 5.0}]}',
    json.dumps({"runs": [{**GOOD_RUN, "since_s": float("nan")}]}),
    json.dumps({"runs": [{**GOOD_RUN, "updated_s": float("inf")}]}),
    # Nested past the parser's recursion limit: RecursionError stopped every round.
    '{"runs": ' + "[" * 100_000 + "]" * 100_000 + "}",
    json.dumps({"runs": [{**GOOD_RUN, "nodes": "n0"}]}),  # a string: a node per character
    json.dumps({"runs": [{**GOOD_RUN, "nodes": [1, 2]}]}),
]


def test_a_readable_row_is_restored() -> None:
    """The guard of the test below: the good row parses (so the bad ones fail on their flaw)."""
    from tessera.live.progress import RunRate

    assert RunRate.from_json(GOOD_RUN).steps_per_s == 2.0


@pytest.mark.parametrize("raw", BAD_ROWS)
def test_a_corrupt_progress_row_is_dropped_with_a_note_not_raised(tmp_path: Path,
                                                                  raw: str) -> None:
    store = Store(tmp_path / "state.db")
    store.set_meta(JOB_META + "j-1", raw)
    book = _book(store)
    assert book.runs("j-1") == [] and book.measured("j-1") == {}
    note = book.take_note("j-1")
    assert note is not None and "stored progress rates" in note and "dropped" in note, note
    assert book.take_note("j-1") is None  # said once


def test_the_service_schedules_a_job_whose_progress_row_is_corrupt(tmp_path: Path) -> None:
    svc = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, policy="fifo",
                       start=False)
    jid = svc.submit(parse_request("name: j\nqueue: team-a\ncommand: 'sleep 30'\ngpus: 1\n"),
                     ADMIN).job_id
    svc.store.set_meta(JOB_META + jid, '{"runs": [{"run": 1, "flavor": "V1')
    svc.round(10.0)
    svc.round(20.0)
    texts = [e.detail for e in svc.store.events(jid)]
    assert sum("stored progress rates" in t and "dropped" in t for t in texts) == 1, texts
    assert svc.store.allocation(jid, 1) is not None


def test_a_silent_cpu_only_job_is_told_its_cpu_speed_not_a_gpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.live import learned

    monkeypatch.setattr(learned, "SILENT_S", 0.3)
    svc = make_service(tmp_path / "state", cluster="v100:2", gpus_per_server=2, policy="fifo")
    try:
        jid = svc.submit(parse_request(
            "name: c\nqueue: team-a\ncommand: 'sleep 300'\ngpus: 0\nhost: {cpus: 1}\n"
            "total_steps: 1000\ncpu_steps_per_s: 4\n"), ADMIN).job_id

        def said() -> list[str]:
            return [e.detail for e in svc.store.events(jid)
                    if e.detail.startswith("no progress reports")]

        wait_for(lambda: bool(said()), 30, "the no-reports notice")
        assert "(4 steps/s on CPUs)" in said()[0] and "V100" not in said()[0], said()
    finally:
        svc.stop()
