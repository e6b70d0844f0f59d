"""``max_sum_throughput`` (Gavel's ``max_sum_throughput_perf``) through the simulator.

The compat test's outcome is derived by hand from ``docs/gavel-mechanism.md``; ``L`` is one
Gavel round of ResNet-18 (bs 64) on a V100 (``int(24.09·360) = 8673`` steps in 359.98 s), ``LR``
one round of Recommendation (bs 1024, 13.28 steps/s on a V100).
"""

from __future__ import annotations

import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import list_policies, make_policy
from tessera.sched.core.settings import SchedulerSettings
from tessera.sched.gavel.compat import gavel_compat_policy
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import RECO, RESNET, busy_simulator, make_cluster, make_job, make_workload

T = default_throughputs()
V100 = T.throughput(RESNET, resolve_flavor("v100"))
RV100 = T.throughput(RECO, resolve_flavor("v100"))
KV = int(V100 * 360)
KR = int(RV100 * 360)
L = KV / V100
LR = KR / RV100


def test_registered_with_a_compat_twin_for_the_aware_form_only() -> None:
    assert "max_sum_throughput" in dict(list_policies())
    aware = make_policy("max_sum_throughput")
    twin = gavel_compat_policy(aware)
    assert twin is not aware and twin.display_name == "max_sum_throughput"
    agnostic = make_policy("max_sum_throughput-agnostic")
    assert gavel_compat_policy(agnostic) is agnostic  # Gavel has no agnostic max-sum


def test_compat_slow_job_starves_until_the_fast_one_completes() -> None:
    """One V100; ResNet-18 (24.09 steps/s) with two rounds of work, Recommendation (13.28) one.

    Reset at 0: the LP gives the V100 wholly to ResNet (24.09 > 13.28): shares 1 and 0, so
    Recommendation's priority is 0 and ResNet runs [0, L] and [L, 2L] and completes. The
    completion is an event and the last reset was at 0, so shares are recomputed at 2L:
    Recommendation alone, share 1; it runs one round, [2L, 2L + LR]. Under max-min fairness
    the two would have alternated.
    """
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("0", steps=2 * KV),
                      make_job("1", steps=KR, job_type=RECO))
    cfg = SimConfig(compat="gavel", compat_solver="highs")
    got = {j.job_id: j for j in simulate(w, c, "max_sum_throughput", cfg).jobs}
    assert got["0"].jct_s == pytest.approx(2 * L)
    assert got["1"].first_start_s == pytest.approx(2 * L)
    assert got["1"].jct_s == pytest.approx(2 * L + LR)
    fair = {j.job_id: j for j in simulate(w, c, "max_min_fairness", cfg).jobs}
    assert fair["1"].first_start_s == pytest.approx(L)


def test_slow_job_waits_for_the_fast_one_in_tessera_rounds() -> None:
    """The same pair under Tessera's own rounds: Recommendation starts only when ResNet ends."""
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("0", steps=4 * KV), make_job("1", steps=KR, job_type=RECO))
    got = {j.job_id: j for j in simulate(w, c, "max_sum_throughput").jobs}
    assert got["0"].finish_s is not None and got["1"].first_start_s is not None
    assert got["1"].first_start_s >= got["0"].finish_s - 1e-6


def test_busy_run_never_over_allocates_and_repeats_exactly() -> None:
    """40 gangs of 1–4 GPUs on 8 V100 + 8 K80: every decision fits the free GPUs, every job
    finishes, and a second run gives the same records."""
    cfg = SimConfig(scheduler=SchedulerSettings(mode="rounds"))
    runs = []
    for _ in range(2):
        sim = busy_simulator("max_sum_throughput", cfg)
        world = sim.world
        decide = world.decide

        def checked(snap, opts=None, decide=decide):  # type: ignore[no-untyped-def]
            d = decide(snap, opts)
            cap = {n.node_id: n.gpus for n in snap.cluster.nodes}
            used: dict[str, int] = {}
            for p in d.placements.values():
                for node, k in p.gpus_by_node:
                    used[node] = used.get(node, 0) + k
            assert all(used[n] <= cap[n] for n in used)
            checked.calls += 1  # type: ignore[attr-defined]
            return d

        checked.calls = 0  # type: ignore[attr-defined]

        world.decide = checked  # type: ignore[method-assign]
        runs.append(sim.run())
        assert checked.calls > 10  # type: ignore[attr-defined]
    a, b = runs
    assert a.summary.succeeded == len(a.jobs) == 40
    assert [(j.job_id, j.finish_s) for j in a.jobs] == [(j.job_id, j.finish_s) for j in b.jobs]
