"""SimJob bookkeeping: advancing in one call per event or in one call for many events."""

from __future__ import annotations

import pickle
import random

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.model.jobs import JobState
from tessera.sched.core.snapshot import JobView, Placement
from tessera.sim.catchup import catch_up
from tessera.sim.state import SimJob, new_view
from tessera.sim.steps import steps_from
from tests.builders import make_job

_K80 = resolve_flavor("K80")
_V100_16GB = resolve_flavor("V100-16GB")

_V100, _K80 = _V100_16GB, _K80


def _running(gpus: int, placement: Placement, steps: float, rate: float,
             progress_from_s: float) -> SimJob:
    j = SimJob(make_job("j", gpus=gpus, steps=steps), 0, 0)
    j.state = JobState.RUNNING
    j.placement = placement
    j.rate = rate
    j.last_update_s = 0.0
    j.progress_from_s = progress_from_s
    j.run_s = {_K80: 12.5}
    return j


def _books(j: SimJob) -> tuple[object, ...]:
    return (j.attained_gpu_s, j.remaining, dict(j.run_s), dict(j.busy_gpu_s), j.last_update_s,
            j.view is None)


@pytest.mark.parametrize("placement,gpus", [
    (Placement.of(_V100_16GB, (("v", 2),)), 2),
    (Placement.of(_V100, (("v", 1),)), 2),  # (a gang smaller than its spec: share n / g)
    (Placement.mixed((("v", _V100, 1), ("k", _K80, 2))), 3),
])
@pytest.mark.parametrize("steps", [1e9, 500.0])  # (the second runs out: remaining clamps at 0)
def test_advance_each_matches_advancing_at_every_event_bit_for_bit(
    placement: Placement, gpus: int, steps: float
) -> None:
    rng = random.Random(7)
    times = sorted(rng.uniform(0, 5000) for _ in range(300))
    times += [times[-1], times[10]]  # repeated and earlier times are no-ops in both
    one = _running(gpus, placement, steps, 0.731, progress_from_s=times[20] + 0.1)
    many = _running(gpus, placement, steps, 0.731, progress_from_s=times[20] + 0.1)
    for t in times:
        one.advance(t)
    many.advance_each(times)
    assert _books(one) == _books(many)
    stopped = _running(gpus, placement, steps, 0.731, 0.0)
    stopped.state = JobState.PENDING
    stopped.advance_each(times)
    assert stopped.attained_gpu_s == 0.0 and stopped.last_update_s == max(times)


@pytest.mark.parametrize("steps", [1e9, 900.0])  # (the second runs out: remaining clamps at 0)
def test_jobs_sharing_one_round_of_steps_match_advancing_at_every_event(steps: float) -> None:
    """A round's catch-up hands every running job the same cache of step lengths (per last
    update): jobs whose progress has begun take the short path, those still restoring or
    running a partial gang the long one, and each ends where advancing at every event would."""
    rng = random.Random(11)
    times = sorted(rng.uniform(0, 3000) for _ in range(40))
    whole = Placement.of(_V100_16GB, (("v", 2),))
    cases = [  # (placement, gang size, last update, progress from)
        (whole, 2, 0.0, 0.0), (whole, 2, 0.0, 0.0), (whole, 2, times[5], times[5]),
        (whole, 2, times[5], times[5] + 30.0), (whole, 2, 0.0, times[3] + 0.5),
        (Placement.of(_V100_16GB, (("v", 1),)), 2, 0.0, 0.0),
        (whole, 2, times[-1] + 1.0, 0.0),  # (nothing left to step through)
    ]
    cache: dict[float, tuple[list[float], float]] = {}
    for placement, gpus, last_s, from_s in cases:
        one = _running(gpus, placement, steps, 0.731, from_s)
        many = _running(gpus, placement, steps, 0.731, from_s)
        one.last_update_s = many.last_update_s = last_s
        for t in times:
            one.advance(t)
        many.advance_each(times, cache)
        assert _books(one) == _books(many)
    assert set(cache) == {0.0, times[5], times[-1] + 1.0}


def test_steps_skip_times_not_past_the_last_one() -> None:
    assert steps_from([5.0, 3.0, 7.0, 7.0, 6.0], 4.0) == ([1.0, 2.0], 7.0)
    assert steps_from([1.0, 2.0], 4.0) == ([], 4.0)


def test_new_view_equals_the_dataclass_built_view() -> None:
    j = _running(2, Placement.of(_V100_16GB, (("v", 2),)), 1e6, 0.5, 3.0)
    fields = (j.spec, JobState.RUNNING, 11.0, j.placement, 12.0, ((_K80, 1.5),), 13.0, None,
              2, 16.0, 0.5, 3.0)
    fast, built = new_view(*fields), JobView(*fields)
    assert fast == built and hash(fast) == hash(built) and repr(fast) == repr(built)
    with pytest.raises(AttributeError):
        fast.remaining_steps = 1.0  # type: ignore[misc]


def test_advance_each_with_no_later_time_changes_nothing() -> None:
    j = _running(1, Placement.of(_V100_16GB, (("v", 1),)), 1e6, 1.0, 0.0)
    j.last_update_s = 100.0
    j.view = j.to_view()
    j.advance_each([50.0, 100.0])
    assert j.run_s == {_K80: 12.5} and j.busy_gpu_s == {} and j.view is not None


def test_placement_derived_values_are_fixed_at_construction() -> None:
    mixed = Placement.mixed((("v", _V100, 3), ("k", _K80, 2), ("v2", _V100, 1)))
    assert mixed.num_gpus == 6 and mixed.is_mixed and not mixed.consolidated
    assert mixed.flavor_counts() == ((_K80, 2), (_V100, 4))
    assert mixed.gpus_of(_V100) == 4 and mixed.label == "K80+V100-16GB"
    assert mixed.flavors == (_K80, _V100) and mixed.sole_flavor is None
    with pytest.raises(ValueError, match="mixed gang"):
        _ = mixed.flavor
    one = Placement.of(_K80, (("k", 4),))
    assert one.num_gpus == 4 and one.consolidated and not one.is_mixed
    assert one.flavor_counts() == ((_K80, 4),) and one.flavor is _K80 and one.label == "K80"
    # Equality, hashing and repr see only the four real fields.
    same = Placement.of(_K80, (("k", 4),))
    assert one == same and hash(one) == hash(same) and {one: 1}[same] == 1
    assert repr(one) == ("Placement(flavors=(GpuFlavor('K80'),), gpus_by_node=(('k', 4),), "
                         "node_flavors=(), "
                         "global_batch_samples=None)")
    assert one != Placement.of(_K80, (("k", 4),), global_batch_samples=512)
    assert one != Placement.of(_K80, (("k", 4),), global_batch_samples=256)
    back = pickle.loads(pickle.dumps(mixed))
    assert back == mixed and back.flavor_counts() == mixed.flavor_counts()
    with pytest.raises(AttributeError):
        one.num_gpus = 5  # type: ignore[misc]


def test_to_view_copies_each_field_to_its_namesake() -> None:
    j = _running(2, Placement.of(_V100_16GB, (("v", 2),)), 1e6, 0.5, 3.0)
    j.remaining, j.attained_gpu_s, j.pending_since_s = 11.0, 12.0, 13.0
    j.last_run_end_s, j.attempts, j.last_update_s = 14.0, 15, 16.0
    v = j.to_view()
    assert (v.spec, v.state, v.placement) == (j.spec, JobState.RUNNING, j.placement)
    assert (v.remaining_steps, v.attained_gpu_s) == (11.0, 12.0)
    assert v.run_s_by_flavor == ((_K80, 12.5),)
    assert (v.pending_since_s, v.last_run_end_s, v.attempts) == (13.0, 14.0, 15)
    assert (v.as_of_s, v.progress_rate, v.progress_from_s) == (16.0, 0.5, 3.0)
    assert j.to_view() is v


@pytest.mark.parametrize("n_times", [1, 2, 40])
@pytest.mark.parametrize("steps", [1e9, 900.0])  # (the second runs out: remaining clamps at 0)
def test_catch_up_equals_advance_each_per_job_and_builds_current_views(
        n_times: int, steps: float) -> None:
    """A round's catch-up (one loop over every running job, views built on the way) leaves each
    job's books as ``advance_each`` does, bit for bit, and its view equal to one built anew."""
    rng = random.Random(5)
    times = sorted(rng.uniform(0, 3000) for _ in range(n_times))
    whole = Placement.of(_V100_16GB, (("v", 2),))
    mixed = Placement.mixed((("v", _V100, 1), ("k", _K80, 2)))
    cases = [  # (placement, gang size, last update, progress from, busy GPU-s before)
        (whole, 2, 0.0, 0.0, None), (whole, 2, 0.0, 0.0, 7.25),
        (whole, 2, times[0] / 2, times[0] / 2, None), (whole, 2, 0.0, times[-1] / 2, None),
        (Placement.of(_V100_16GB, (("v", 1),)), 2, 0.0, 0.0, None), (mixed, 3, 0.0, 0.0, None),
        (whole, 2, times[-1] + 1.0, 0.0, None),  # (nothing left to step through)
    ]
    stale: dict[int, None] = {}
    ours, theirs = [], []
    for i, (placement, gpus, last_s, from_s, busy) in enumerate(cases):
        pair = (_running(gpus, placement, steps, 0.731, from_s),
                _running(gpus, placement, steps, 0.731, from_s))
        for j in pair:
            j.idx, j.last_update_s = i, last_s
            if busy is not None:
                j.busy_gpu_s = {_V100_16GB: busy}
            j.to_view()  # (a view kept from before: dropped, or replaced, only if advanced)
        pair[0].stale = stale
        ours.append(pair[0])
        theirs.append(pair[1])
    catch_up(ours, times)
    cache: dict[float, tuple[list[float], float]] = {}
    for j in theirs:
        j.advance_each(times, cache)
    for a, b in zip(ours, theirs, strict=True):
        assert _books(a)[:-1] == _books(b)[:-1]
        built = new_view(a.spec, a.state, a.remaining, a.placement, a.attained_gpu_s,
                         tuple(a.run_s.items()), a.pending_since_s, a.last_run_end_s,
                         a.attempts, a.last_update_s, a.rate, a.progress_from_s)
        assert a.to_view() == built
    assert set(stale) == {i for i, j in enumerate(theirs) if j.view is None}


@pytest.mark.parametrize("n_times", [1, 3, 40])
@pytest.mark.parametrize("array_min_jobs", [1, 10_000])  # (arrays for every group; for none)
def test_catch_up_of_large_groups_equals_advancing_at_every_event(
        n_times: int, array_min_jobs: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many whole gangs from a few last updates (the round catch-up's common case, taken as
    arrays when a group is large): books bit for bit as advancing each job at every event,
    views current, and the jobs note themselves stale in their own order, whichever path."""
    monkeypatch.setattr("tessera.sim.catchup.ARRAY_MIN_JOBS", array_min_jobs)
    rng = random.Random(11)
    times = sorted(rng.uniform(0, 4000) for _ in range(n_times))
    lasts = [0.0, times[0] / 3, times[-1] + 5.0]  # (the last: nothing left to step through)
    stale: dict[int, None] = {99: None}  # (a job already stale keeps its place)
    ours, theirs = [], []
    for i in range(60):
        gpus = rng.choice([1, 2, 4, 8])
        flavor = rng.choice([_K80, _V100_16GB])
        steps = rng.choice([1e9, 1e9, 300.0, 1.0])  # (some run out: remaining clamps at 0)
        rate = rng.uniform(0.1, 3)
        pair = [_running(gpus, Placement.of(flavor, (("n", gpus),)), steps, rate, 0.0)
                for _ in range(2)]
        attained = rng.choice([0, rng.uniform(0, 1e5)])  # (an int 0: a job's first steps)
        last = rng.choice(lasts)
        for j in pair:
            j.idx, j.last_update_s, j.attained_gpu_s = i, last, attained
            if i % 3:
                j.busy_gpu_s = {flavor: attained * 0.75}
            j.to_view()
        pair[0].stale = stale
        ours.append(pair[0])
        theirs.append(pair[1])
    rng.shuffle(ours)
    catch_up(ours, times)
    for j in theirs:
        for t in times:
            j.advance(t)
    by_idx = {j.idx: j for j in theirs}
    for a in ours:
        b = by_idx[a.idx]
        assert _books(a)[:-1] == _books(b)[:-1]
        if b.view is None:  # (advanced: floats, as Python's own sums give)
            assert all(type(v) is float for v in (a.attained_gpu_s, a.remaining))
        built = new_view(a.spec, a.state, a.remaining, a.placement, a.attained_gpu_s,
                         tuple(a.run_s.items()), a.pending_since_s, a.last_run_end_s,
                         a.attempts, a.last_update_s, a.rate, a.progress_from_s)
        assert a.to_view() == built
    assert list(stale) == [99] + [j.idx for j in ours if by_idx[j.idx].view is None
                                  and j.idx != 99]
