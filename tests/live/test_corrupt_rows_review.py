"""Review of the corrupt-row guards of :mod:`tessera.live.progress` and
:mod:`tessera.live.step_fits`: JSON's ``Infinity`` (or ``1e999``, which reads as infinity) in
a count raised ``OverflowError`` -- not among the caught errors -- from every round that read
the job's rates; a time that is not finite was kept as a measured run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.live.progress import JOB_META
from tessera.live.step_fits import STEP_META
from tessera.live.store import Store
from tests.live.test_progress_corrupt import GOOD_RUN
from tests.live.test_step_fits import _book

BAD_PROGRESS = [
    json.dumps({"runs": [{**GOOD_RUN, "run": float("inf")}]}),
    json.dumps({"runs": [{**GOOD_RUN, "intervals": float("inf")}]}),
    '{"runs": [{"run": 1e999, "flavor": "V100", "nodes": ["n0"], "steps_per_s": 2.0, '
    '"intervals": 3, "since_s": 1.0, "updated_s": 5.0}]}',
    json.dumps({"runs": [{**GOOD_RUN, "since_s": float("nan")}]}),
    json.dumps({"runs": [{**GOOD_RUN, "updated_s": float("inf")}]}),
]
BAD_STEPFIT = [
    json.dumps({"version": float("inf"), "flavors": {}}),
    json.dumps({"version": 1, "flavors": {"V100": {"obs": [[float("inf"), 64, 0.2]],
                                                    "fit": None}}}),
]


@pytest.mark.parametrize("raw", BAD_PROGRESS)
def test_a_progress_row_with_an_infinite_count_or_time_is_dropped(tmp_path: Path,
                                                                  raw: str) -> None:
    store = Store(tmp_path / "state.db")
    store.set_meta(JOB_META + "j-1", raw)
    book = _book(store)
    assert book.runs("j-1") == []
    note = book.take_note("j-1")
    assert note is not None and "dropped" in note, note


@pytest.mark.parametrize("raw", BAD_STEPFIT)
def test_a_stepfit_row_with_an_infinite_count_is_dropped(tmp_path: Path, raw: str) -> None:
    store = Store(tmp_path / "state.db")
    store.set_meta(STEP_META + "j-1", raw)
    book = _book(store)
    assert book.steps.fits("j-1") == ()
    events = book.steps.refit("j-1")
    assert len(events) == 1 and "stored step-time fit" in events[0], events
