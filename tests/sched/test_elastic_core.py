"""Elastic allocations in the core: sizes honoured, batches recorded, bad sizes refused, and
the one-configuration-per-job solver against exhaustive search."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import ElasticRange, JobId, JobState
from tessera.perf.sia_table import sia_throughputs
from tessera.sched.catalog import list_policies
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.core.snapshot import Placement, QueueQuota
from tessera.sched.elastic import ilp as elastic_ilp
from tessera.sched.elastic.goodput import Config
from tessera.sched.elastic.ilp import choose_configs
from tessera.sched.elastic.sizes import ElasticSize, even_batch
from tests.builders import make_cluster, make_job, snapshot, view

_T4 = resolve_flavor("T4")
_RTX = resolve_flavor("RTX2080Ti")

_A100_40GB = resolve_flavor("A100-40GB")

CIFAR = ElasticRange(1, 16, 2048, 4096, "cifar10", 5e6)
CIFAR_TYPE = "cifar10 (batch size 129)"


class _Fixed(Policy):
    """Test policy: returns the ranking it was built with."""

    preemptive = True
    round_based = True
    elastic = True

    def __init__(self, ranking: Ranking) -> None:
        super().__init__(name="fixed")
        self.ranking = ranking

    def rank(self, ctx: PolicyContext) -> Ranking:
        return self.ranking


def _decide(cluster, ranking, *views):  # type: ignore[no-untyped-def]
    ctx = DecisionContext(ThroughputOracle(sia_throughputs(), cluster), random.Random(0))
    return decide(snapshot(cluster, *views, round_s=60.0), _Fixed(ranking), ctx)


def _cluster():  # type: ignore[no-untyped-def]
    return make_cluster().node(_A100_40GB, gpus=8, count=2).build()


def test_a_sized_job_is_placed_at_its_count_with_its_batch() -> None:
    job = make_job("a", 2, job_type=CIFAR_TYPE, elastic=CIFAR)
    ranking = Ranking(((JobId("a"), _A100_40GB),), sizes={JobId("a"): ElasticSize(8, 3000)})
    d = _decide(_cluster(), ranking, view(job))
    p = d.placements["a"]
    assert (p.num_gpus, p.global_batch_samples, p.flavor) == (8, 3000, _A100_40GB)
    assert d.started == ("a",)


def test_a_running_job_at_the_same_count_keeps_its_gpus_and_batch() -> None:
    job = make_job("a", 2, job_type=CIFAR_TYPE, elastic=CIFAR)
    held = Placement.of(_A100_40GB, ((_cluster().nodes[0].node_id, 4),), global_batch_samples=2048)
    ranking = Ranking(((JobId("a"), _A100_40GB),), sizes={JobId("a"): ElasticSize(4, 4096)})
    d = _decide(_cluster(), ranking, view(job, JobState.RUNNING, held))
    assert d.placements["a"] is held and d.started == () and d.preempted == ()


def test_a_resized_running_job_is_started_again() -> None:
    job = make_job("a", 2, job_type=CIFAR_TYPE, elastic=CIFAR)
    held = Placement.of(_A100_40GB, ((_cluster().nodes[0].node_id, 4),), global_batch_samples=2048)
    ranking = Ranking(((JobId("a"), _A100_40GB),), sizes={JobId("a"): ElasticSize(2, 2048)})
    d = _decide(_cluster(), ranking, view(job, JobState.RUNNING, held))
    assert d.placements["a"].num_gpus == 2 and d.started == ("a",)


def test_a_size_outside_the_range_or_for_a_rigid_job_is_refused() -> None:
    job = make_job("a", 2, job_type=CIFAR_TYPE, elastic=CIFAR)
    too_big = Ranking(((JobId("a"), _A100_40GB),), sizes={JobId("a"): ElasticSize(32, 4096)})
    with pytest.raises(SpecError, match="32 GPUs is outside its elastic range 1-16"):
        _decide(_cluster(), too_big, view(job))
    rigid = make_job("r", 2, job_type=CIFAR_TYPE)
    resize = Ranking(((JobId("r"), _A100_40GB),), sizes={JobId("r"): ElasticSize(4, 64)})
    with pytest.raises(SpecError, match="job r is rigid"):
        _decide(_cluster(), resize, view(rigid))
    with pytest.raises(SpecError, match="elastic size needs >= 1 GPU"):
        ElasticSize(0, 64)


def test_unsized_rankings_leave_placements_without_a_batch() -> None:
    job = make_job("a", 2, job_type=CIFAR_TYPE, elastic=CIFAR)
    d = _decide(_cluster(), Ranking(((JobId("a"), _A100_40GB),)), view(job))
    assert d.placements["a"].num_gpus == 2 and d.placements["a"].global_batch_samples is None


def test_the_elastic_policies_are_registered() -> None:
    names = {name for name, _summary in list_policies()}
    assert {"sia", "pollux", "goodput_srpt"} <= names


CONFIGS = (Config(_T4, 1, 4), Config(_T4, 2, 4), Config(_T4, 4, 4),
           Config(_A100_40GB, 1, 8), Config(_A100_40GB, 2, 8), Config(_A100_40GB, 4, 8))


def _exhaustive(values, capacity):  # type: ignore[no-untyped-def]
    """Best objective over every assignment (one option or none per job)."""
    best = 0.0
    for choice in itertools.product(*[[None, *row] for row in values]):
        used: dict[str, int] = {}
        for opt in choice:
            if opt is not None:
                c = CONFIGS[opt[0]]
                used[c.flavor] = used.get(c.flavor, 0) + c.num_gpus
        if all(used.get(f, 0) <= capacity[f] for f in capacity):
            best = max(best, sum(opt[1] for opt in choice if opt is not None))
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("solver", ["dp", "mip"])
def test_the_solver_matches_exhaustive_search(seed: int, solver: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if solver == "mip":
        monkeypatch.setattr(elastic_ilp, "DP_MAX_STATES", 0)
    rng = random.Random(seed)
    values = [[(c, round(rng.uniform(0.1, 2.0) * CONFIGS[c].num_gpus ** 0.5, 3))
               for c in rng.sample(range(len(CONFIGS)), 4)] for _ in range(4)]
    capacity = {_T4: 4, _A100_40GB: 5}
    got = choose_configs(values, CONFIGS, capacity)
    assert got.fallback == ""
    assert got.objective == pytest.approx(_exhaustive(values, capacity), rel=1e-4)
    used: dict[str, int] = {}
    for j, c in got.picked.items():
        assert c in {k for k, _v in values[j]}
        used[CONFIGS[c].flavor] = used.get(CONFIGS[c].flavor, 0) + CONFIGS[c].num_gpus
    assert all(used[f] <= capacity[f] for f in used)


THREE = tuple(Config(f, n, per) for f, per in ((_A100_40GB, 8), (_RTX, 8), (_T4, 4))
              for n in range(1, 9))


def _plain_dp_tables(usable, shape, pinned):  # type: ignore[no-untyped-def]
    """The knapsack's tables the plain way: one shifted slice per option, in option order."""
    tables = [np.zeros(shape)]
    for j, opts in enumerate(usable):
        best = tables[-1]
        new = best.copy() if j not in pinned else np.full(shape, -np.inf)
        for _k, ax, g, v in opts:
            src = [slice(None)] * len(shape)
            dst = [slice(None)] * len(shape)
            src[ax] = slice(0, shape[ax] - g)
            dst[ax] = slice(g, None)
            new[tuple(dst)] = np.maximum(new[tuple(dst)], best[tuple(src)] + v)
        tables.append(new)
    return tables


@pytest.mark.parametrize("seed", range(40))
def test_the_dp_step_gives_the_plain_tables_bit_for_bit(seed: int) -> None:
    """Option by option along the outermost axis (:func:`elastic_ilp._step`) or one slice per
    option: the same tables, so the same picks, ties included (values on a coarse grid tie
    often; some jobs pinned)."""
    rng = random.Random(seed)
    capacity = {_A100_40GB: rng.randint(0, 8), _RTX: rng.randint(0, 8),
                _T4: rng.randint(0, 8)}
    flavors = sorted(capacity, key=lambda f: f.short)
    shape = tuple(capacity[f] + 1 for f in flavors)
    values = [[(c, rng.randint(1, 12) / 4) for c in rng.sample(range(len(THREE)), 7)]
              for _ in range(rng.randint(1, 9))]
    pinned = {j: row[0][0] for j, row in enumerate(values) if rng.random() < 0.15}
    usable = [[(k, flavors.index(THREE[c].flavor), THREE[c].num_gpus, v)
               for k, (c, v) in enumerate(row)
               if pinned.get(j, c) == c and THREE[c].num_gpus <= capacity[THREE[c].flavor]]
              for j, row in enumerate(values)]
    plain = _plain_dp_tables(usable, shape, pinned)
    best = np.zeros(shape)
    buf = np.empty(best.size)
    for j, opts in enumerate(usable):
        best = elastic_ilp._step(best, opts, j in pinned, buf)
        assert np.array_equal(best, plain[j + 1])
    got = elastic_ilp._dp(values, THREE, capacity, pinned)
    if not got.fallback:
        assert repr(got.objective) == repr(float(plain[-1][tuple(capacity[f] for f in flavors)]))


def test_a_pinned_job_keeps_its_configuration() -> None:
    values = [[(2, 1.0), (0, 5.0)], [(1, 3.0)]]
    got = choose_configs(values, CONFIGS, {_T4: 4, _A100_40GB: 0}, pinned={0: 2})
    assert got.picked == {0: 2}  # pinned to 4 T4s although 1 T4 is worth more


def test_pins_that_no_longer_fit_fall_back_to_a_stated_greedy_answer() -> None:
    got = choose_configs([[(2, 1.0)], [(2, 1.0)]], CONFIGS, {_T4: 4, _A100_40GB: 0},
                         pinned={0: 2, 1: 2})
    assert "pinned jobs no longer fit" in got.fallback


def _quota_decide(ranking, quotas, *views):  # type: ignore[no-untyped-def]
    cluster = _cluster()
    ctx = DecisionContext(ThroughputOracle(sia_throughputs(), cluster), random.Random(0))
    snap = snapshot(cluster, *views, round_s=60.0, quotas={q.name: q for q in quotas})
    return decide(snap, _Fixed(ranking), ctx)


def test_growth_past_the_queue_quota_is_refused_and_the_job_runs_at_its_own_size() -> None:
    a = make_job("a", 2, job_type=CIFAR_TYPE, elastic=CIFAR, queue="team")
    b = make_job("b", 2, job_type=CIFAR_TYPE, elastic=CIFAR, queue="team")
    ranking = Ranking(((JobId("a"), _A100_40GB), (JobId("b"), _A100_40GB)),
                      sizes={JobId("a"): ElasticSize(4, 4096), JobId("b"): ElasticSize(8, 4096)})
    d = _quota_decide(ranking, [QueueQuota("team", 6, 0)], view(a), view(b))
    # a grows 2 -> 4 (team: 4 + b's own 2 = 6); b's growth to 8 would make 12 > 6.
    assert d.placements["a"].num_gpus == 4 and d.placements["a"].global_batch_samples == 4096
    assert d.placements["b"].num_gpus == 2 and d.placements["b"].global_batch_samples is None
    assert "growth to 8 GPUs refused" in d.notes["b"] and "limit of 6" in d.notes["b"]


def test_borrowing_limit_and_unlimited_queues_bound_growth() -> None:
    a = make_job("a", 2, job_type=CIFAR_TYPE, elastic=CIFAR, queue="team")
    ranking = Ranking(((JobId("a"), _A100_40GB),), sizes={JobId("a"): ElasticSize(8, 4096)})
    assert _quota_decide(ranking, [QueueQuota("team", 4, 4)], view(a)).placements[
        "a"].num_gpus == 8
    assert _quota_decide(ranking, [QueueQuota("team", 4, 2)], view(a)).placements[
        "a"].num_gpus == 2
    assert _quota_decide(ranking, [QueueQuota("team", 4, None)], view(a)).placements[
        "a"].num_gpus == 8
    assert _quota_decide(ranking, [QueueQuota("other", 1, 0)], view(a)).placements[
        "a"].num_gpus == 8


def test_admission_counts_a_grown_running_job_at_the_gpus_it_holds() -> None:
    grown = make_job("g", 2, job_type=CIFAR_TYPE, elastic=CIFAR, queue="team")
    held = Placement.of(_A100_40GB, ((_cluster().nodes[0].node_id, 6),), global_batch_samples=4096)
    waiting = make_job("w", 2, queue="team")
    ranking = Ranking(((JobId("g"), _A100_40GB), (JobId("w"), _A100_40GB)),
                      sizes={JobId("g"): ElasticSize(6, 4096)})
    d = _quota_decide(ranking, [QueueQuota("team", 6, 0)],
                      view(grown, JobState.RUNNING, held), view(waiting))
    assert d.placements["g"] is held
    assert "w" not in d.placements and d.pending["w"].kind.name == "QUOTA"


@pytest.mark.parametrize("policy", ["sia", "pollux", "goodput_srpt"])
def test_elastic_policies_never_take_a_queue_past_its_quota(policy: str) -> None:
    """Rounds fed back into the next snapshot (running gangs, the policy's memory): the
    policies grow jobs round after round, never past a queue's nominal + borrowing limit."""
    from tessera.sched.catalog import make_policy

    cluster = _cluster()
    quotas = {"q0": QueueQuota("q0", 3, 1)}
    specs = [make_job(f"j{i}", 1, job_type=CIFAR_TYPE, elastic=CIFAR, queue=f"q{i % 2}",
                      submit_s=float(i)) for i in range(4)]
    ctx = DecisionContext(ThroughputOracle(sia_throughputs(), cluster), random.Random(0))
    pol = make_policy(policy)
    state = None
    placed: dict[JobId, Placement] = {}
    grew = False
    for r in range(6):
        views = [view(s, JobState.RUNNING, placed[s.job_id]) if s.job_id in placed else view(s)
                 for s in specs]
        d = decide(snapshot(cluster, *views, now_s=60.0 * r, round_s=60.0, quotas=quotas,
                            policy_state=state), pol, ctx)
        state, placed = d.policy_state, dict(d.placements)
        q0 = sum(p.num_gpus for jid, p in placed.items() if int(jid[1:]) % 2 == 0)
        assert q0 <= 4, (r, {k: p.num_gpus for k, p in placed.items()})
        grew = grew or any(p.num_gpus > 2 for p in placed.values())
    assert grew, "the unbounded queue's jobs still grow"


def test_an_odd_global_batch_is_moved_to_one_that_splits_evenly_over_the_ranks() -> None:
    assert even_batch(513, 4, 128, 1024) == 512  # 128 per rank, not 129/128/128/128
    assert even_batch(515, 4, 128, 1024) == 516  # the nearer multiple
    assert even_batch(514, 4, 128, 1024) == 512  # a tie goes to the smaller batch
    assert even_batch(1023, 8, 128, 1020) == 1016  # the upper end of the range holds
    assert even_batch(100, 3, 101, 200) == 102  # and the lower
    assert even_batch(130, 8, 129, 135) is None  # no multiple of 8 in range
    with pytest.raises(SpecError, match="at least 1 rank"):
        even_batch(64, 0, 1, 128)


@pytest.mark.parametrize("policy", ["sia", "pollux", "goodput_srpt"])
def test_every_chosen_batch_splits_evenly_or_says_why_not(policy: str) -> None:
    from tessera.sched.catalog import make_policy

    c = make_cluster().node(_T4, gpus=4, count=2).node(_A100_40GB, gpus=8).build()
    views = [view(make_job(f"j{i}", 1, job_type=CIFAR_TYPE,
                           elastic=ElasticRange(1, 16, 2047, 4093, "cifar10", 5e6)))
             for i in range(3)]
    # 2047-4093 holds multiples of every count; 4093-4095 holds none of 8
    views.append(view(make_job("odd", 8, job_type=CIFAR_TYPE,
                               elastic=ElasticRange(8, 8, 4093, 4095, "cifar10", 5e6))))
    ctx = PolicyContext(snapshot(c, *views, now_s=600.0, round_s=60.0),
                        ThroughputOracle(sia_throughputs(), c), random.Random(0))
    r = make_policy(policy, {"explore": False}).rank(ctx)  # (sizes above 1 GPU at once)
    assert JobId("odd") in r.sizes and len(r.sizes) > 1
    for jid, size in r.sizes.items():
        if jid == JobId("odd"):
            assert "splits evenly over 8 ranks" in r.notes[jid]
        else:
            assert size.global_batch_samples % size.num_gpus == 0, (jid, size)
