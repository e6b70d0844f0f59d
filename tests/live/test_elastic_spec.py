"""Elastic job requests: GPU and batch ranges, validated, stored, shown, and carried into
``JobSpec.elastic`` -- or a rigid job with a note when the model has no efficiency data."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tessera.cli.job_text import job_lines
from tessera.errors import SpecError
from tessera.live.service import LiveService, Rejected
from tessera.live.spec import LiveJob, elastic_choice, parse_request, to_live_job
from tessera.live.tenancy import Principal
from tessera.live.visibility import job_json
from tessera.perf.efficiency import load_efficiency
from tests.live.helpers import TEAM_A as TOKEN
from tests.live.helpers import auth

ELASTIC = ("name: e\ncommand: sleep 1\nmodel: cifar10\n"
           "gpus: {min: 1, max: 8}\nglobal_batch: {initial: 256, max: 4096}\n")
TEAM_A = Principal("a", "team-a")


def test_ranges_become_the_core_specs_elastic_range() -> None:
    req = parse_request(ELASTIC)
    job = to_live_job(req, "j-1", "team-a", 0.0)
    e = job.spec.elastic
    assert e is not None
    assert (e.min_gpus, e.max_gpus) == (1, 8)
    assert (e.initial_batch_samples, e.max_batch_samples) == (256, 4096)
    assert e.efficiency_model == "cifar10"
    assert e.target_samples == load_efficiency("cifar10").target_samples
    assert job.spec.num_gpus == 1 and job.global_batch == 256  # starts at min, initial batch
    again = LiveJob.from_json(job.to_json())
    assert again.spec.elastic == e and again.global_batch == 256


def test_an_initial_count_and_a_fixed_count_with_a_batch_range() -> None:
    job = to_live_job(parse_request(ELASTIC.replace("max: 8}", "max: 8, initial: 4}")),
                      "j-1", "q", 0.0)
    assert job.spec.num_gpus == 4 and job.spec.elastic is not None
    fixed = to_live_job(parse_request(ELASTIC.replace("{min: 1, max: 8}", "4")), "j-2", "q", 0.0)
    e = fixed.spec.elastic
    assert e is not None and (e.min_gpus, e.max_gpus) == (4, 4)
    assert (e.initial_batch_samples, e.max_batch_samples) == (256, 4096)


def test_plain_numbers_stay_rigid() -> None:
    job = to_live_job(parse_request("name: r\ncommand: x\ngpus: 4\nglobal_batch: 256\n"
                                    "model: cifar10\n"), "j-1", "q", 0.0)
    assert job.spec.elastic is None and job.spec.num_gpus == 4 and job.global_batch == 256


@pytest.mark.parametrize(("replace", "message"), [
    (("{min: 1, max: 8}", "{min: 9, max: 8}"), "gpus: Value error, min 9 is above max 8"),
    (("{min: 1, max: 8}", "{min: 2, max: 8, initial: 1}"), "initial 1 is outside 2-8"),
    (("{min: 1, max: 8}", "{min: 0, max: 8}"), "gpus.min: Input should be greater than"),
    (("{min: 1, max: 8}", "{min: 1, most: 8}"), "gpus.most: unknown field"),
    (("{min: 1, max: 8}", "[1, 8]"), "gpus: Input should be a valid integer"),
    (("{initial: 256, max: 4096}", "{initial: 512, max: 256}"), "initial 512 is above max 256"),
    (("{initial: 256, max: 4096}", "{initial: 4, max: 6}"),
     "global_batch max 6 is smaller than gpus max 8"),
    (("global_batch: {initial: 256, max: 4096}\n", ""), "a gpus range needs a global_batch"),
    (("{initial: 256, max: 4096}", "{initial: 64, max: 4096}"),
     "global_batch initial 64 is outside cifar10's profiled range 128-4096"),
    (("{initial: 256, max: 4096}", "{initial: 256, max: 8192}"),
     "global_batch max 8192 is outside cifar10's profiled range 128-4096"),
], ids=["min-above-max", "initial-outside", "zero-min", "unknown-field", "list", "batch-order",
        "batch-below-gpus", "range-without-batch", "initial-unprofiled", "max-unprofiled"])
def test_bad_ranges_are_clear_errors(replace: tuple[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        to_live_job(parse_request(ELASTIC.replace(*replace)), "j-1", "q", 0.0)


@pytest.mark.parametrize(("model", "why"), [
    ("gpt_pmp", "no statistical-efficiency data"),
    ("my-own-net", "model 'my-own-net' has no statistical-efficiency data"),
    (None, "the job names no model"),
])
def test_no_efficiency_data_means_rigid_with_a_note(model: str | None, why: str) -> None:
    text = ELASTIC.replace("model: cifar10\n", f"model: {model}\n" if model else "")
    req = parse_request(text)
    choice = elastic_choice(req)
    assert choice.elastic is None
    assert why in choice.note and "it runs rigid on 1 GPU(s) at global batch 256" in choice.note
    job = to_live_job(req, "j-1", "q", 0.0)
    assert job.spec.elastic is None and job.spec.num_gpus == 1 and job.global_batch == 256


def test_the_service_notes_a_rigid_fallback_in_the_jobs_events(service: LiveService) -> None:
    rec = service.submit(parse_request(ELASTIC.replace("cifar10", "gpt_pmp")), TEAM_A)
    notes = [e.detail for e in service.store.events(rec.job_id) if e.kind == "rigid"]
    assert len(notes) == 1 and "gpt_pmp" in notes[0] and "runs rigid" in notes[0]
    elastic = service.submit(parse_request(ELASTIC), TEAM_A)
    assert not [e for e in service.store.events(elastic.job_id) if e.kind == "rigid"]


def test_a_minimum_above_the_cluster_is_rejected(service: LiveService) -> None:
    # v100:4,t4:4 in servers of 4: no flavor has more than 4 GPUs.
    text = ELASTIC.replace("{min: 1, max: 8}", "{min: 6, max: 8}")
    with pytest.raises(Rejected, match="its elastic range needs at least 6 GPUs; the largest "
                                       "allowed flavor pool has 4"):
        service.submit(parse_request(text), TEAM_A)


def test_tessera_job_shows_the_ranges_and_the_resizes(service: LiveService,
                                                      tmp_path: Path) -> None:
    rec = service.submit(parse_request(ELASTIC), TEAM_A)
    view = job_json(rec)
    assert view["elastic"] == {"min_gpus": 1, "max_gpus": 8, "initial_batch": 256,
                               "max_batch": 4096, "efficiency_model": "cifar10"}
    assert view["global_batch"] == 256
    events = [{"ts_s": 1.0, "kind": "resized", "from": None, "to": None,
               "detail": "run 2: 1 → 2 GPUs, global batch 256 → 512"}]
    text = "\n".join(job_lines(view | {"events": events}, now_s=rec.job.spec.submit_time_s))
    assert "elastic: 1-8 GPUs, global batch 256-4096 (efficiency of cifar10)" in text
    assert "resizes: 1" in text
    rigid = job_json(service.submit(parse_request("name: r\ncommand: x\nglobal_batch: 64"),
                                    TEAM_A))
    lines = "\n".join(job_lines(rigid | {"events": []}, now_s=0.0))
    assert "batch: global batch 64" in lines and "resizes" not in lines


def test_the_api_answers_a_bad_range_with_its_message(api: TestClient) -> None:
    body = {"name": "e", "command": "sleep 1", "model": "cifar10",
            "gpus": {"min": 1, "max": 8}, "global_batch": {"initial": 64, "max": 4096}}
    r = api.post("/api/jobs", json=body, headers=auth(TOKEN))
    assert r.status_code == 422
    assert "global_batch initial 64 is outside cifar10's profiled range 128-4096" in r.text
    ok = api.post("/api/jobs", json=body | {"global_batch": {"initial": 128, "max": 4096}},
                  headers=auth(TOKEN))
    assert ok.status_code == 201 and ok.json()["elastic"]["max_gpus"] == 8
