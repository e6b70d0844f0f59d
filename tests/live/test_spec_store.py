"""Job requests are validated strictly; the store walks only the lifecycle table's edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.live.spec import parse_request, to_live_job
from tessera.live.store import Store
from tessera.model.jobs import InvalidTransition, JobState


@pytest.mark.parametrize(("text", "fmt", "message"), [
    ("name: x\ncommand: [unclosed", "yaml", "not valid YAML"),
    ('{"name": "x", "command": ', "json", "not valid JSON"),
    ("- just\n- a list", "yaml", "must be a mapping"),
    ("name: x\ncommand: true\ngpu: 4", "yaml", "gpu: unknown field"),
    ("name: x\ncommand: sleep 1\nflavors: [V999]", "yaml", "unknown GPU flavor 'V999'"),
    ("name: x\ncommand: ''", "yaml", "command must not be empty"),
    ("name: x\ncommand: sleep 1\ngpus: 0", "yaml", "gpus"),
    ("name: 'bad name!'\ncommand: sleep 1", "yaml", "name"),
], ids=["bad-yaml", "bad-json", "not-a-mapping", "unknown-field", "unknown-flavor",
        "empty-command", "zero-gpus", "bad-name"])
def test_bad_requests_name_the_problem(text: str, fmt: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_request(text, fmt)


def test_request_becomes_core_spec() -> None:
    req = parse_request(
        "name: r\ncommand: python train.py\ngpus: 2\nflavors: [a100, v100]\n"
        "expected_duration_s: 30\nrequires_locality: true\nmax_retries: 2\n")
    job = to_live_job(req, "j-1", "team-a", 5.0)
    assert [f.short for f in job.spec.flavors] == ["A100-80GB", "V100-16GB"]
    assert job.spec.total_steps == 30
    assert job.argv == ("/bin/sh", "-c", "python train.py")
    assert job.spec.queue == "team-a" and job.spec.requires_locality


def test_store_checks_transitions_and_logs_each(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    job = to_live_job(parse_request("name: a\ncommand: 'true'"), "j-1", "q", 1.0)
    store.add_job(job, 1.0)
    with store.tx() as db:
        store.transition(db, "j-1", JobState.ADMITTED, 2.0)
        store.transition(db, "j-1", JobState.RUNNING, 3.0)
    with pytest.raises(InvalidTransition), store.tx() as db:
        store.transition(db, "j-1", JobState.SUCCEEDED, 4.0)
        store.transition(db, "j-1", JobState.ADMITTED, 4.0)  # not allowed: rolls back both
    rec = store.get("j-1")
    assert rec is not None and rec.state is JobState.RUNNING
    kinds = [(e.from_state, e.to_state) for e in store.events("j-1")]
    assert kinds == [(None, "pending"), ("pending", "admitted"), ("admitted", "running")]
    store.close()
    reopened = Store(tmp_path / "s.db")  # durable across processes
    assert reopened.get("j-1").state is JobState.RUNNING  # type: ignore[union-attr]
