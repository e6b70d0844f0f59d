"""The slot programme: exact against brute force, integral where its LP relaxation is not,
and clear about what it cannot do."""

from __future__ import annotations

import itertools
import random

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.sched.core.lp import LpSolver
from tessera.sched.packing.slots import PairOption, SlotGroup, SlotPlan, plan_slots

_K80 = resolve_flavor("K80")
_V100 = resolve_flavor("V100")


def _brute_force(groups: list[SlotGroup], options: list[PairOption],
                 capacity: dict[str, int]) -> float | None:
    """The best value over every way to give each job (groups expanded) nothing, a solo slot
    or one side of a pair option; ``None`` when no way meets every group's ``must``."""
    jobs = [g for g, grp in enumerate(groups) for _ in range(grp.members)]
    best: float | None = None

    def walk(i: int, left: dict[str, int], taken: list[bool], value: float,
             running: list[int]) -> None:
        nonlocal best
        if i == len(jobs):
            if all(running[g] >= grp.must for g, grp in enumerate(groups)):
                best = value if best is None else max(best, value)
            return
        if taken[i]:
            walk(i + 1, left, taken, value, running)
            return
        g = jobs[i]
        gpus = groups[g].gpus
        walk(i + 1, left, taken, value, running)  # no slot
        for f, v in groups[g].solo.items():
            if left.get(f, 0) >= gpus:
                left[f] -= gpus
                running[g] += 1
                walk(i + 1, left, taken, value + v, running)
                running[g] -= 1
                left[f] += gpus
        for o in options:
            if g not in (o.first, o.second) or left.get(o.flavor, 0) < gpus:
                continue
            other = o.second if o.first == g else o.first
            for k in range(i + 1, len(jobs)):
                if jobs[k] == other and not taken[k]:
                    taken[k] = True
                    left[o.flavor] -= gpus
                    running[g] += 1
                    running[other] += 1
                    walk(i + 1, left, taken, value + o.value, running)
                    running[g] -= 1
                    running[other] -= 1
                    left[o.flavor] += gpus
                    taken[k] = False

    walk(0, dict(capacity), [False] * len(jobs), 0.0, [0] * len(groups))
    return best


def _random_case(rng: random.Random) -> tuple[list[SlotGroup], list[PairOption], dict[str, int]]:
    flavors = [_V100, _K80][: rng.randint(1, 2)]
    groups = []
    for _ in range(rng.randint(1, 3)):
        members = rng.randint(1, 2)
        solo = {f: round(rng.uniform(0.1, 1.0), 3) for f in flavors if rng.random() < 0.85}
        groups.append(SlotGroup(gpus=rng.choice([1, 1, 2]), members=members,
                                must=rng.randint(0, members), solo=solo))
    options = []
    for a, b in itertools.combinations_with_replacement(range(len(groups)), 2):
        for f in flavors:
            if (groups[a].gpus == groups[b].gpus and f in groups[a].solo
                    and f in groups[b].solo and rng.random() < 0.6):
                options.append(PairOption(a, b, f, round(rng.uniform(0.5, 1.8), 3)))
    capacity = {f: rng.randint(0, 3) for f in flavors}
    return groups, options, capacity


def _check_plan(plan: SlotPlan, groups: list[SlotGroup], options: list[PairOption],
                capacity: dict[str, int]) -> None:
    """The plan keeps every rule of the programme, and its value is what it claims."""
    used = dict.fromkeys(capacity, 0)
    running = [0] * len(groups)
    value = 0.0
    for (g, f), k in plan.solo.items():
        used[f] += k * groups[g].gpus
        running[g] += k
        value += k * groups[g].solo[f]
    for o, k in plan.pairs.items():
        opt = options[o]
        used[opt.flavor] += k * groups[opt.first].gpus
        running[opt.first] += k
        running[opt.second] += k
        value += k * opt.value
    assert all(used[f] <= capacity[f] for f in capacity)
    assert all(grp.must <= running[g] <= grp.members for g, grp in enumerate(groups))
    assert value == pytest.approx(plan.value)


def test_plan_is_the_brute_force_optimum_on_small_cases() -> None:
    rng = random.Random(12)
    solver = LpSolver()
    checked = infeasible = 0
    for _ in range(300):
        groups, options, capacity = _random_case(rng)
        want = _brute_force(groups, options, capacity)
        got = plan_slots(groups, options, capacity, solver)
        if want is None:
            assert got == "infeasible"
            infeasible += 1
            continue
        assert isinstance(got, SlotPlan), got
        _check_plan(got, groups, options, capacity)
        assert got.value == pytest.approx(want, abs=1e-9)
        checked += 1
    assert checked > 150 and infeasible > 10  # both branches were exercised


def test_three_jobs_that_pair_well_take_one_pair_not_three_halves() -> None:
    # Three one-job groups on two GPUs, every two pairing for 1.5, each alone worth 0.1: the
    # LP relaxation takes half of each pair (2.25); the programme takes one whole pair and
    # the third job alone (1.6).
    groups = [SlotGroup(1, 1, 0, {_V100: 0.1}) for _ in range(3)]
    options = [PairOption(a, b, _V100, 1.5) for a, b in ((0, 1), (0, 2), (1, 2))]
    got = plan_slots(groups, options, {_V100: 2}, LpSolver())
    assert isinstance(got, SlotPlan)
    assert got.value == pytest.approx(1.6)
    assert sum(got.pairs.values()) == 1 and sum(got.solo.values()) == 1


def test_jobs_that_must_run_keep_a_slot_even_when_a_pair_elsewhere_is_worth_more() -> None:
    # Two GPUs. Group 0 (one job) must run; two waiting jobs pair for 1.9 on either GPU. The
    # programme keeps job 0 and puts the pair on the other GPU, never dropping job 0.
    groups = [SlotGroup(1, 1, 1, {_V100: 0.2}), SlotGroup(1, 2, 0, {_V100: 1.0})]
    options = [PairOption(1, 1, _V100, 1.9)]
    got = plan_slots(groups, options, {_V100: 2}, LpSolver())
    assert isinstance(got, SlotPlan)
    assert got.solo == {(0, _V100): 1} and got.pairs == {0: 1}
    assert got.value == pytest.approx(2.1)


def test_more_must_run_than_gpus_is_infeasible_not_a_guess() -> None:
    groups = [SlotGroup(1, 3, 3, {_V100: 1.0})]
    assert plan_slots(groups, [], {_V100: 2}, LpSolver()) == "infeasible"
    assert plan_slots(groups, [], {}, LpSolver()) == "infeasible"
    assert plan_slots([SlotGroup(1, 1, 0, {})], [], {_V100: 1}, LpSolver()) == SlotPlan(
        {}, {}, 0.0)


def test_bad_groups_and_options_are_errors() -> None:
    with pytest.raises(ValueError, match="cannot have 3 that must run"):
        SlotGroup(1, 2, 3, {_V100: 1.0})
    with pytest.raises(ValueError, match="at least one GPU"):
        SlotGroup(0, 1, 0, {_V100: 1.0})
    groups = [SlotGroup(1, 1, 0, {_V100: 1.0}), SlotGroup(2, 1, 0, {_V100: 1.0})]
    with pytest.raises(ValueError, match="out of range"):
        plan_slots(groups, [PairOption(0, 5, _V100, 1.0)], {_V100: 2}, LpSolver())
    with pytest.raises(ValueError, match="gangs of 1 and 2 GPUs"):
        plan_slots(groups, [PairOption(0, 1, _V100, 1.0)], {_V100: 2}, LpSolver())
