"""Issue 35 part 5: the cost of ``--goodput reported`` -- a job's published step-time fit is
versioned and moves only when the fit does, so the policies' caches stay warm."""

from __future__ import annotations

import pytest

from tessera.errors import SpecError
from tessera.model.jobs import JobState
from tessera.perf.goodput_fit import ThroughputParams, fit_throughput
from tessera.perf.step_book import StepBook, moved
from tessera.sched.core.snapshot import Placement
from tessera.sched.elastic.goodput import GoodputModel, sia_configs
from tessera.sched.elastic.policy import ElasticMemory
from tessera.workload.elastic import elastic_range
from tests.builders import make_job, view
from tests.sched.test_elastic_policies import _A100_40GB, _T4, TYPE, _cluster, _rank

TRUTH = ThroughputParams(0.02, 0.0004, 0.03, 0.002, 2.0)


def _obs(*sizes: tuple[int, float]) -> list[tuple[int, float, float]]:
    return [(n, m, TRUTH.iteration_s(n, m)) for n, m in sizes]


def test_an_observation_the_fit_already_predicts_moves_nothing() -> None:
    book = StepBook()
    assert book.observe("a", _A100_40GB, _obs((1, 32), (1, 128), (2, 64), (4, 64), (8, 32)))
    fits, refits = book.fits("a"), book.refits
    assert book.version("a") == 1
    # the same sizes again, and a size the fit predicts within 1 %: no refit, same object
    assert not book.observe("a", _A100_40GB, _obs((1, 32), (4, 64)))
    assert not book.observe("a", _A100_40GB, _obs((16, 64)))
    assert book.fits("a") is fits and book.version("a") == 1 and book.refits == refits


def test_a_surprising_observation_moves_only_that_jobs_fit() -> None:
    book = StepBook()
    book.observe("a", _A100_40GB, _obs((1, 32), (1, 128)))
    book.observe("b", _A100_40GB, _obs((1, 32), (1, 128)))
    b_fits = book.fits("b")
    # a's first multi-GPU gang: sync time the one-GPU fit could not know
    assert book.observe("a", _A100_40GB, _obs((4, 64)))
    assert book.version("a") == 2 and book.version("b") == 1 and book.fits("b") is b_fits
    # another flavor is fitted beside the first
    assert book.observe("a", _T4, [(1, 32.0, 0.5)])
    assert [f for f, _p in book.fits("a")] == [_A100_40GB, _T4]


def test_a_refit_within_tolerance_is_not_republished() -> None:
    """Tolerance 5 %: a 6 % surprise at a third local batch refits, but the refit (over all
    three) moves no prediction by 5 %, so the published object stays; tolerance 0
    republishes it."""
    for tol, republished in ((0.05, False), (0.0, True)):
        book = StepBook(tol)
        book.observe("a", _A100_40GB, _obs((1, 32), (1, 128)))
        before, refits = book.fits("a"), book.refits
        n, m, s = _obs((1, 64))[0]
        book.observe("a", _A100_40GB, [(n, m, s * 1.06)])
        assert book.refits == refits + 1
        assert (book.fits("a") is not before) == republished, tol
    assert moved(TRUTH, ThroughputParams(0.02, 0.0004, 0.03, 0.002, 2.1), [(1, 64)], 0.0)
    with pytest.raises(SpecError, match="tolerance"):
        StepBook(-0.1)


def test_same_fit_same_decision_and_no_cache_miss() -> None:
    """Where a job's fit is unchanged the policy's rows come from its cache (no new entry)
    and the decision is the same as before the observation."""
    book = StepBook()
    book.observe("a", _A100_40GB, _obs((1, 32), (1, 128), (2, 64), (4, 64)))
    e = elastic_range("cifar10", 1, 2048)
    spec = make_job("a", 1, job_type=TYPE, elastic=e)
    held = Placement.of(_A100_40GB, ((_cluster().nodes[1].node_id, 2),),
                        global_batch_samples=2048)

    def decide(fits):  # type: ignore[no-untyped-def]
        v = view(spec, JobState.RUNNING, held, as_of_s=4000.0, step_fits=fits)
        return _rank("pollux", [v], now_s=4000.0,
                     state=ElasticMemory(largest_run={spec.job_id: 8})).sizes["a"]

    first = decide(book.fits("a"))
    model, configs = GoodputModel(), sia_configs(_cluster().nodes)
    model.row(spec, configs, 8, 0.0, None, book.fits("a"))
    cached = len(model._rows), len(model._cache)
    book.observe("a", _A100_40GB, _obs((8, 64)))  # predicted: no move
    model.row(spec, configs, 8, 0.0, None, book.fits("a"))
    assert (len(model._rows), len(model._cache)) == cached
    assert decide(book.fits("a")) == first


def test_the_fit_solves_only_what_it_observed_and_is_fast() -> None:
    fit = fit_throughput(_obs((1, 32), (1, 64)))  # one GPU: a linear solve, gamma 1
    assert (fit.alpha_sync_s, fit.beta_sync_s_per_gpu, fit.gamma) == (0.0, 0.0, 1.0)
    assert fit.alpha_grad_s == pytest.approx(0.02, rel=1e-6)
    many = fit_throughput(_obs((1, 32), (1, 64), (2, 64), (4, 32), (8, 128)))
    assert many.iteration_times_s(4, [32.0, 64.0], [1, 3]) == pytest.approx(
        [many.iteration_s(4, 32.0), many.iteration_s(4, 64.0, 3)])
    for n, m, s in _obs((16, 64), (4, 256)):
        assert many.iteration_s(n, m) == pytest.approx(s, rel=0.01)
