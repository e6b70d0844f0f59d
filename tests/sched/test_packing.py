"""Space sharing: the pair table, the rules that refuse a pair, and packing in ``decide``."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobId, JobState
from tessera.perf.colocation import PairRates, PairRefusal, pair_rates
from tessera.perf.profiles import ThroughputTable, default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.core.context import DecisionContext
from tessera.sched.core.decide import decide
from tessera.sched.core.oracle import ThroughputOracle
from tessera.sched.core.policy import Policy, PolicyContext, Ranking
from tessera.sched.core.snapshot import Placement
from tessera.sched.packing.pairs import check_pair, colocate, may_share
from tests.builders import make_cluster, make_job, snapshot, view

_K80 = resolve_flavor("K80")

TABLE = default_throughputs()
V100 = resolve_flavor("v100")
R18_16 = "ResNet-18 (batch size 16)"
R18_64 = "ResNet-18 (batch size 64)"
R50_64 = "ResNet-50 (batch size 64)"
R50_128 = "ResNet-50 (batch size 128)"
CLUSTER = make_cluster().node("v100", gpus=1, count=2).build()


def test_measured_pair_gives_both_speeds_in_the_order_asked() -> None:
    a, b = make_job("a", job_type=R18_16), make_job("b", job_type=R18_64)
    ab = pair_rates(TABLE, a, b, V100)
    ba = pair_rates(TABLE, b, a, V100)
    assert isinstance(ab, PairRates) and isinstance(ba, PairRates)
    assert (ab.first_steps_per_s, ab.second_steps_per_s) == (
        ba.second_steps_per_s, ba.first_steps_per_s)
    alone_a = TABLE.throughput(R18_16, V100)
    alone_b = TABLE.throughput(R18_64, V100)
    assert ab.first_steps_per_s <= alone_a and ab.second_steps_per_s <= alone_b
    assert 1.0 < ab.normalized_sum(alone_a, alone_b) <= 2.0


def test_pair_measured_not_to_run_is_refused() -> None:
    got = pair_rates(TABLE, make_job("a", job_type=R50_64), make_job("b", job_type=R50_128),
                     V100)
    assert isinstance(got, PairRefusal) and "measured not to run" in str(got)


def test_pair_without_measurement_is_refused_never_guessed() -> None:
    bare = ThroughputTable("no pairs", TABLE.isolated, {})
    got = pair_rates(bare, make_job("a", job_type=R18_16), make_job("b", job_type=R18_64), V100)
    assert isinstance(got, PairRefusal) and "no co-location measurement" in str(got)


def test_gangs_of_different_sizes_never_share() -> None:
    got = pair_rates(TABLE, make_job("a", gpus=2, job_type=R18_16),
                     make_job("b", gpus=1, job_type=R18_64), V100)
    assert isinstance(got, PairRefusal) and "different gang sizes" in str(got)


def test_exclusive_job_is_refused() -> None:
    host = make_job("h", job_type=R18_16)
    partner = make_job("p", job_type=R18_64, exclusive=True)
    got = may_share(TABLE, CLUSTER, host, partner, V100)
    assert isinstance(got, PairRefusal) and "job p is exclusive" in str(got)
    got = may_share(TABLE, CLUSTER, replace(host, exclusive=True), replace(partner,
                    exclusive=False), V100)
    assert isinstance(got, PairRefusal) and "job h is exclusive" in str(got)


def test_pair_that_does_not_fit_memory_is_refused() -> None:
    host = make_job("h", job_type=R18_16, memory_gib=10.0)
    partner = make_job("p", job_type=R18_64, memory_gib=7.5)
    got = may_share(TABLE, CLUSTER, host, partner, V100)
    assert isinstance(got, PairRefusal) and "10 + 7.5 GiB" in str(got)
    small = replace(partner, memory_gib=4.0)
    assert isinstance(may_share(TABLE, CLUSTER, host, small, V100), PairRates)


@pytest.mark.parametrize("bad", [-1.0, 0.0, float("nan"), float("inf")])
def test_bad_memory_estimate_is_refused_where_the_job_is_made(bad: float) -> None:
    """The estimate is a typed field checked when the spec is built (the edge), so the core
    never meets a bad one: decide() cannot raise on it."""
    with pytest.raises(SpecError, match="memory_gib must be a positive number of GiB"):
        make_job("x", memory_gib=bad)


def test_decide_never_parses_a_string_memory_estimate() -> None:
    """A trace column named memory_gib in ``extra`` is an annotation: packing reads only the
    typed field (today's main parsed the string inside decide() and raised SpecError)."""
    host = make_job("a", job_type=R18_16, extra={"memory_gib": "lots"})
    partner = make_job("b", job_type=R18_64, extra={"memory_gib": "-1"})
    d = _decide(_PairUp(), view(host), view(partner))
    assert set(d.placements) == {"a", "b"}  # type: ignore[attr-defined]


def test_partner_must_accept_the_hosts_flavor_and_pairs_only() -> None:
    host = make_job("h", job_type=R18_16)
    partner = make_job("p", job_type=R18_64, flavors=(resolve_flavor("k80"),))
    got = may_share(TABLE, CLUSTER, host, partner, V100)
    assert isinstance(got, PairRefusal) and "does not accept" in str(got)
    shared = Placement.of(V100, (("n", 1),), colocated_with=(JobId("q"),))
    got = check_pair(TABLE, CLUSTER, host, make_job("p", job_type=R18_64), shared)
    assert isinstance(got, PairRefusal) and "only pairs" in str(got)


def test_colocate_puts_partner_on_host_gpus_and_explains() -> None:
    h, p, x = (view(make_job("h", job_type=R18_16)), view(make_job("p", job_type=R18_64)),
               view(make_job("x", job_type=R18_64, exclusive=True)))
    node = CLUSTER.nodes[0].node_id
    run = {h.job_id: Placement.of(V100, ((node, 1),))}
    packed = colocate(run, {p.job_id: h.job_id, x.job_id: h.job_id},
                      {j.job_id: j for j in (h, p, x)}, TABLE, CLUSTER)
    assert packed.placements[p.job_id].gpus_by_node == ((node, 1),)
    assert packed.placements[p.job_id].colocated_with == (h.job_id,)
    assert packed.placements[h.job_id].colocated_with == (p.job_id,)
    assert x.job_id not in packed.placements
    assert "shares 1×V100-16GB with job p" in packed.notes[h.job_id]
    assert "exclusive" in packed.notes[x.job_id] or "only pairs" in packed.notes[x.job_id]
    alone = colocate({}, {p.job_id: h.job_id}, {j.job_id: j for j in (h, p)}, TABLE, CLUSTER)
    assert p.job_id not in alone.placements
    assert "is not running this round" in alone.notes[p.job_id]


class _PairUp(Policy):
    """A test policy: the first job hosts, the second is its partner."""

    round_based = True
    preemptive = True
    packs = True

    def rank(self, ctx: PolicyContext) -> Ranking:
        a, b = ctx.snapshot.jobs[0].job_id, ctx.snapshot.jobs[1].job_id
        return Ranking(((a, V100),), colocate={b: a})


def _decide(policy: Policy, *views_: object) -> object:
    cluster = make_cluster().node("v100", gpus=1).build()
    snap = snapshot(cluster, *views_, round_s=360.0)  # type: ignore[arg-type]
    return decide(snap, policy, DecisionContext(ThroughputOracle(TABLE, cluster),
                                                random.Random(0)))


def test_decide_packs_a_measured_pair_on_one_gpu() -> None:
    d = _decide(_PairUp(), view(make_job("a", job_type=R18_16)),
                view(make_job("b", job_type=R18_64)))
    assert set(d.placements) == {"a", "b"}  # type: ignore[attr-defined]
    pa, pb = d.placements["a"], d.placements["b"]  # type: ignore[attr-defined]
    assert pa.gpus_by_node == pb.gpus_by_node and pa.colocated_with == ("b",)
    assert "shares" in d.notes["b"]  # type: ignore[attr-defined]
    assert not d.pending  # type: ignore[attr-defined]


@pytest.mark.parametrize(("partner", "why"), [
    (make_job("b", job_type=R18_64, exclusive=True), "exclusive"),
    (make_job("b", job_type=R18_64, gpus=2), "different gang sizes"),
    (make_job("b", job_type=R18_64, memory_gib=15.0), "GiB"),
])
def test_decide_refuses_a_bad_pair_with_a_reason(partner: object, why: str) -> None:
    host = make_job("a", job_type=R18_16, memory_gib=6.0)
    d = _decide(_PairUp(), view(host), view(partner))  # type: ignore[arg-type]
    assert set(d.placements) == {"a"}  # type: ignore[attr-defined]
    assert why in d.notes["b"]  # type: ignore[attr-defined]
    assert "b" in d.pending  # type: ignore[attr-defined]


def test_hetero_pack_packs_a_waiting_job_when_the_pair_pays() -> None:
    # One V100; two ResNet-18s whose measured pair does 1.7× the work of one alone.
    a = view(make_job("a", job_type=R18_16, steps=1e6))
    b = view(make_job("b", job_type=R18_64, steps=1e6, submit_s=1.0))
    d = _decide(make_policy("hetero_pack"), a, b)
    assert set(d.placements) == {"a", "b"}  # type: ignore[attr-defined]
    assert d.placements["a"].colocated_with or d.placements["b"].colocated_with  # type: ignore[attr-defined]
    # The same with the partner exclusive: it waits (never proposed).
    d = _decide(make_policy("hetero_pack"), a, replace(b, spec=replace(b.spec, exclusive=True)))
    assert len(d.placements) == 1  # type: ignore[attr-defined]


def test_hetero_pack_does_not_pack_a_pair_that_does_not_pay() -> None:
    a = view(make_job("a", job_type=R50_64, steps=1e6))
    b = view(make_job("b", job_type=R50_128, steps=1e6, submit_s=1.0))
    d = _decide(make_policy("hetero_pack"), a, b)
    assert len(d.placements) == 1  # type: ignore[attr-defined]


def test_running_state_is_untouched_by_packing_for_non_packing_policies() -> None:
    a = view(make_job("a", job_type=R18_16), JobState.PENDING)
    d = _decide(make_policy("hetero_gittins"), a)
    assert d.placements["a"].colocated_with == ()  # type: ignore[attr-defined]


A3C = "A3C"
MIXED = make_cluster().node("v100", gpus=1).node("k80", gpus=1).build()


def _decide_on(cluster: object, policy: Policy, *views_: object) -> object:
    snap = snapshot(cluster, *views_, round_s=360.0)  # type: ignore[arg-type]
    return decide(snap, policy, DecisionContext(ThroughputOracle(TABLE, cluster),  # type: ignore[arg-type]
                                                random.Random(0)))


def _flavors(d: object) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {str(j): (p.flavor, p.colocated_with)
            for j, p in d.placements.items()}  # type: ignore[attr-defined]


def test_hetero_pack_moves_a_job_from_a_slow_gpu_to_half_a_fast_one() -> None:
    # One V100, one K80, nobody waits. ResNet-18 does 4.8 steps/s alone on the K80 and 20.4
    # beside a ResNet-50 on the V100, which keeps 4.07 of its 4.39: the pair on the V100 wins.
    a = view(make_job("a", job_type=R50_64, steps=1e6))
    b = view(make_job("b", job_type=R18_16, steps=1e6, submit_s=1.0))
    got = _flavors(_decide_on(MIXED, make_policy("hetero_pack"), a, b))
    assert set(got) == {"a", "b"}
    assert {fl for fl, _with in got.values()} == {V100}
    assert got["a"][1] == ("b",) and got["b"][1] == ("a",)
    # Without ``move_slow`` only waiting jobs pair: each runs alone, one on each GPU.
    alone = make_policy("hetero_pack", {"move_slow": False})
    got = _flavors(_decide_on(MIXED, alone, a, b))
    assert sorted(fl.short for fl, _with in got.values()) == ["K80", "V100-16GB"]
    assert all(not w for _fl, w in got.values())


def test_hetero_pack_leaves_a_job_on_its_slow_gpu_when_half_a_fast_one_is_worse() -> None:
    # A3C beside a ResNet-50 on the V100 does 1.7 steps/s (3.4 alone on the K80) and costs
    # the ResNet-50 a third of its speed: no pair.
    a = view(make_job("a", job_type=R50_64, steps=1e6))
    b = view(make_job("b", job_type=A3C, steps=1e6, submit_s=1.0))
    got = _flavors(_decide_on(MIXED, make_policy("hetero_pack"), a, b))
    assert sorted(fl.short for fl, _with in got.values()) == ["K80", "V100-16GB"]
    assert all(not w for _fl, w in got.values())


def test_hetero_pack_counts_the_restart_of_a_running_job_that_would_move() -> None:
    # The ResNet-18 already runs alone on the K80. With a restart as long as the round, moving
    # it can gain nothing this round, so it stays; the same job waiting still joins the V100.
    k80 = next(n for n in MIXED.nodes if n.flavor == _K80)
    a = view(make_job("a", job_type=R50_64, steps=1e6))
    running = view(make_job("b", job_type=R18_16, steps=1e6, submit_s=1.0), JobState.RUNNING,
                   Placement.of(resolve_flavor("K80"), ((k80.node_id, 1),)))
    costly = make_policy("hetero_pack", {"restart_s": 360.0})
    got = _flavors(_decide_on(MIXED, costly, a, running))
    assert got["b"] == (_K80, ())
    waiting = view(make_job("b", job_type=R18_16, steps=1e6, submit_s=1.0))
    got = _flavors(_decide_on(MIXED, costly, a, waiting))
    assert got["b"][0] == V100 and got["b"][1] == ("a",)


def test_hetero_pack_gives_the_fast_gpu_to_the_job_it_speeds_up_most() -> None:
    # A young A3C (2× faster on a V100 than on a K80) and an old ResNet-50 (several times
    # faster there). By completion rate the young job, expected to end soon, takes the V100
    # (hetero_gittins); by normalised throughput the ResNet-50 does (hetero_pack).
    young = view(make_job("young", job_type=A3C, steps=1e6, submit_s=1.0))
    old = view(make_job("old", job_type=R50_64, steps=1e7), remaining_steps=5e6)
    by_rate = _flavors(_decide_on(MIXED, make_policy("hetero_gittins"), young, old))
    assert by_rate == {"young": (V100, ()), "old": (_K80, ())}
    by_speedup = _flavors(_decide_on(MIXED, make_policy("hetero_pack"), young, old))
    assert by_speedup == {"young": (_K80, ()), "old": (V100, ())}


ONE_EACH = make_cluster().node("v100", gpus=1).node("p100", gpus=1).node("k80", gpus=1).build()
ONE_GPU_TYPES = (R18_16, R18_64, R50_64, R50_128, A3C, "LM (batch size 20)",
                 "Transformer (batch size 64)", "CycleGAN", "Recommendation (batch size 512)")


def _normalised(spec: object, oracle: ThroughputOracle, steps_per_s: float) -> float:
    return steps_per_s / oracle.best_rate(spec)  # type: ignore[arg-type]


def _best_by_brute_force(specs: list[object], oracle: ThroughputOracle) -> float:
    """The most normalised progress a round can make with every job running, alone or in a
    pair that does more than either of its jobs alone on that GPU (hetero_pack's rule)."""
    gpus = [(n.flavor, n.gpus) for n in ONE_EACH.nodes]
    best = 0.0

    def alone(s: object, f: str) -> float:
        return _normalised(s, oracle, oracle.rate(s, f, True))  # type: ignore[arg-type]

    def walk(left: list[object], free: list[str], value: float) -> None:
        nonlocal best
        if not left:
            best = max(best, value)
            return
        first, rest = left[0], left[1:]
        for i, f in enumerate(free):
            others = free[:i] + free[i + 1:]
            a = alone(first, f)
            if a > 0:
                walk(rest, others, value + a)
            for k, second in enumerate(rest):
                b = alone(second, f)
                got = may_share(TABLE, ONE_EACH, first, second, f)  # type: ignore[arg-type]
                if a <= 0 or b <= 0 or isinstance(got, PairRefusal):
                    continue
                pair = (_normalised(first, oracle, got.first_steps_per_s)
                        + _normalised(second, oracle, got.second_steps_per_s))
                if pair > max(a, b):
                    walk(rest[:k] + rest[k + 1:], others, value + pair)

    walk(specs, [f for f, n in gpus for _ in range(n)], 0.0)
    return best


def test_hetero_pack_takes_the_best_flavors_and_pairs_together() -> None:
    # Up to three waiting jobs on one V100, one P100 and one K80: every job runs (the round
    # has a GPU for each), and hetero_pack's flavors and pairs must reach the most normalised
    # progress any assignment reaches, found by trying them all.
    rng = random.Random(5)
    oracle = ThroughputOracle(TABLE, ONE_EACH)
    policy = make_policy("hetero_pack", {"min_gain": 0.0})
    paired = 0
    for case in range(40):
        types = [rng.choice(ONE_GPU_TYPES) for _ in range(rng.randint(2, 3))]
        views_ = [view(make_job(f"j{i}", job_type=t, steps=1e6, submit_s=float(i)))
                  for i, t in enumerate(types)]
        d = _decide_on(ONE_EACH, policy, *views_)
        placements = d.placements  # type: ignore[attr-defined]
        assert set(placements) == {v.job_id for v in views_}, case
        by_id = {v.job_id: v.spec for v in views_}
        value = 0.0
        for jid, p in placements.items():
            if p.colocated_with:
                got = may_share(TABLE, ONE_EACH, by_id[jid], by_id[p.colocated_with[0]],
                                p.flavor)
                assert isinstance(got, PairRates)
                value += _normalised(by_id[jid], oracle, got.first_steps_per_s)
                paired += 1
            else:
                value += _normalised(by_id[jid], oracle, oracle.rate(by_id[jid], p.flavor, True))
        assert value == pytest.approx(_best_by_brute_force([v.spec for v in views_], oracle),
                                      rel=1e-9), (case, types)
    assert paired >= 10  # pairs were in play, not only flavors


def test_hetero_pack_gives_the_fast_gpu_to_the_job_expected_to_end_sooner_when_close() -> None:
    # One V100, one K80, two exclusive jobs (no pairs). By normalised throughput alone the old
    # ResNet-18 takes the V100 (the default): it keeps 10 % of its speed on a K80, the LM 26 %.
    # Weighing each job by (expected hours left)^-0.1 (``short_first``) -- the LM is young
    # (under an hour expected), the ResNet-18 has run 20 h (tens of hours expected) -- tips the
    # V100 to the LM.
    r18 = "ResNet-18 (batch size 128)"
    oracle = ThroughputOracle(TABLE, MIXED)
    young = view(make_job("young", job_type="LM (batch size 20)", steps=1e7, exclusive=True,
                          submit_s=1.0))
    old_spec = make_job("old", job_type=r18, steps=1e9, exclusive=True)
    old = view(old_spec, remaining_steps=1e9 - 20 * 3600 * oracle.best_rate(old_spec))
    alike = _flavors(_decide_on(MIXED, make_policy("hetero_pack"), young, old))
    assert alike == {"young": (_K80, ()), "old": (V100, ())}
    weighed = _flavors(_decide_on(MIXED, make_policy("hetero_pack", {"short_first": 0.1}),
                                  young, old))
    assert weighed == {"young": (V100, ()), "old": (_K80, ())}


def test_hetero_pack_keeps_running_pairs_together_and_gangs_keep_their_fallbacks() -> None:
    from tessera.sched.packing.slots import PairOption, SlotPlan
    from tessera.sched.policies.hetero_pack_slots import (
        Member,
        PairWay,
        fill_slots,
        ranked_candidates,
    )

    # Two ResNet-18s (a1, a2) each share a V100 with a ResNet-50 (a1 with b2, a2 with b1).
    # The plan keeps two such pairs; by rank alone a1 would take b1 -- both pairs would swap
    # partners and restart. They are kept as they run.
    a1, a2 = (Member(JobId(n), V100, JobId(p)) for n, p in (("a1", "b2"), ("a2", "b1")))
    b1, b2 = (Member(JobId(n), V100, JobId(p)) for n, p in (("b1", "a2"), ("b2", "a1")))
    option = PairOption(0, 1, V100, 1.5)
    where, partner_of = fill_slots([[a1, a2], [b1, b2]], [{V100: 1.0}, {V100: 1.0}], [option],
                              [PairWay(True, 0.8, 0.7)], SlotPlan({}, {0: 2}, 3.0))
    assert partner_of == {"b2": "a1", "b1": "a2"}
    assert where == {"a1": V100, "a2": V100}
    # A job alone on the K80 keeps it over a higher-ranked member of its group.
    x, y = Member(JobId("x"), None, None), Member(JobId("y"), _K80, None)
    where, _p = fill_slots([[x, y]], [{_K80: 0.3, V100: 1.0}], [], [],
                      SlotPlan({(0, _K80): 1, (0, V100): 1}, {}, 1.3))
    assert where == {"y": _K80, "x": V100}
    # The planned flavor first, the job's other flavors right after it (a gang the plan's
    # flavor cannot hold still comes before lower-ranked jobs); partners left out.
    base = Ranking(((JobId("g"), V100), (JobId("g"), _K80), (JobId("h"), _K80),
                    (JobId("p"), V100)))
    got = ranked_candidates(base, {JobId("g"): _K80, JobId("h"): _K80}, {JobId("p"): JobId("h")})
    assert got == (("g", _K80), ("g", V100), ("h", _K80))


def test_hetero_pack_without_a_plan_keeps_the_gittins_flavors_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tessera.sched.policies.hetero_pack as hp

    monkeypatch.setattr(hp, "plan_slots", lambda *_a, **_k: "Time limit reached")
    a = view(make_job("a", job_type=R18_16, steps=1e6))
    b = view(make_job("b", job_type=R18_64, steps=1e6, submit_s=1.0))
    snap = snapshot(MIXED, a, b, round_s=360.0)
    ctx = PolicyContext(snap, ThroughputOracle(TABLE, MIXED), random.Random(0))
    policy = make_policy("hetero_pack")
    got = policy.rank(ctx)
    assert not got.colocate
    assert any("slot programme: HiGHS ended with Time limit reached" in f
               for f in got.fallbacks)
    base = make_policy("hetero_gittins").rank(ctx)
    assert [j for j, _f in got.candidates] == [j for j, _f in base.candidates]


def test_hetero_pack_leaves_gangs_on_the_base_flavors_and_out_of_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tessera.sched.policies.hetero_pack as hp
    from tessera.sched.policies.hetero_gittins import HeteroGittins

    # A 2-GPU gang and a one-GPU job on a 4-GPU V100 server and a 2-GPU K80 server. The
    # programme counts GPUs per flavor, not servers, so the gangs the order runs keep the base
    # ranking's flavors and their GPUs leave the programme's capacity; only one-GPU jobs are
    # planned.
    seen: list[tuple[list[object], dict[str, int]]] = []
    real = hp.plan_slots

    def spy(groups: list[object], options: object, capacity: dict[str, int],
            solver: object) -> object:
        seen.append((list(groups), dict(capacity)))
        return real(groups, options, capacity, solver)  # type: ignore[arg-type]

    monkeypatch.setattr(hp, "plan_slots", spy)
    cluster = make_cluster().node("v100", gpus=4).node("k80", gpus=2).build()
    jobs = [view(make_job("g1", job_type=R50_64, gpus=2, steps=1e6)),
            view(make_job("s1", job_type=R18_16, steps=1e6, submit_s=2.0))]
    snap = snapshot(cluster, *jobs, round_s=360.0)
    ctx = PolicyContext(snap, ThroughputOracle(TABLE, cluster), random.Random(0))
    policy = make_policy("hetero_pack")
    got = policy.rank(ctx)
    base = HeteroGittins.rank(policy, ctx)
    gang_flavor = next(f for j, f in base.candidates if j == "g1")
    assert next(f for j, f in got.candidates if j == "g1") == gang_flavor
    assert "g1" not in got.colocate and "g1" not in got.colocate.values()
    groups, capacity = seen[-1]
    assert all(g.gpus == 1 for g in groups)  # type: ignore[attr-defined]
    assert sum(capacity.values()) == 4  # six GPUs, the gang's two taken out
