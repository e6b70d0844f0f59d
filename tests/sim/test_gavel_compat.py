"""``--compat gavel`` against outcomes derived by hand from Gavel's mechanism.

Every expected value below is worked out step by step from ``docs/gavel-mechanism.md``
(Gavel's ``scheduler.py`` @ c4fa400), not by running our code: the derivation is in each test's
comment. ``L`` is one Gavel round of ResNet-18 (bs 64) on a V100: ``int(24.09·360) = 8673``
steps take ``8673 / 24.09 = 359.98 s``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tessera.model.gpus import resolve_flavor
from tessera.perf.profiles import default_throughputs
from tessera.sched.catalog import make_policy
from tessera.sched.gavel.compat import GavelState, gavel_compat_policy
from tessera.sim.config import SimConfig
from tessera.sim.engine import simulate
from tests.builders import RESNET, make_cluster, make_job, make_workload

T = default_throughputs()
V100 = T.throughput(RESNET, resolve_flavor("v100"))
P100 = T.throughput(RESNET, resolve_flavor("p100"))
K80 = T.throughput(RESNET, resolve_flavor("k80"))
KV = int(V100 * 360)  # steps per round on a V100
L = KV / V100  # one full V100 round, just under 360 s
GAVEL = SimConfig(compat="gavel", compat_solver="highs")


def jcts(r: object) -> dict[str, float | None]:
    return {j.job_id: j.jct_s for j in r.jobs}  # type: ignore[attr-defined]


def test_compat_swaps_in_gavel_twins_only_for_gavel_policies() -> None:
    for name in ("fifo", "fifo-agnostic", "max_min_fairness", "finish_time_fairness-agnostic"):
        p = make_policy(name)
        twin = gavel_compat_policy(p, seed=3)
        assert twin is not p and twin.display_name == p.display_name
    las = make_policy("las")
    assert gavel_compat_policy(las) is las


def test_fifo_gate_idle_jump_and_drained_reset() -> None:
    """fifo_perf on one V100.

    t=0: A arrives; reset at 0 (the reset time stays 0, so the gate stays open); A → v100.
    A runs three rounds [0, L], [L, 2L], [2L, 3L]. At L, B's arrival (t=100) triggers an
    immediate reset (last reset == 0): fifo_perf re-plans from scratch, A keeps the only V100,
    B gets no type (priority 0 everywhere, refused). At 3L A completes, but only 2L passed since
    the reset at L (< 1920 s): no recompute, B stays refused, nothing runs. C is still queued,
    so time jumps to C's arrival at 10 000 s, where the reset finally happens: B → v100, C waits.
    B runs one round and completes at 10 000 + L; 1920 s have not passed, so C cannot start,
    nothing runs; the queue is now empty and nothing ran, so Gavel forces a reset at the same
    instant (``_last_reset_time = 0``) and C runs one round.
    """
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(
        make_job("0", steps=3 * KV),
        make_job("1", steps=KV, submit_s=100),
        make_job("2", steps=KV, submit_s=10_000),
    )
    got = jcts(simulate(w, c, "fifo", GAVEL))
    assert got["0"] == pytest.approx(3 * L)
    assert got["1"] == pytest.approx(10_000 + L - 100)
    assert got["2"] == pytest.approx(2 * L)


def test_fifo_perf_replans_at_each_reset_and_round_ends_at_latest_finish() -> None:
    """fifo_perf, one GPU each of v100, p100, k80; three one-round-on-V100 jobs at t=0.

    First allocation (types alphabetical, fastest fitting type): 0 → v100, 1 → p100 (v100 is
    full), 2 → k80. Steps in round 1: int(rate·360) per type; the round ends at the *latest*
    finish, t1 = max(8673/v, 8029/p, 2538/k). Job 0 completes (8673 steps) → reset at t1 (last
    reset was 0): fifo_perf starts over in id order: 1 → v100 (its best), 2 → p100. Job 1 has
    8673 − 8029 steps left, job 2 8673 − 2538, each finishing mid-round.
    """
    c = make_cluster().node("v100", gpus=1).node("p100", gpus=1).node("k80", gpus=1).build()
    w = make_workload(*(make_job(str(i), steps=KV) for i in range(3)))
    t1 = max(KV / V100, int(P100 * 360) / P100, int(K80 * 360) / K80)
    got = jcts(simulate(w, c, "fifo", GAVEL))
    assert got["0"] == pytest.approx(L)
    assert got["1"] == pytest.approx(t1 + (KV - int(P100 * 360)) / V100)
    assert got["2"] == pytest.approx(t1 + (KV - int(K80 * 360)) / P100)


def test_fifo_base_mode_bug_piles_jobs_on_v100() -> None:
    """Gavel's ``fifo`` (our ``fifo-agnostic``), seed 0, one GPU each of v100, p100, k80.

    Types sorted: [k80, p100, v100]. Job 0: ``Random(0).randrange(3)`` = 1, but the chosen type
    is the loop variable, v100 (last); v100 hits 0, so the type at index 1 (p100!) is removed →
    [k80, v100]. Job 1: only k80 fits, yet v100 is chosen again (available −1); job 2 likewise.
    All three time-share the V100, p100 and k80 idle. After the reset at 0, priorities tie and
    ids break ties: 0 runs [0, L] and completes (reset at L; base mode keeps 1 and 2 on v100),
    1 runs [L, 2L], then 2 runs [2L, 3L].
    """
    c = make_cluster().node("v100", gpus=1).node("p100", gpus=1).node("k80", gpus=1).build()
    w = make_workload(*(make_job(str(i), steps=KV) for i in range(3)))
    r = simulate(w, c, "fifo-agnostic", GAVEL)
    got = jcts(r)
    assert [got[str(i)] for i in range(3)] == pytest.approx([L, 2 * L, 3 * L])
    util = r.summary.utilization_by_flavor
    assert util["P100"] == 0.0 and util["K80"] == 0.0


def test_max_min_time_slices_by_priority_with_id_ties() -> None:
    """max_min_fairness on one V100, two equal jobs at t=0: shares 0.5 / 0.5 (unique optimum).

    Reset at 0: time 180 each, flavor total 360 → priorities 1 and 1, deficits 0: id order, 0
    runs. At L job 0 has 180 + L, the total 360 + L, so job 1's priority is higher: 1 runs. At
    2L both have 180 + L: tie → 0 runs and completes at 3L; 1 completes at 4L.
    """
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("0", steps=2 * KV), make_job("1", steps=2 * KV))
    for solver in ("highs", "highs-ipm"):
        got = jcts(simulate(w, c, "max_min_fairness",
                            SimConfig(compat="gavel", compat_solver=solver)))
        assert got["0"] == pytest.approx(3 * L) and got["1"] == pytest.approx(4 * L)


def test_new_job_without_share_idles_its_gpu_until_the_gated_reset() -> None:
    """max_min_fairness on four V100s.

    0 and 1 arrive at 0 (reset at 0, shares 1 each). 2 arrives at 100: reset at L (last reset
    was 0), shares 1 for 0, 1, 2. 3 arrives at 500: at 2L an event is pending but only L passed
    since the reset at L. Job 3 has no share: it is picked for the fourth V100 (priority 0, but
    max-min does not refuse it) yet gets no worker, so that GPU idles. The gate opens at the
    first boundary ≥ L + 1920 s: 5L = 1800 s is too early, 6L is not, so the reset is at 7L and
    job 3 runs [7L, 8L].
    """
    c = make_cluster().node("v100", gpus=1, count=4).build()
    w = make_workload(
        make_job("0", steps=20 * KV), make_job("1", steps=20 * KV),
        make_job("2", steps=20 * KV, submit_s=100), make_job("3", steps=KV, submit_s=500),
    )
    r = simulate(w, c, "max_min_fairness", GAVEL)
    assert jcts(r)["3"] == pytest.approx(8 * L - 500)
    assert jcts(r)["2"] == pytest.approx(21 * L - 100)  # 20 rounds from L, never displaced


def test_multi_gpu_job_with_fewer_steps_left_than_gpus_is_dropped() -> None:
    """A 2-GPU job with one step left after its first round: ``1 // 2 == 0`` steps for the
    first worker → a failed micro-task; after 5 in a row Gavel drops it (JCT excluded)."""
    c = make_cluster().node("v100", gpus=1, count=3).build()
    k2 = int(T.throughput(RESNET, resolve_flavor("v100"), 2) * 360)
    w = make_workload(make_job("big", gpus=2, steps=k2 + 1), make_job("ok", steps=KV))
    r = simulate(w, c, "max_min_fairness", GAVEL)
    rec = {j.job_id: j for j in r.jobs}
    assert rec["big"].outcome == "failed" and rec["big"].jct_s is None
    assert rec["big"].failures == 5
    assert r.summary.avg_jct_s == pytest.approx(L)


def test_gang_runs_where_only_its_consolidated_speed_was_measured() -> None:
    """Gavel's ``_throughputs`` are the consolidated table only (it never reads
    ``k80_unconsolidated``), so a job type measured as a 2-GPU gang on K80 *consolidated* but
    only as one GPU *unconsolidated* (ResNet-50, bs 64) still runs there: fifo_perf gives it
    the only type, ``int(1.2636·360) = 454`` steps a round at the consolidated rate, two rounds
    back to back. (Tessera once dropped the flavor because the split speed was missing, and
    rejected the job; on the 120-job multi-GPU agreement trace that made fifo_perf 266 s off.)
    """
    r50 = "ResNet-50 (batch size 64)"
    rate = T.throughput(r50, resolve_flavor("k80"), 2)
    per_round = int(rate * 360)
    assert per_round == 454
    c = make_cluster().node("k80", gpus=1, count=2).build()
    w = make_workload(make_job("big", gpus=2, steps=2 * per_round, job_type=r50))
    for policy in ("fifo", "max_min_fairness"):
        got = {j.job_id: j for j in simulate(w, c, policy, GAVEL).jobs}["big"]
        assert got.outcome == "succeeded"
        assert got.jct_s == pytest.approx(2 * per_round / rate)


def test_max_min_coefficients_are_gavels_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """ECOS returns a different point for coefficients one ulp apart, and identical jobs whose
    priorities tie up to an ulp then swap types. So the LP must get Gavel's bits:
    ``MaxMinFairnessPolicyWithPerf`` computes ``(T · (1/w · 1/P)) · sf`` with ``P`` from
    ``ProportionalPolicy.get_throughputs``: ``x = cap/m`` per row, divided by the largest row
    sum, ``P = np.sum(T · x, axis=1)``. For one CycleGAN job on 12:12:12 the textbook
    ``T · sf / (w · T @ (cap / Σcap))`` is off in the last bit (Tessera computed that once;
    it cost 0.58 s of average JCT on the 40-job multi-GPU agreement trace)."""
    import tessera.sched.gavel.compat as gc

    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    real = gc.max_min_shares

    def spy(p, a, *args, **kw):  # type: ignore[no-untyped-def]
        seen.append((p.tput.copy(), p.capacity.copy(), a.copy()))
        return real(p, a, *args, **kw)

    monkeypatch.setattr(gc, "max_min_shares", spy)
    c = (make_cluster().node("v100", gpus=1, count=12).node("p100", gpus=1, count=12)
         .node("k80", gpus=1, count=12).build())
    simulate(make_workload(make_job("0", steps=KV, job_type="CycleGAN")), c,
             "max_min_fairness", GAVEL)
    tput, cap, coef = seen[0]
    x = np.tile(cap / 1, (1, 1))
    x = x / np.sum(x, axis=1).max()
    prop = np.sum(np.multiply(tput, x), axis=1).reshape((1, 1))
    gavel = np.multiply(tput * np.multiply(np.array([1.0 / 1.0]).reshape((1, 1)), 1.0 / prop),
                        np.ones_like(tput))
    assert np.array_equal(coef, gavel)


def test_policy_state_is_gavel_state_and_deficits_accumulate() -> None:
    """After the run above the state is Gavel's; deficits are never zeroed at resets."""
    c = make_cluster().node("v100", gpus=1).build()
    w = make_workload(make_job("0", steps=2 * KV), make_job("1", steps=8 * KV, submit_s=5000))
    from tessera.sim.engine import Simulator

    pol = make_policy("max_min_fairness")
    sim = Simulator(w, c, pol, GAVEL, T)
    r = sim.run()
    assert isinstance(sim.world.policy_state, GavelState)
    assert r.summary.succeeded == 2 and not math.isnan(r.summary.avg_jct_s)
