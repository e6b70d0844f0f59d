"""The tenancy values' load-time checks (sched/core/quotas.py): every bad object is refused
with the object and the field named."""

from __future__ import annotations

import pytest

from tessera.errors import SpecError
from tessera.model.gpus import resolve_flavor
from tessera.sched.core.quotas import Cohort, FlavorQuota, QueueQuota
from tessera.sched.core.tenancy import FairSharing, LocalQueue, Tenancy

A100 = resolve_flavor("A100")
V100 = resolve_flavor("V100")


def _tree(**queues: QueueQuota) -> dict[str, QueueQuota]:
    return dict(queues)


def test_per_flavor_totals_are_derived() -> None:
    q = QueueQuota.per_flavor("a", {A100: FlavorQuota(4, 2, 1), V100: FlavorQuota(8, 0, 0)})
    assert (q.nominal_gpus, q.borrowing_limit_gpus, q.lending_limit_gpus) == (12, 2, 1)
    assert q.by_flavor
    unlimited = QueueQuota.per_flavor("b", {A100: FlavorQuota(4), V100: FlavorQuota(8, 0)})
    assert unlimited.borrowing_limit_gpus is None and unlimited.lending_limit_gpus is None
    assert not QueueQuota("c", 8).by_flavor


@pytest.mark.parametrize("quota, message", [
    (QueueQuota("a", -1), "queue 'a': nominal_gpus must be >= 0"),
    (QueueQuota("a", 2.5), "queue 'a': nominal_gpus must be a whole number"),  # type: ignore[arg-type]
    (QueueQuota("a", 4, -2), "queue 'a': borrowing_limit_gpus must be >= 0"),
    (QueueQuota("a", 4, None, -0.5), "queue 'a': weight must be a number >= 0"),
    (QueueQuota("a", 4, lending_limit_gpus=5), "lending_limit_gpus (5) exceeds nominal_gpus"),
    (QueueQuota.per_flavor("a", {A100: FlavorQuota(-3)}),
     "queue 'a' flavor 'NVIDIA-A100-SXM4-80GB': nominal_gpus must be >= 0"),
    (QueueQuota("a", 4, min_admitted_s=0.0), "min_admitted_s must be a positive"),
])
def test_bad_numbers_are_refused_with_the_field(quota: QueueQuota, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Tenancy(queues={"a": quota}).check()


def test_weight_zero_is_allowed() -> None:
    Tenancy(queues={"a": QueueQuota("a", 4, None, 0.0)}).check()


def test_missing_cohort_and_parent_are_named() -> None:
    with pytest.raises(SpecError, match="queue 'a': cohort 'nowhere' does not exist"):
        Tenancy(queues={"a": QueueQuota("a", 4, cohort="nowhere")}).check()
    with pytest.raises(SpecError, match="cohort 'c': parent 'p' does not exist"):
        Tenancy(cohorts={"c": Cohort("c", parent="p")}).check()


def test_cycle_of_cohorts_is_refused() -> None:
    cohorts = {"x": Cohort("x", "y"), "y": Cohort("y", "z"), "z": Cohort("z", "x")}
    with pytest.raises(SpecError, match="cycle of cohorts x -> y -> z -> x"):
        Tenancy(cohorts=cohorts).check()
    ok = {"root": Cohort("root"), "mid": Cohort("mid", "root"), "leaf": Cohort("leaf", "mid")}
    t = Tenancy(cohorts=ok)
    t.check()
    assert t.ancestors("leaf") == ("leaf", "mid", "root") and t.root("leaf") == "root"


def test_quota_for_a_flavor_the_cluster_lacks() -> None:
    t = Tenancy(queues={"a": QueueQuota.per_flavor("a", {A100: FlavorQuota(4)})})
    t.check()  # no cluster given: not checked
    with pytest.raises(SpecError, match="queue 'a': quota for flavor 'NVIDIA-A100-SXM4-80GB', "
                                        "which the cluster does not have"):
        t.check([V100])


def test_local_queue_pointing_nowhere() -> None:
    t = Tenancy(queues={"a": QueueQuota("a", 4)},
                local_queues={"team-a": LocalQueue("team-a", "ns", "b")})
    with pytest.raises(SpecError, match="local queue 'team-a': cluster_queue 'b' does not exist"):
        t.check()
    good = Tenancy(queues={"a": QueueQuota("a", 4)},
                   local_queues={"team-a": LocalQueue("team-a", "ns", "a")})
    good.check()
    assert good.cluster_queue("team-a") == "a" and good.cluster_queue("a") == "a"
    assert good.cluster_queue("zzz") is None


def test_one_tree_counts_one_way() -> None:
    t = Tenancy(queues={"a": QueueQuota("a", 4, cohort="c"),
                        "b": QueueQuota.per_flavor("b", {A100: FlavorQuota(4)}, cohort="c")},
                cohorts={"c": Cohort("c")})
    with pytest.raises(SpecError, match="share cohort tree 'c'"):
        t.check()


def test_fair_sharing_half_life_must_be_positive() -> None:
    with pytest.raises(SpecError, match="usage_half_life_s must be > 0"):
        Tenancy(fair_sharing=FairSharing(True, usage_half_life_s=0.0)).check()
