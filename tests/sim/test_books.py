"""The world's incremental books equal fresh builds at every decision of whole runs.

Three structures are kept up to date between rounds instead of being rebuilt at each one:

* the free-GPU book (:class:`~tessera.sched.core.free_book.FreeBook`): per-node counts, per-flavor
  totals and layout-ordered buckets, which a round's placement starts from;
* the view book's running gangs the move memory may not hold
  (:meth:`~tessera.sim.views.ViewBook.unheld`), which an upgrade check looks at instead of
  every running gang;
* the GPUs the running jobs ask for (:class:`~tessera.sim.running.RunningJobs`), which every
  utilisation sample reads.

These tests check both against a build from scratch at every decision (event and round
drivers, preemptions and moves, failures with retries), and that a deliberately broken book
fails the check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from tessera.sched.core.context import StayPut
from tessera.sched.core.decide import Decision
from tessera.sched.core.free_book import FreeBook
from tessera.sched.core.placement import FreeGpus
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.core.snapshot import JobSplit, JobView, Snapshot
from tessera.sim.config import FailureConfig, SimConfig, ValidationConfig
from tessera.sim.views import ViewBook
from tessera.sim.world import SimWorld
from tests.builders import busy_simulator

_FAILING = FailureConfig(job_failure_rate=0.5, retry_delay_s=30.0)


def _fresh_free(world: SimWorld) -> FreeBook:
    """The free-GPU book built from scratch: every node's GPUs minus the running gangs'."""
    used: dict[str, int] = {}
    for j in world.running.values():
        assert j.placement is not None
        for n, c in j.placement.gpus_by_node:
            used[n] = used.get(n, 0) + c
    layout = world.free.layout
    return FreeBook(layout, {n: cap - used.get(n, 0) for n, cap in layout.capacity.items()})


def check_free(world: SimWorld, snap: Snapshot) -> None:
    """The world's book equals a fresh one, and a round starting from it answers as one
    starting from plain counts."""
    book, fresh = world.free, _fresh_free(world)
    assert dict(book) == dict(fresh)
    for f in book.layout.by_flavor:
        assert book.total(f) == fresh.total(f)
        for k in range(book.layout.size[f] + 1):
            assert book.positions(f, k) == fresh.positions(f, k), (f, k)
    layout = world.ctx.layout(world.cluster)
    over_book = FreeGpus.of_snapshot(snap, layout)
    plain = FreeGpus(world.cluster.nodes, dict(fresh), layout)
    for f in layout.by_flavor:
        assert over_book.info(f) == plain.info(f)
        for g in (1, 2, 3, 4, 6, 8):
            for local in (True, False):
                assert over_book.find(f, g, local) == plain.find(f, g, local), (f, g, local)


def check_unheld(world: SimWorld, snap: Snapshot) -> None:
    """The running gangs the view book offers are exactly those a walk finds unheld."""
    stay_put: StayPut = world.ctx.stay_put
    split = snap.split()
    walked = [j for j in split.running if not stay_put.holds(j)]
    assert stay_put.unsettled(split) == walked


def check_running(world: SimWorld, snap: Snapshot) -> None:
    """The running jobs' GPU count the samples read equals a fresh sum."""
    assert world.running.gpus == sum(j.spec.num_gpus for j in world.running.values())


def _checked_run(policy: str, cfg: SimConfig,
                 checks: Sequence[Callable[[SimWorld, Snapshot], None]]) -> int:
    """Run ``policy`` and apply ``checks`` before every decision; returns the decisions."""
    sim = busy_simulator(policy, cfg, k80_nodes=3)
    world = sim.world
    decisions = 0
    world_decide = world.decide

    def checked(snap: Snapshot, opts: object = None) -> Decision:
        nonlocal decisions
        if snap.free_gpus is not None:
            for check in checks:
                check(world, snap)
        decisions += 1
        return world_decide(snap, opts)  # type: ignore[arg-type]

    world.decide = checked  # type: ignore[method-assign]
    sim.run()
    return decisions


@pytest.mark.parametrize("policy,mode,failures", [
    ("las", "events", _FAILING), ("las", "events", FailureConfig()),
    ("fifo", "events", _FAILING), ("max_min_fairness", "rounds", _FAILING),
    ("hetero_srpt", "rounds", FailureConfig()),
])
def test_books_equal_fresh_builds_at_every_decision(policy: str, mode: str,
                                                    failures: FailureConfig) -> None:
    cfg = SimConfig(scheduler=SchedulerSettings(mode=mode), failures=failures)  # type: ignore[arg-type]
    assert _checked_run(policy, cfg, (check_free, check_unheld, check_running)) > 10


def test_running_gpus_equal_a_fresh_sum_with_pre_run_validation() -> None:
    # (validation swaps a job's spec for a 1-GPU one and back: only while it is stopped)
    cfg = SimConfig(failures=_FAILING, validation=ValidationConfig(min_gpus=2, validation_s=60))
    assert _checked_run("las", cfg, (check_running,)) > 10


def test_a_book_that_forgets_its_buckets_fails_the_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def counts_only(self: FreeBook, node_id: str, count: int) -> None:
        self._free[node_id] = count  # (the buckets and totals are left behind)
        self.version += 1

    monkeypatch.setattr(FreeBook, "__setitem__", counts_only)
    with pytest.raises(AssertionError):
        _checked_run("las", SimConfig(), (check_free,))


def test_a_book_that_drops_an_unheld_gang_fails_the_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    honest = ViewBook.unheld

    def drops_last(self: ViewBook, split: JobSplit, stay_put: StayPut
                   ) -> Sequence[JobView] | None:
        maybe = honest(self, split, stay_put)
        return maybe[:-1] if maybe else maybe

    monkeypatch.setattr(ViewBook, "unheld", drops_last)
    with pytest.raises(AssertionError):
        _checked_run("las", SimConfig(), (check_unheld,))
