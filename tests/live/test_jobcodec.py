"""Stored jobs: every field survives store → load, and rows of the first format still load.

The round trip goes through the real SQLite store (:class:`tessera.live.store.Store`), reopened
so that nothing comes from its cache. The old-format rows are a state file written by the code
of ``main`` at a1eedee (``tests/data/live/write_state_main.py``), before the JSON was generated
from the dataclasses.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.live.jobcodec import StoredJobError, decode_job, to_plain
from tessera.live.spec import LiveJob, parse_request, to_live_job
from tessera.live.store import Store
from tessera.model.gpus import CATALOG, resolve_flavor
from tessera.model.jobs import ElasticRange, JobId, JobSpec, JobState, ThreeDParallel
from tessera.model.resources import HostDemand, ResourceSensitivity, SensitivityPoint

OLD_STATE = Path(__file__).parent.parent / "data" / "live" / "state-main-a1eedee.db"

_text = st.text(string.ascii_letters + string.digits + " -_./é", min_size=1, max_size=12).map(
    lambda t: "x" + t)
_finite = st.floats(min_value=0.001, max_value=1e9, allow_nan=False, allow_infinity=False)


@st.composite
def _elastic(draw: st.DrawFn) -> ElasticRange:
    lo = draw(st.integers(1, 8))
    b0 = draw(st.integers(1, 4096))
    return ElasticRange(lo, draw(st.integers(lo, 64)), b0, draw(st.integers(b0, 10**6)),
                        draw(_text), draw(_finite), draw(_finite))


#: What the strategy below sets, per JobSpec field: a new field fails
#: test_the_strategy_sets_every_field until it is drawn here too.
_SPEC_FIELDS = {
    "job_id", "job_type", "num_gpus", "total_steps", "submit_time_s", "flavors",
    "priority_weight", "queue", "max_retries", "requires_locality", "slo_factor",
    "duration_hint_s", "elastic", "exclusive", "parallelism", "memory_gib", "model",
    "batch_size", "gpu_milli", "priority", "max_delay_s", "extra", "host", "sensitivity",
    "cpu_steps_per_s",
}

_amount = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)
_host = st.builds(HostDemand, _amount, _amount, st.booleans())


@st.composite
def _sensitivity(draw: st.DrawFn) -> ResourceSensitivity:
    """A monotone profile: speedup grows with CPUs, the proportional point at 1.0."""
    base_cpus, mem = draw(st.integers(1, 8)), draw(_amount)
    extra = draw(st.lists(st.integers(1, 16), max_size=3, unique=True))
    points = [SensitivityPoint(float(base_cpus), mem, 1.0)]
    points += [SensitivityPoint(float(base_cpus + k), mem, 1.0 + k / 10) for k in extra]
    return ResourceSensitivity(tuple(points), float(base_cpus), mem)


@st.composite
def _spec(draw: st.DrawFn) -> JobSpec:
    gpus = draw(st.integers(1, 16))
    shape = draw(st.sampled_from(["rigid", "elastic", "3d", "cpu"]))
    if shape == "cpu":  # a CPU-only job: CPUs, a speed of its own, none of the GPU fields
        return JobSpec(
            job_id=JobId(draw(_text)), job_type=draw(_text), num_gpus=0,
            total_steps=draw(_finite), submit_time_s=draw(st.floats(0, 1e9)),
            queue=draw(_text), priority=draw(st.integers(-(10**9), 10**9)),
            host=HostDemand(draw(_finite), draw(_amount), draw(st.booleans())),
            cpu_steps_per_s=draw(_finite), max_delay_s=draw(st.none() | _finite))
    elastic = draw(_elastic()) if shape == "elastic" else None
    if elastic is not None:
        gpus = draw(st.integers(elastic.min_gpus, elastic.max_gpus))
    plan = (ThreeDParallel(draw(_text), draw(st.integers(gpus, 10**6))) if shape == "3d"
            else None)
    return JobSpec(
        job_id=JobId(draw(_text)), job_type=draw(_text), num_gpus=gpus,
        total_steps=draw(_finite), submit_time_s=draw(st.floats(0, 1e9)),
        flavors=tuple(draw(st.lists(st.sampled_from(CATALOG), max_size=4, unique=True))),
        priority_weight=draw(_finite), queue=draw(_text), max_retries=draw(st.integers(0, 9)),
        requires_locality=draw(st.booleans()), slo_factor=draw(st.none() | _finite),
        duration_hint_s=draw(st.none() | _finite), elastic=elastic,
        exclusive=draw(st.booleans()), parallelism=plan,
        memory_gib=draw(st.none() | _finite), model=draw(st.none() | _text),
        batch_size=draw(st.none() | st.integers(1, 10**6)),
        gpu_milli=draw(st.none() | st.integers(1, 999)) if gpus == 1 else None,
        priority=draw(st.integers(-(10**9), 10**9)),
        max_delay_s=draw(st.none() | _finite),
        extra=draw(st.dictionaries(_text, st.text(max_size=8), max_size=3)),
        host=draw(st.none() | _host), sensitivity=draw(st.none() | _sensitivity()),
    )


@st.composite
def _live_job(draw: st.DrawFn) -> LiveJob:
    return LiveJob(
        spec=draw(_spec()), name=draw(_text), argv=tuple(draw(st.lists(_text, min_size=1))),
        checkpoint_dir=draw(st.none() | _text.map(lambda t: "/" + t)),
        env=tuple(sorted(draw(st.dictionaries(_text, st.text(max_size=20), max_size=3))
                         .items())),
        model=draw(st.none() | _text), max_runtime_s=draw(st.none() | _finite),
        global_batch=draw(st.none() | st.integers(1, 10**6)),
        parallelism=draw(st.sampled_from(["data", "3d"])),
        power_limit_w=draw(st.none() | _finite))


def test_the_strategy_sets_every_field() -> None:
    assert {f.name for f in dataclasses.fields(JobSpec)} == _SPEC_FIELDS
    assert {f.name for f in dataclasses.fields(ElasticRange)} == {
        "min_gpus", "max_gpus", "initial_batch_samples", "max_batch_samples",
        "efficiency_model", "target_samples", "slowdown"}


def _everything(job: LiveJob) -> dict[str, Any]:
    """Every field, ``extra`` included (``JobSpec.__eq__`` leaves it out)."""
    plain: dict[str, Any] = to_plain(job)
    return plain


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(_live_job(), min_size=1, max_size=3,
                     unique_by=lambda j: str(j.spec.job_id)))
def test_every_field_survives_the_store(tmp_path_factory: pytest.TempPathFactory,
                                        jobs: list[LiveJob]) -> None:
    path = tmp_path_factory.mktemp("rt") / "state.db"
    store = Store(path)
    for i, job in enumerate(jobs):
        store.add_job(job, float(i))
    store.close()
    again = Store(path)  # a restart: nothing from the cache
    for job in jobs:
        rec = again.get(job.spec.job_id)
        assert rec is not None
        loaded = dataclasses.replace(rec.job, env=again.env(job.spec.job_id))
        assert loaded == job
        assert _everything(loaded) == _everything(job)
        assert all(f is resolve_flavor(f.name) for f in loaded.spec.flavors)
        # The whole job, env included, without the store's lean read.
        direct = LiveJob.from_json(job.to_json())
        assert direct == job and _everything(direct) == _everything(job)
    again.close()


def test_fields_main_dropped_are_kept() -> None:
    """``slowdown``, ``slo_factor`` and ``duration_hint_s`` were dropped by the hand-written
    encoder of format 1."""
    spec = JobSpec(JobId("j"), "command", 2, 10.0, 0.0, slo_factor=1.5, duration_hint_s=42.0,
                   elastic=ElasticRange(1, 4, 64, 512, "cifar10", 1e6, slowdown=1.8))
    job = LiveJob(spec, "j", ("true",), None, (), None)
    back = LiveJob.from_json(job.to_json())
    assert back.spec.slo_factor == 1.5 and back.spec.duration_hint_s == 42.0
    assert back.spec.elastic is not None and back.spec.elastic.slowdown == 1.8


def test_a_bad_row_in_the_store_names_its_job(tmp_path: Path) -> None:
    """An operator reading the error of a damaged row learns which job it is."""
    path = tmp_path / "state.db"
    shutil.copy(OLD_STATE, path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE jobs SET spec_json = ? WHERE job_id = 'j-rich'",
                   (json.dumps({"format": 2, "spec": {}}),))
    with pytest.raises(StoredJobError, match=r"^job j-rich: stored job"):
        Store(path).jobs()


def test_a_state_file_written_by_main_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    shutil.copy(OLD_STATE, path)
    store = Store(path)
    recs = {r.job_id: r.job for r in store.jobs()}
    assert list(recs) == ["j-plain", "j-rich", "j-elastic", "j-3d"]
    plain = recs["j-plain"]
    assert plain.argv == ("/bin/sh", "-c", "python train.py --epochs 3")
    assert plain.spec.exclusive and plain.spec.memory_gib is None and plain.spec.queue == "q-a"
    rich = recs["j-rich"]
    assert [f.short for f in rich.spec.flavors] == ["A100-80GB", "V100-16GB"]
    assert rich.spec.memory_gib == 12.5 and not rich.spec.exclusive
    assert rich.spec.priority_weight == 2.5 and rich.spec.max_retries == 3
    assert rich.spec.requires_locality and rich.max_runtime_s == 7200.0
    assert rich.checkpoint_dir == "/shared/ckpt/rich" and rich.global_batch == 256
    assert store.env("j-rich") == (("SEED", "7"), ("WANDB_MODE", "offline"))
    elastic = recs["j-elastic"].spec.elastic
    assert elastic == ElasticRange(1, 8, 256, 4096, "cifar10", 5000064.0)
    assert recs["j-3d"].spec.parallelism == ThreeDParallel("llama-7b", 64)
    # The old rows live on beside new ones, and walk the lifecycle as before.
    with store.tx() as db:
        store.transition(db, "j-plain", JobState.ADMITTED, 20.0)
    store.add_job(dataclasses.replace(rich, spec=dataclasses.replace(
        rich.spec, job_id=JobId("j-new"))), 21.0)
    store.close()
    again = Store(path)
    assert again.get("j-plain").state is JobState.ADMITTED  # type: ignore[union-attr]
    new = again.get("j-new")
    assert new is not None and new.job.spec.memory_gib == 12.5
    assert again.get("j-rich").job == rich  # type: ignore[union-attr]
    again.close()


@pytest.mark.parametrize(("change", "message"), [
    ({"format": 9}, "format 9 is newer than this tessera"),
    ({"spec": {"job_id": "j"}}, "stored job.spec: JobSpec lacks job_type"),
    ({"bogus": 1}, "unknown field\\(s\\) bogus for LiveJob"),
    ({"argv": "true"}, "stored job.argv: expected a list, got str"),
    ({"spec": "x"}, "stored job.spec: expected an object"),
], ids=["newer", "missing", "unknown", "argv-str", "spec-str"])
def test_a_bad_row_is_named(change: dict[str, Any], message: str) -> None:
    job = LiveJob(JobSpec(JobId("j"), "command", 1, 1.0, 0.0), "j", ("true",), None, (), None)
    d = json.loads(job.to_json())
    d.update(change)
    with pytest.raises(StoredJobError, match=message):
        decode_job(json.dumps(d), LiveJob)


def test_a_bad_value_in_a_row_is_named() -> None:
    job = LiveJob(JobSpec(JobId("j"), "command", 1, 1.0, 0.0), "j", ("true",), None, (), None)
    d = json.loads(job.to_json())
    d["spec"]["num_gpus"] = "four"
    with pytest.raises(StoredJobError, match=r"stored job\.spec\.num_gpus: expected int"):
        LiveJob.from_json(json.dumps(d))
    d["spec"]["num_gpus"] = 0
    with pytest.raises(StoredJobError, match="num_gpus must be >= 1"):
        LiveJob.from_json(json.dumps(d))
    d["spec"]["num_gpus"] = 1
    d["spec"]["flavors"] = ["V999"]
    with pytest.raises(StoredJobError, match="unknown GPU flavor 'V999'"):
        LiveJob.from_json(json.dumps(d))


def test_a_row_leaves_out_fields_at_their_default() -> None:
    """Rows count against the per-queue byte caps: a plain job's row is no bigger than the
    hand-written format's was (456 bytes for this job at a1eedee), because fields holding their
    default are left out -- and come back from the decoder."""
    job = to_live_job(parse_request("name: plain\ncommand: python train.py --epochs 3\n"),
                      "j-1", "q-a", 10.0)
    text = job.to_json()
    assert len(text) < 456
    row = json.loads(text)
    assert "priority_weight" not in row["spec"] and "max_retries" not in row["spec"]
    assert LiveJob.from_json(text) == job
