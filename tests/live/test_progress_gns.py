"""Reported gradient noise scale (issue 35 part 5, Pollux's agent, live): kept per job from
the progress reports, refused with a reason when bad, handed to the next decision."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tessera.live import lifecycle
from tessera.live import service as service_mod
from tessera.live.progress import GNS_WINDOW
from tessera.live.service import LiveService
from tessera.live.spec import parse_request
from tessera.live.tenancy import Principal
from tessera.model.jobs import JobState
from tessera.sched.core.snapshot import Placement, Snapshot
from tests.live.helpers import make_service
from tests.live.test_progress import _book

ADMIN = Principal("admin", None)


def test_the_noise_scale_is_the_median_of_the_latest_reports(tmp_path: Path) -> None:
    book = _book(tmp_path)
    tok = book.token("j-1", 1)
    values = [900.0, 5000.0, 1000.0, 1100.0, 1e9, 1200.0, 1300.0]  # two outliers
    for k, g in enumerate(values):
        assert book.report("j-1", 1, tok, {"steps": 10 * k, "gns": g}, 10.0 + 2 * k).status == 200
    kept = values[-GNS_WINDOW:]  # 1000, 1100, 1e9, 1200, 1300
    assert book.noise_scales() == {"j-1": sorted(kept)[len(kept) // 2]} == {"j-1": 1200.0}
    book.retain(set())
    assert book.noise_scales() == {}


@pytest.mark.parametrize(("gns", "why"), [(-3.0, "gns must be >= 0"),
                                          (math.nan, "gns must be finite"),
                                          (math.inf, "gns must be finite"),
                                          ("big", "gns must be a number")])
def test_a_bad_noise_scale_is_refused_with_a_reason_and_not_kept(
        tmp_path: Path, gns: object, why: str) -> None:
    book = _book(tmp_path)
    tok = book.token("j-1", 1)
    assert book.report("j-1", 1, tok, {"steps": 1, "gns": 50.0}, 10.0).status == 200
    bad = book.report("j-1", 1, tok, {"steps": 2, "gns": gns}, 12.0)
    assert bad.status == 422 and why in bad.detail
    assert bad.event is not None and why in bad.event
    assert book.noise_scales() == {"j-1": 50.0}


def test_the_next_decision_sees_the_reported_noise_scale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc: LiveService = make_service(tmp_path / "state", cluster="v100:1", gpus_per_server=1,
                                    start=False)
    text = "name: j\nqueue: team-a\ncommand: 'true'\ngpus: 1\nflavors: [V100]\n"
    jid = svc.submit(parse_request(text), ADMIN).job_id
    with svc.store.tx() as db:
        svc.store.add_allocation(db, jid, 1, Placement.of(svc.cluster.nodes[0].flavor,
                                                          (("v100-0", 1),)), 0.0)
        svc.store.transition(db, jid, JobState.ADMITTED, 0.0, "planned")
        a = svc.store.allocation(jid, 1)
        assert a is not None
        lifecycle.mark_running(svc.store, db, a, 0.0, "launched", svc.speeds)
    seen: list[Snapshot] = []
    real = service_mod.build_snapshot

    def spy(*args: object, **kw: object) -> Snapshot:
        snap = real(*args, **kw)  # type: ignore[arg-type]
        seen.append(snap)
        return snap

    monkeypatch.setattr(service_mod, "build_snapshot", spy)
    svc.round(5.0)
    assert seen[-1].jobs[0].noise_scale_samples is None  # no report yet: the table
    tok = svc.progress.token(jid, 1)
    assert svc.progress.report(jid, 1, tok, {"steps": 10, "gns": 2345.0}, 6.0).status == 200
    svc.round(8.0)
    assert seen[-1].jobs[0].noise_scale_samples == 2345.0
